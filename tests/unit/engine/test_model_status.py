"""Each model's residency as guests, /v1/models, the metrics listener and `llmhost models --server` show it
(engine/status.py, WIT `list-model-status` 0.2.5), on the local engine over the fake decoder: read without loading,
the converter to the WIT record, the JSON the listener serves and the CLI reads back, the table, and the CLI's
one-line error for a server it cannot reach."""

from __future__ import annotations

import socket
from pathlib import Path

from click.testing import CliRunner

from llmhost.cli import cli
from llmhost.config import KEEP_ALIVE_FOREVER, ModelConfig
from llmhost.domain.limits import U64_MAX
from llmhost.domain.types import InferencingParams
from llmhost.engine.listing import models_url, status_rows
from llmhost.engine.local.engine import LlamaCppEngine
from llmhost.engine.local.fake_decoder import FakeDecoder
from llmhost.engine.local.model import EngineModel
from llmhost.engine.registry import Registry
from llmhost.engine.remote.engine import OpenAIEngine
from llmhost.engine.status import ModelStatus, model_statuses
from llmhost.interfaces.llm_values import model_status_to_wit
from llmhost.run.service import LlmService

MB = 1024 * 1024
GREEDY = InferencingParams(max_tokens=2, temperature=0.0, repeat_penalty=1.0)


def registry() -> Registry:
    """`kept` (kept for good) and `idle` (60 s keep-alive) on the local engine, 100 MB each; `far` on a server."""
    configs = {
        "kept": ModelConfig(slots=1, context_length=64, batch_size=8, keep_alive_s=KEEP_ALIVE_FOREVER),
        "idle": ModelConfig(slots=1, context_length=64, batch_size=8, keep_alive_s=60.0),
        "far": ModelConfig(backend="openai", base_urls=("http://127.0.0.1:9/v1",)),
    }
    local = LlamaCppEngine(
        {name: configs[name] for name in ("kept", "idle")},
        Path("/nonexistent"),
        load=lambda name, config: EngineModel(name, config, FakeDecoder(n_ctx=64, n_batch=8, n_slots=1)),
        size=lambda name, config: 100 * MB,
    )
    # Nothing listens at `far`'s URL: a status of a model served elsewhere asks nothing of its server.
    far = OpenAIEngine({"far": configs["far"]}, cache_dir=Path("/nonexistent"))
    return Registry({"kept": local, "idle": local, "far": far}, configs=configs)


def test_statuses_follow_use_without_loading_and_convert_to_the_wit_record() -> None:
    models = registry()
    try:
        before = model_statuses(models)
        assert [(s.name, s.state, s.memory_bytes, s.loaded) for s in before] == [
            ("kept", "unloaded", 0, False),
            ("idle", "unloaded", 0, False),
            ("far", "remote", 0, False),
        ]
        assert model_statuses(models) == before  # reading loaded nothing
        models.engine("idle").infer("idle", "hello", GREEDY)
        sequence = models.engine("kept").open_sequence("kept")  # an open sequence holds its model: in use, not idle
        kept, idle, far = model_statuses(models)
        sequence.close()
        assert (kept.state, kept.memory_bytes, kept.in_use, kept.idle_s, kept.unload_in_s) == (
                "loaded", 100 * MB, 1, None, None,
            )  # fmt: skip
        assert kept.keep_alive_s is None  # kept for good
        assert idle.loaded and idle.in_use == 0 and idle.idle_s is not None and 0 <= idle.idle_s < 5
        assert idle.keep_alive_s == 60.0 and idle.unload_in_s == 60.0 - idle.idle_s
        assert far == ModelStatus("far", "remote", 0, 0, None, None)

        record = model_status_to_wit(idle)
        assert (record.name, record.state, getattr(record, "memory-bytes"), getattr(record, "in-use")) == (
            "idle", "loaded", 100 * MB, 0,
        )  # fmt: skip
        assert getattr(record, "idle-ms") == round(idle.idle_s * 1000)
        assert getattr(record, "keep-alive-ms") == 60_000
        assert getattr(record, "unload-in-ms") == round(idle.unload_in_s * 1000)  # type: ignore[operator]
        far_record = model_status_to_wit(far)
        assert (getattr(far_record, "idle-ms"), getattr(far_record, "keep-alive-ms")) == (None, None)
        huge = model_status_to_wit(ModelStatus("x", "loaded", 2**70, 2**40, 1e30, -5.0))  # clamped, never a trap
        assert (getattr(huge, "memory-bytes"), getattr(huge, "in-use"), getattr(huge, "idle-ms")) == (
            U64_MAX, 2**32 - 1, U64_MAX,
        )  # fmt: skip
        assert getattr(huge, "keep-alive-ms") == 0 and getattr(huge, "unload-in-ms") == 0

        # A component sees only the models it may use.
        service = LlmService(lambda: models, allowed_models=frozenset({"idle"}))
        assert [s.name for s in service.model_status()] == ["idle"]
        # The listener's JSON reads back as it was; the table shows it.
        assert [ModelStatus.from_json(s.to_json()) for s in (kept, idle, far)] == [kept, idle, far]
        rows = status_rows([kept, idle, far])
        assert rows[0].split() == ["NAME", "LOADED", "MEMORY", "IN-USE", "IDLE", "UNLOADS-IN"]
        assert rows[1].split() == ["kept", "yes", "105MB", "1", "-", "-"]
        assert rows[2].split()[:4] == ["idle", "yes", "105MB", "0"] and rows[2].split()[4].endswith("s")
        assert rows[3].split() == ["far", "remote", "-", "0", "-", "-"]
    finally:
        models.close()


def test_models_server_names_the_url_it_cannot_reach() -> None:
    assert models_url("127.0.0.1:9464") == "http://127.0.0.1:9464/models"
    assert models_url("http://h:1/") == models_url("http://h:1/models") == "http://h:1/models"
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = CliRunner().invoke(cli, ["models", "--server", f"http://127.0.0.1:{port}"])
    assert result.exit_code != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"cannot reach http://127.0.0.1:{port}/models" in lines[0], result.stderr
    assert "metrics-listen" in lines[0]
