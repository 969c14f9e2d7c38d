"""Out-of-range integers from a JavaScript guest (issue 66, part 5), in a real componentize-js guest
(tests/guests/sdk_probe_js) on the fake engine: through the SDK every one is an error naming its field and nothing
wraps; through the WIT bindings alone (no SDK), componentize-js wraps a Number (and a u64 BigInt) into a value the
host cannot tell from an honest one, and an out-of-range s64 BigInt traps that guest's run only: the host and the same
component keep serving."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llmhost import App, FakeEngineConfig, GuestTrap, Host, HostConfig, build_component
from llmhost.config import SandboxConfig

pytestmark = pytest.mark.wasm
REPO = Path(__file__).resolve().parents[2]
MODEL = "gemma-3-270m"
SCRIPT = " ".join(["word"] * 40)  # the fake engine's tokens: more than any budget below


@pytest.fixture(scope="module")
def probe(llmhost_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    out = tmp_path_factory.mktemp("js-ranges")
    wasm = build_component(
        REPO / "tests" / "guests" / "sdk_probe_js", out / "sdk_probe_js.wasm", cache_dir=llmhost_cache_dir
    )
    config = HostConfig(
        engine=FakeEngineConfig(script=SCRIPT, context_length=4096),
        cache_dir=llmhost_cache_dir,
        data_dir=out / "data",
        sandbox=SandboxConfig(key_value_stores=("default",)),
    )
    with Host(config) as host:
        yield host.load(wasm)


def run(app: App, *args: str) -> Any:
    done = app.run_captured(list(args))
    assert done.exit_code == 0, done.stderr
    return json.loads(done.stdout.decode().strip().splitlines()[-1])["ok"]


LLM_FIELDS = {
    "maxTokens": "maxTokens",
    "maxTokens-negative": "maxTokens",
    "maxTokens-fraction": "maxTokens",
    "chat-maxTokens": "maxTokens",
    "topK": "topK",
    "repeatPenaltyLastNTokenCount": "repeatPenaltyLastNTokenCount",
    "seed": "seed",
    "seed-negative": "seed",
    "logprobs": "logprobs",
    "logitBias": "logitBias token id",
}


def test_out_of_range_integers_through_the_sdk_are_errors_naming_the_field(probe: App) -> None:
    got = run(probe, "ranges", MODEL)
    for case, field in LLM_FIELDS.items():
        assert got[case]["type"] == "InvalidInput" and got[case]["kind"] == "invalid-input", (case, got[case])
        assert got[case]["message"].startswith(f"{field} must be an integer from 0 to"), (case, got[case])
    assert "from 0 to 4294967295, not 4294967299" in got["maxTokens"]["message"]
    for case in ("kv-increment", "kv-increment-low", "kv-increment-fraction"):  # no trap: the run went on
        assert got[case]["type"] == "KvError" and got[case]["kind"] == "other", (case, got[case])
        assert "delta must be an integer from -9223372036854775808 to 9223372036854775807" in got[case]["message"]
    assert got["http-status"]["type"] == "RangeError" and "status" in got["http-status"]["message"]
    # In range, the values reach the host: the largest s64 delta, and a budget of 2 is 2 tokens.
    assert got["kv-increment-max"] is True and got["maxTokens-2"] == 2


def test_the_raw_bindings_wrap_numbers_and_trap_on_bigints_and_the_host_keeps_serving(probe: App) -> None:
    # What the SDK's checks stand in front of: componentize-js hands the host 2**32 + 3 as 3, a valid budget the host
    # cannot tell from an honest one (so no host check can catch it: the SDK is the layer that must).
    assert run(probe, "raw", "maxTokens", MODEL) == 3
    assert run(probe, "raw", "seed", MODEL) == 1  # a u64 seed of 2**64 + 1: accepted (wrapped), no error
    # An s64 BigInt out of range is a trap of this run only (componentize-js: "Internal bindgen error").
    with pytest.raises(GuestTrap):
        probe.run_captured(["raw", "increment", MODEL])
    assert run(probe, "raw", "maxTokens", MODEL) == 3  # the same component, the same host: still serving
