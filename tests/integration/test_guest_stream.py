"""`infer-stream` through the probe guest, on the fake engine (host policy: events, errors, idle expiry)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from llmhost import App, Host, HostConfig, SandboxConfig
from probe_driver import run_probe

pytestmark = pytest.mark.wasm
MODEL = "gemma-3-270m"


def test_stream_events_join_to_infer_and_end_with_done(probe: Callable[..., Any]) -> None:
    params = json.dumps({"max-tokens": 12, "stop": ["fake"]})
    streamed = probe("stream", MODEL, "hi", params).value
    inferred = probe("infer", MODEL, "hi", params).value
    *chunks, done = streamed["events"]
    assert "".join(c["chunk"]["text"] for c in chunks) == inferred["text"]
    assert done == {"done": {"finish-reason": inferred["finish-reason"], "usage": inferred["usage"]}}
    assert streamed["after-done"] == [None, None]
    # Running usage grows chunk by chunk; each chunk reports the tokens it came from.
    counts = [c["chunk"]["usage"]["generated-token-count"] for c in chunks]
    assert counts == sorted(counts) and counts[-1] <= done["done"]["usage"]["generated-token-count"]
    assert sum(len(c["chunk"]["token-ids"]) for c in chunks) == counts[-1]


def test_stream_reports_invalid_input_before_generating(probe: Callable[..., Any]) -> None:
    outcome = probe("stream", MODEL, "hi", json.dumps({"top-p": 0.0}))
    assert outcome.error == {"kind": "invalid-input", "message": outcome.error["message"]}
    assert outcome.error["message"].startswith("top-p")
    assert probe("stream", "nope", "hi").error["kind"] == "model-not-supported"


def test_an_idle_stream_expires_with_a_clear_error(
    make_host: Callable[..., Host], probe_wasm: Any, fake_config: HostConfig
) -> None:
    config = fake_config.model_copy(update={"sandbox": SandboxConfig(stream_idle_timeout_s=0.2)})
    app: App = make_host(config).load(probe_wasm)
    outcome = run_probe(app, "stream-idle", MODEL, "hi", "1.5")
    assert outcome.value["first"]["chunk"]["text"]
    error = outcome.value["second"]["err"]
    assert error["kind"] == "runtime-error"
    assert "idle" in error["message"] and "sandbox.stream-idle-timeout-s" in error["message"]


def test_python_api_stream_and_per_chunk_hook(fake_host: Host) -> None:
    from llmhost import InferencingParams, StreamChunk, StreamDone

    params = InferencingParams(max_tokens=8)
    events = list(fake_host.infer_stream(MODEL, "hi", params))
    assert isinstance(events[-1], StreamDone) and all(isinstance(e, StreamChunk) for e in events[:-1])
    seen: list[str] = []
    result = fake_host.infer(MODEL, "hi", params, on_chunk=lambda chunk: seen.append(chunk.text))
    assert "".join(seen) == result.text == "".join(e.text for e in events[:-1])  # type: ignore[union-attr]
    assert result.usage == events[-1].usage


def test_cli_infer_stream(tmp_path: Any) -> None:
    from click.testing import CliRunner

    from llmhost.cli import cli

    config = tmp_path / "fake.toml"
    config.write_text('[engine]\nkind = "fake"\nscript = "streamed words"\n')
    result = CliRunner().invoke(cli, ["-c", str(config), "infer", MODEL, "hi", "--stream", "--max-tokens", "8"])
    assert result.exit_code == 0, result.output
    assert result.stdout == "streamed\n"
