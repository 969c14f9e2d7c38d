"""`llmhost models`' CONTEXT column is the window the engine uses: an encoder's is capped at its training context
(MiniLM: 512, whatever `context-length` says), a causal model's is the configured length."""

from __future__ import annotations

from llmhost.config import HostConfig, ModelConfig
from llmhost.domain.limits import BUILTIN_FILES, DEFAULT_CONTEXT_LENGTH, DEFAULT_MODEL, MINILM_MODEL
from llmhost.engine.listing import model_rows


def _context(rows: list[str], name: str) -> str:
    [row] = [line.split() for line in rows[1:] if line.split()[0] == name]
    return row[2]


def test_an_embedding_models_context_is_its_trained_window_and_a_causal_ones_the_configured() -> None:
    config = HostConfig(
        models={
            MINILM_MODEL: ModelConfig(),
            DEFAULT_MODEL: ModelConfig(),
            "small-window": ModelConfig(path=None, context_length=256, kind="embedding"),
        }
    )
    rows = model_rows(config)
    assert rows[0].split()[2] == "CONTEXT"
    assert _context(rows, MINILM_MODEL) == str(BUILTIN_FILES[MINILM_MODEL][2]) == "512"
    assert _context(rows, DEFAULT_MODEL) == str(DEFAULT_CONTEXT_LENGTH)
    # A window smaller than the training context is the configured one (no trained context known: configured).
    assert _context(rows, "small-window") == "256"
