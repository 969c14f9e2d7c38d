"""The `llmhost` command: results on stdout, diagnostics on stderr, expected errors as one line with exit 2."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from llmhost.cli import cli

pytestmark = pytest.mark.wasm  # builds, compiles and runs components

REPO = Path(__file__).resolve().parents[2]
HOST_TRACEBACK = re.compile(r'File ".*llmhost/')  # a frame of host code: must never reach a user


@pytest.fixture(scope="module")
def fake_config_file(tmp_path_factory: pytest.TempPathFactory, llmhost_cache_dir: Path) -> Path:
    path = tmp_path_factory.mktemp("config") / "llmhost.toml"
    path.write_text(f'cache-dir = "{llmhost_cache_dir}"\n\n[engine]\nkind = "fake"\n')
    return path


# The user's own settings must not leak into the tests (None unsets a variable for CliRunner).
UNSET_USER_SETTINGS: dict[str, str | None] = {"LLMHOST_CONFIG": None, "LLMHOST_CACHE_DIR": None}


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env={**UNSET_USER_SETTINGS, **(env or {})}, catch_exceptions=False)


def llmhost(*args: str, config: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The real command in a subprocess: guests write to file descriptor 1, which CliRunner cannot capture."""
    env = {name: value for name, value in os.environ.items() if name not in UNSET_USER_SETTINGS}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "host"), os.environ.get("PYTHONPATH", "")])
    if config is not None:
        env["LLMHOST_CONFIG"] = str(config)
    command = [sys.executable, "-m", "llmhost.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, check=False)


def test_help_lists_the_commands_without_loading_wasmtime() -> None:
    script = (
        "import sys; from click.testing import CliRunner; from llmhost.cli import cli; "
        "result = CliRunner().invoke(cli, ['--help']); print(result.output); "
        "print('heavy:', sorted({m.split('.')[0] for m in sys.modules} & {'wasmtime', 'llama_cpp', 'pydantic'}))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "host")}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True).stdout
    for command in ("run", "build", "models", "infer"):
        assert re.search(rf"^\s+{command}\s", out, re.MULTILINE), command
    assert "LLMHOST_CONFIG" in out
    assert "heavy: []" in out


def test_version() -> None:
    result = invoke("--version")
    assert result.exit_code == 0 and result.stdout.startswith("llmhost, version ")


def test_models(fake_config_file: Path) -> None:
    result = invoke("-c", str(fake_config_file), "models")
    assert result.exit_code == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["NAME", "KIND", "CONTEXT", "SIZE", "QUANT", "TEMPLATE", "ALIASES", "SOURCE"]
    # The built-ins' kinds are constants: listing them extracts or converts no file.
    assert [row.split() for row in rows] == [
        ["gemma-3-270m", "base", "4096", "253MB", "Q4_K_M", "no", "-", "(built-in)"],
        ["smollm2-135m", "instruct", "4096", "98MB", "Q4_1", "yes", "-", "(built-in)"],
        ["all-minilm-l6-v2", "embedding", "512", "91MB", "F32", "no", "-", "(built-in)"],  # its trained window
    ]


def test_config_from_the_environment(fake_config_file: Path) -> None:
    result = invoke("infer", "gemma-3-270m", "hi", env={"LLMHOST_CONFIG": str(fake_config_file)})
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "Hello from the fake engine.\n"


def test_bad_config_names_the_key(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("[sandbox]\nmax-memory-mb = 1\n")
    result = invoke("-c", str(config), "models")
    assert result.exit_code == 2
    assert "sandbox.max-memory-mb" in result.stderr and str(config) in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_config_file(tmp_path: Path) -> None:
    result = invoke("-c", str(tmp_path / "nope.toml"), "models")
    assert result.exit_code == 2
    assert result.stderr.startswith("llmhost: error:") and "LLMHOST_CONFIG" in result.stderr


def test_infer_prints_text_to_stdout_and_usage_to_stderr(fake_config_file: Path) -> None:
    result = invoke("-c", str(fake_config_file), "infer", "gemma-3-270m", "hi", "--max-tokens", "5", "--seed", "1")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "Hello\n"
    assert result.stderr.splitlines() == ["finish-reason: length", "usage: prompt=3 generated=5"]


def test_infer_stop_sequences(fake_config_file: Path) -> None:
    result = invoke("-c", str(fake_config_file), "infer", "gemma-3-270m", "hi", "--stop", "fake", "--stop", " from")
    assert result.stdout == "Hello\n"
    assert "finish-reason: stop" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--temperature", "-1"], "invalid-input: temperature must be >= 0"),
        (["--top-p", "1.5"], "invalid-input: top-p must be in (0, 1]"),
        (["--stop", ""], "invalid-input: stop[0] is an empty string"),
    ],
)
def test_infer_invalid_params(fake_config_file: Path, args: list[str], message: str) -> None:
    result = invoke("-c", str(fake_config_file), "infer", "gemma-3-270m", "hi", *args)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith(f"llmhost: error: {message}")


def test_infer_unknown_model(fake_config_file: Path) -> None:
    result = invoke("-c", str(fake_config_file), "infer", "no-such-model", "hi")
    assert result.exit_code == 2
    assert "model-not-supported" in result.stderr and "no-such-model" in result.stderr


def test_run_exits_with_the_guest_status(fake_config_file: Path, probe_wasm: Path, compile_notes: list[str]) -> None:
    ok = llmhost("run", str(probe_wasm), "--", "info", "gemma-3-270m", config=fake_config_file)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip() == '{"ok": {"name": "gemma-3-270m", "context-length": 64, "vocab-size": 259}}'
    assert ok.stderr == ""  # served from the compile cache: no note
    failed = llmhost("run", str(probe_wasm), "infer", "no-such-model", "hi", config=fake_config_file)
    assert failed.returncode == 1
    assert '"model-not-supported"' in failed.stdout


def test_run_passes_dash_arguments_after_double_dash(fake_config_file: Path, probe_wasm: Path) -> None:
    result = llmhost("run", str(probe_wasm), "--", "argv", "--verbose", "-x", config=fake_config_file)
    assert result.returncode == 0, result.stderr
    assert '["probe.wasm", "argv", "--verbose", "-x"]' in result.stdout


def test_run_trap_is_one_line_without_a_host_traceback(fake_config_file: Path, probe_wasm: Path) -> None:
    result = llmhost("run", str(probe_wasm), "trap", config=fake_config_file)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1].startswith("llmhost: error: probe.wasm trapped:")
    assert "deliberate trap" in result.stderr  # the guest's own traceback is the guest's stderr
    assert not HOST_TRACEBACK.search(result.stderr)


