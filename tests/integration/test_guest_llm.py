"""Every `llm` function through a real guest (the probe component) on the fake engine."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from llmhost import App, EngineError, GuestTrap, Host, HostConfig, InferencingParams, InvalidInput, ModelNotSupported
from llmhost.engine.fake import FakeEngine

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.wasm  # builds, compiles and runs components

MODEL = "gemma-3-270m"
FAKE_TEXT = "Hello from the fake engine."

Probe = Callable[..., Any]


def test_infer_with_default_params(probe: Probe) -> None:
    outcome = probe("infer", MODEL, "hi")
    assert outcome.exit_code == 0, outcome
    assert outcome.value == {
        "text": FAKE_TEXT,
        "finish-reason": "stop",
        # fake tokens are bytes plus a beginning-of-sequence token; every sampled token counts, the end token too
        "usage": {"prompt-token-count": 3, "generated-token-count": len(FAKE_TEXT) + 1},
    }


def test_infer_with_params(probe: Probe) -> None:
    limited = probe("infer", MODEL, "hi", json.dumps({"max-tokens": 5}))
    assert limited.value["text"] == "Hello"
    assert limited.value["finish-reason"] == "length"
    stopped = probe("infer", MODEL, "hi", json.dumps({"stop": [" from"], "temperature": 0}))
    assert stopped.value["text"] == "Hello"
    assert stopped.value["finish-reason"] == "stop"


def test_tokenize_matches_prompt_usage(probe: Probe) -> None:
    tokens = probe("tokenize", MODEL, "hé").value
    assert tokens == [1, *(b + 3 for b in "hé".encode())]
    assert probe("infer", MODEL, "hé").value["usage"]["prompt-token-count"] == len(tokens)


def test_model_info_and_embeddings(probe: Probe) -> None:
    assert probe("info", MODEL).value == {"name": MODEL, "context-length": 64, "vocab-size": 259}
    embedded = probe("embed", MODEL, "a", "bc").value
    assert len(embedded["embeddings"]) == 2
    assert embedded["usage"] == {"prompt-token-count": 5}


def test_model_kind(probe: Probe) -> None:
    # The built-ins' kinds are constants (Gemma 3 270M is a pretrained model); an unknown model is refused.
    kinds = {name: probe("kind", name).value for name in ("gemma-3-270m", "smollm2-135m", "all-minilm-l6-v2")}
    assert kinds == {"gemma-3-270m": "base", "smollm2-135m": "instruct", "all-minilm-l6-v2": "embedding"}
    refused = probe("kind", "no-such-model")
    assert refused.error is not None and refused.error["kind"] == "model-not-supported", refused


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"temperature": -0.5}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top-p": 0}, "top-p"),
        ({"top-p": 1.5}, "top-p"),
        ({"repeat-penalty": 0}, "repeat-penalty"),
        ({"max-tokens": 0}, "max-tokens"),
        ({"stop": [""]}, "stop[0]"),
    ],
)
def test_invalid_params_are_invalid_input_naming_the_field(probe: Probe, params: dict[str, object], field: str) -> None:
    outcome = probe("infer", MODEL, "hi", json.dumps(params))
    assert outcome.exit_code == 1
    assert outcome.error is not None and outcome.error["kind"] == "invalid-input"
    assert outcome.error["message"].startswith(field)


def test_a_prompt_longer_than_the_context_is_invalid_input(probe: Probe) -> None:
    outcome = probe("infer", MODEL, "x" * 100)
    assert outcome.error is not None and outcome.error["kind"] == "invalid-input"
    assert "context window" in outcome.error["message"]


@pytest.mark.parametrize(
    "args", [("infer", "no-such-model", "hi"), ("tokenize", "no-such-model", "x"), ("info", "no-such-model")]
)
def test_unknown_model_is_model_not_supported(probe: Probe, args: tuple[str, ...]) -> None:
    outcome = probe(*args)
    assert outcome.exit_code == 1
    assert outcome.error is not None and outcome.error["kind"] == "model-not-supported"
    # 0.2.0's case carries the message naming the fix.
    assert "'no-such-model' is not configured" in outcome.error["message"] and "[models]" in outcome.error["message"]


def test_default_params_are_the_hosts_and_a_0_2_0_guest_still_runs(
    fake_host: Host, probe_wasm: Path, probe_0_2_0_wasm: Path, run_probe: Callable[..., Any]
) -> None:
    from llmhost.domain.types import DEFAULT_PARAMS

    app = fake_host.load(probe_wasm)
    got = run_probe(app, "defaults", MODEL).value
    f32 = pytest.approx  # the WIT's floats are f32
    assert got == {
        "max-tokens": DEFAULT_PARAMS.max_tokens, "repeat-penalty": f32(DEFAULT_PARAMS.repeat_penalty),
        "temperature": f32(DEFAULT_PARAMS.temperature), "top-k": DEFAULT_PARAMS.top_k,
        "top-p": f32(DEFAULT_PARAMS.top_p), "stop": list(DEFAULT_PARAMS.stop), "seed": None, "logprobs": None,
        "constraint": None,
    }  # fmt: skip
    unknown = run_probe(app, "defaults", "no-such-model")
    assert unknown.error is not None and unknown.error["kind"] == "model-not-supported"
    # A component built against 0.2.0 (no `default-params` import) links and runs on this 0.2.1 host.
    old = fake_host.load(probe_0_2_0_wasm)
    assert run_probe(old, "infer", MODEL, "hi").exit_code == 0
    assert run_probe(old, "info", MODEL).value["name"] == MODEL
    assert "default-params" not in (REPO / "wit" / "0.2.0" / "llm.wit").read_text()


def test_a_0_1_0_guest_gets_model_not_supported_without_a_message(
    fake_host: Host, probe_0_1_0_wasm: Path, run_probe: Callable[..., Any]
) -> None:
    # The conversion layer: 0.1.0's `model-not-supported` case has no payload, and the guest gets exactly that.
    outcome = run_probe(fake_host.load(probe_0_1_0_wasm), "infer", "no-such-model", "hi")
    assert outcome.error == {"kind": "model-not-supported", "message": ""}
    assert run_probe(fake_host.load(probe_0_1_0_wasm), "infer", MODEL, "hi").exit_code == 0


def test_a_trap_is_a_guest_trap_and_the_host_keeps_working(probe_app: App, probe: Probe) -> None:
    with pytest.raises(GuestTrap, match="trapped") as trap:
        probe_app.run_captured(["trap"])
    assert b"deliberate trap" in trap.value.stderr  # the guest's traceback, captured
    assert probe("info", MODEL).exit_code == 0


def test_runs_share_no_guest_state(probe: Probe) -> None:
    assert [probe("count").value for _ in range(3)] == [1, 1, 1]


def test_models_outside_the_allowed_set_are_refused(
    fake_host: Host, probe_wasm: Path, run_probe: Callable[..., Any]
) -> None:
    app = fake_host.load(probe_wasm, allowed_models=frozenset({"some-other-model"}))
    outcome = run_probe(app, "infer", MODEL, "hi")
    assert outcome.error is not None and outcome.error["kind"] == "model-not-supported"
    assert "`allowed-models`" in outcome.error["message"] and "some-other-model" in outcome.error["message"]


class BrokenEngine(FakeEngine):
    def stream(self, model: str, prompt: str, params: InferencingParams) -> object:  # type: ignore[override]
        raise RuntimeError("decode failed")  # guests' `infer` runs as a stream of their run scope

    def model_info(self, model: str) -> object:  # type: ignore[override]
        raise EngineError("model file unreadable")


def test_engine_failures_reach_the_guest_as_runtime_error(
    fake_config: HostConfig, probe_wasm: Path, make_host: Callable[..., Host], run_probe: Callable[..., Any]
) -> None:
    app = make_host(fake_config, engine=BrokenEngine()).load(probe_wasm)
    unexpected = run_probe(app, "infer", MODEL, "hi")
    assert unexpected.error == {"kind": "runtime-error", "message": "internal host error: RuntimeError: decode failed"}
    expected = run_probe(app, "info", MODEL)
    assert expected.error == {"kind": "runtime-error", "message": "model file unreadable"}


# -- the same functions from the Python API ----------------------------------------------------------------------


def test_host_api(fake_host: Host) -> None:
    result = fake_host.infer(MODEL, "hi", InferencingParams(max_tokens=5))
    assert (result.text, result.finish_reason.value) == ("Hello", "length")
    assert fake_host.tokenize(MODEL, "a") == [1, ord("a") + 3]
    assert fake_host.model_info(MODEL).context_length == 64
    # The built-in models, always configured.
    assert [m.name for m in fake_host.models()] == [MODEL, "smollm2-135m", "all-minilm-l6-v2"]
    with pytest.raises(InvalidInput, match="top-p"):
        fake_host.infer(MODEL, "hi", InferencingParams(top_p=0))
    with pytest.raises(ModelNotSupported):
        fake_host.tokenize("no-such-model", "x")


def test_runs_on_several_threads_at_once(probe_app: App, run_probe: Callable[..., Any]) -> None:
    with ThreadPoolExecutor(max_workers=4) as pool:
        outcomes = list(pool.map(lambda i: run_probe(probe_app, "infer", MODEL, f"prompt {i}"), range(16)))
    assert [o.value["usage"]["prompt-token-count"] for o in outcomes] == [len(f"prompt {i}") + 1 for i in range(16)]


def test_chat_on_the_fake_engine(probe: Probe) -> None:
    messages = json.dumps([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}])
    rendered = probe("template", MODEL, messages, "[]", "true")
    assert rendered.value == "<|system|>Be brief.<|end|>\n<|user|>hi<|end|>\n<|assistant|>"
    result = probe("chat", MODEL, messages, json.dumps({"inferencing": {"max-tokens": 5}}))
    assert result.exit_code == 0, result
    assert result.value["message"] == {"role": "assistant", "content": "Hello", "tool-calls": [], "tool-call-id": None}
    assert result.value["finish-reason"] == "length"
    assert result.value["usage"]["prompt-token-count"] == 1 + len(rendered.value.encode())
    short = json.dumps([{"role": "user", "content": "hi"}])  # the fake engine's window is 64 tokens
    streamed = probe("chat-stream", MODEL, short, "none")
    assert "".join(e["content"]["text"] for e in streamed.value["events"] if "content" in e) == FAKE_TEXT
    assert streamed.value["events"][-1]["done"]["finish-reason"] == "stop"
    # Tools need the structured-output engine, which the fake engine does not have: a clear invalid-input.
    tools = json.dumps({"tools": [{"name": "f", "parameters": "{}"}], "tool-choice": "required"})
    refused = probe("chat", MODEL, messages, tools)
    assert refused.error is not None and refused.error["kind"] == "invalid-input"
