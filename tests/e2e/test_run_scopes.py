"""Run scopes end to end: what a guest opens lives and dies with its run; one validation for every path.

Probe guest → host → llama.cpp with Gemma 3 270M.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from llmhost import GuestTrap, Host, InferencingParams
from llmhost.domain.errors import InvalidInput
from probe_driver import ProbeOutcome

from .conftest import MODEL

pytestmark = [pytest.mark.model, pytest.mark.wasm]
Probe = Callable[..., ProbeOutcome]


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def model_state(host: Host) -> tuple[int, int]:
    model = host.engine.model(MODEL)  # type: ignore[attr-defined]
    return model.slots.available, model.slots.swapped_bytes


@pytest.mark.parametrize(("mode", "runs"), [("return", 50), ("trap", 50), ("catch", 20)])
def test_handles_kept_in_globals_are_freed_when_the_run_ends(
    real_host: Host, real_probe: Probe, mode: str, runs: int
) -> None:
    real_probe("info", MODEL)
    start = model_state(real_host)
    for _ in range(runs):
        if mode == "trap":
            with pytest.raises(GuestTrap):
                real_probe("leak", MODEL, mode)
        else:
            outcome = real_probe("leak", MODEL, mode)
            assert outcome.exit_code == 0, (outcome.error, outcome.stderr[-1000:])
        # Slots and swapped bytes are back where they were after every run, not after an idle timeout.
        assert model_state(real_host) == start


def test_open_sequences_quota_names_its_key(real_probe: Probe) -> None:
    value = real_probe("open-many", MODEL, "80").value
    assert value["opened"] == 64
    assert value["err"]["kind"] == "invalid-input"
    assert "sandbox.max-open-sequences" in value["err"]["message"]
    # The next run starts with an empty scope.
    assert real_probe("open-many", MODEL, "3").value == {"opened": 3, "err": None}


def test_failed_sequence_generations_do_not_wedge_the_model(real_host: Host, real_probe: Probe) -> None:
    bad = {"stop": [""], "max-tokens": 4}
    script = [["open", f"s{i}"] for i in range(4)]
    script += [["append", f"s{i}", "Hello"] for i in range(4)]
    script += [["generate", f"s{i}", bad] for i in range(4)]
    script += [["generate", "s0", {"max-tokens": 2, "temperature": 0.0}]]
    steps = real_probe("seq", MODEL, json.dumps(script)).value
    for step in steps[8:12]:
        assert step["err"]["kind"] == "invalid-input" and "stop[0]" in step["err"]["message"], step
    assert "ok" in steps[12], steps[12]  # the sequence is still usable
    result = real_host.infer(MODEL, "Hi", InferencingParams(max_tokens=2, temperature=0))
    assert result.usage.generated_token_count == 2


def test_huge_repeat_window_is_clamped_to_the_context(real_probe: Probe) -> None:
    before = rss_mb()
    params = {"max-tokens": 4, "repeat-penalty-last-n-token-count": 2**32 - 1, "repeat-penalty": 1.3}
    for _ in range(3):
        outcome = real_probe("infer", MODEL, "Hello", json.dumps(params))
        assert outcome.exit_code == 0, outcome.error
    assert rss_mb() - before < 100


BAD_PARAMS: list[tuple[dict[str, Any], str]] = [
    ({"max-tokens": 0}, "max-tokens"),
    ({"temperature": -1.0}, "temperature"),
    ({"temperature": math.inf}, "temperature"),
    ({"top-p": 0.0}, "top-p"),
    ({"top-p": 1.5}, "top-p"),
    ({"repeat-penalty": 0.0}, "repeat-penalty"),
    ({"stop": [""]}, "stop[0]"),
    ({"stop": ["x"] * 17}, "stop has 17"),
    ({"logprobs": 21}, "logprobs"),
    ({"frequency-penalty": 3.0}, "frequency-penalty"),
    ({"constraint": {"choice": []}}, "choice"),
]


def _python_params(params: dict[str, Any]) -> InferencingParams:
    from llmhost.domain.types import Constraint

    values = {k.replace("-", "_"): v for k, v in params.items()}
    if "constraint" in values:
        values["constraint"] = Constraint.choice(values["constraint"]["choice"])
    return InferencingParams(**values)


@pytest.mark.parametrize(("params", "needle"), BAD_PARAMS)
def test_every_entry_point_rejects_bad_params_alike(
    real_host: Host, real_probe: Probe, params: dict[str, Any], needle: str
) -> None:
    text = json.dumps(params)
    errors: dict[str, tuple[str, str]] = {}
    outcome = real_probe("infer", MODEL, "Hi", text)
    errors["infer"] = (outcome.error or {}).get("kind", ""), (outcome.error or {}).get("message", "")
    outcome = real_probe("stream", MODEL, "Hi", text)
    errors["infer-stream"] = (outcome.error or {}).get("kind", ""), (outcome.error or {}).get("message", "")
    script = [["open", "a"], ["append", "a", "Hi"], ["generate", "a", params], ["stream", "a", params]]
    steps = real_probe("seq", MODEL, json.dumps(script)).value
    errors["sequence.generate"] = steps[2]["err"]["kind"], steps[2]["err"]["message"]
    errors["sequence.generate-stream"] = steps[3]["err"]["kind"], steps[3]["err"]["message"]
    with pytest.raises(InvalidInput) as raised:
        real_host.infer(MODEL, "Hi", _python_params(params))
    errors["python-api"] = "invalid-input", raised.value.message
    kinds = {kind for kind, _ in errors.values()}
    messages = {message for _, message in errors.values()}
    assert kinds == {"invalid-input"}, errors
    assert len(messages) == 1 and needle in messages.pop(), errors


def test_cli_infer_rejects_bad_params_with_the_same_message(real_config: Any) -> None:
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmhost.cli",
            "--cache-dir",
            str(real_config.cache_dir),
            "infer",
            MODEL,
            "Hi",
            "--top-p",
            "0",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode != 0
    assert "top-p must be in (0, 1], got 0.0" in completed.stderr


def test_forks_past_the_scope_memory_quota_are_refused(llmhost_cache_dir: Path, probe_wasm: Path) -> None:
    # One slot, so every fork beyond it is swapped out to host memory; 1 MB of it per run.
    from llmhost import HostConfig
    from llmhost.config import ModelConfig, SandboxConfig

    config = HostConfig(
        models={MODEL: ModelConfig(slots=1, prefix_cache=False, context_length=512)},
        sandbox=SandboxConfig(max_sequence_mb=1),
        cache_dir=llmhost_cache_dir,
    )
    with Host(config, note=lambda _: None) as host:
        app = host.load(probe_wasm)
        text = " ".join(f"word{i}" for i in range(120))
        script = [["open", "a"], ["append", "a", text]] + [["fork", "a", f"f{i}"] for i in range(40)]
        from probe_driver import run_probe

        steps = run_probe(app, "seq", MODEL, json.dumps(script)).value
        errors = [step["err"] for step in steps if "err" in step]
        assert errors, "the quota never applied"
        assert all(e["kind"] == "invalid-input" and "sandbox.max-sequence-mb" in e["message"] for e in errors)
        assert sum("ok" in step for step in steps[2:]) >= 1  # forks were allowed up to the quota
        model = host.engine.model(MODEL)  # type: ignore[attr-defined]
        assert model.slots.swapped_bytes == 0 and model.slots.available == 1  # all freed with the run