def test_run_missing_file(fake_config_file: Path, tmp_path: Path) -> None:
    result = invoke("-c", str(fake_config_file), "run", str(tmp_path / "missing.wasm"))
    assert result.exit_code == 2
    assert "does not exist" in result.stderr


def test_build_and_run_hello_as_the_readme_says(
    fake_config_file: Path, hello_wasm: Path, tmp_path: Path, compile_notes: list[str]
) -> None:
    # hello_wasm: the session already built these sources, so this build is a copy from the guest cache.
    output = tmp_path / "hello.wasm"
    built = llmhost("build", str(REPO / "guest-examples" / "hello"), "-o", str(output), config=fake_config_file)
    assert built.returncode == 0, built.stderr
    assert built.stdout.strip() == str(output)
    assert output.read_bytes() == hello_wasm.read_bytes()

    ran = llmhost("run", str(output), "--", "The capital of France is", config=fake_config_file)
    assert ran.returncode == 0, ran.stderr
    text, finish, usage = ran.stdout.splitlines()
    assert text == "Hello from the fake engine."
    assert finish == "finish-reason: stop"
    assert re.fullmatch(r"usage: prompt=\d+ generated=\d+", usage)


def test_build_error_names_the_fix(fake_config_file: Path, tmp_path: Path) -> None:
    result = invoke("-c", str(fake_config_file), "build", str(tmp_path), "-o", str(tmp_path / "x.wasm"))
    assert result.exit_code == 2
    assert "no app.py" in result.stderr
