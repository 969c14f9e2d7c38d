"""`llmhost models`' table: one row per configured model, from the config and each GGUF's header (engine.kinds)."""

from __future__ import annotations

from llmhost.config import HostConfig, ModelConfig
from llmhost.domain.kinds import ModelKind
from llmhost.engine.kinds import FileFacts, file_facts

HEADER = ("NAME", "KIND", "CONTEXT", "SIZE", "QUANT", "TEMPLATE", "ALIASES", "SOURCE")


def _size(size: int | None) -> str:
    if size is None:
        return "-"
    return f"{size / 1e9:.1f}GB" if size >= 1e9 else f"{size / 1e6:.0f}MB"


def _template(facts: FileFacts) -> str:
    return "-" if facts.chat_template is None else ("yes" if facts.chat_template else "no")


def _context(model: ModelConfig, facts: FileFacts) -> str:
    """The window the engine will use: an encoder's learned positions end at its training context, so an embedding
    model gets the smaller of the two (as the decoder sets n_ctx); a causal model gets the configured length."""
    if facts.kind is ModelKind.EMBEDDING and facts.trained_context is not None and model.backend != "openai":
        return str(min(model.context_length, facts.trained_context))
    return str(model.context_length)


def model_rows(config: HostConfig) -> list[str]:
    """The table's lines, header first; SOURCE last (a path may hold spaces)."""
    from llmhost.engine.hub import model_file  # an `hf-repo` model's cached file, if any
    from llmhost.engine.local.models import builtin_installed

    rows = [HEADER]
    for name, model in config.models.items():
        facts = file_facts(name, model, model_file(model))
        size = facts.size
        source = "(built-in)" if facts.source == "built-in" else facts.source
        if facts.source == "built-in" and not builtin_installed(name, config.cache_dir):
            # Its size is a constant of the file it would be: never shown for a file that is not there.
            size, source = None, f"(built-in, not installed: llmhost pull {name})"
        if model.hf_repo is not None:
            source = f"hf:{model.hf_repo}" + ("" if facts.size is not None else " (not pulled)")
        rows.append(
            (
                name,
                facts.kind.value if facts.kind_known else "unknown",
                _context(model, facts),
                _size(size),
                facts.quantization or "-",
                _template(facts),
                ",".join(model.aliases) or "-",
                source,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER) - 1)]
    return [
        "  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[-1]]) for row in rows
    ]
