"""The sandbox: a guest gets its arguments, stdout and stderr, and only what the config grants."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from llmhost import App, GuestTimeout, Host, HostConfig, HostError, SandboxConfig

pytestmark = pytest.mark.wasm  # builds, compiles and runs components

RunProbe = Callable[..., Any]


@pytest.fixture
def sandboxed_probe(fake_config: HostConfig, probe_wasm: Path, make_host: Callable[..., Host]) -> Callable[..., App]:
    """`sandboxed_probe(**sandbox_settings)`: the probe guest on a host with that sandbox config."""

    def load(**settings: object) -> App:
        config = fake_config.model_copy(update={"sandbox": SandboxConfig(**settings)})
        return make_host(config).load(probe_wasm)

    return load


@pytest.fixture
def listening_port() -> Iterator[int]:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


def test_argv_is_the_app_name_and_the_args(probe: Callable[..., Any]) -> None:
    assert probe("argv", "x y").value == ["probe.wasm", "argv", "x y"]


def test_no_environment_by_default(probe: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMHOST_TEST_SECRET", "host-only")
    assert probe("env").value == {}


def test_granted_environment(sandboxed_probe: Callable[..., App], run_probe: RunProbe) -> None:
    app = sandboxed_probe(env={"GREETING": "hi"})
    assert run_probe(app, "env").value == {"GREETING": "hi"}


def test_no_files_by_default(probe: Callable[..., Any], tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host data")
    for path in (str(secret), "/etc/passwd", "/"):
        outcome = probe("readfile", path) if path != "/" else probe("listdir", path)
        assert outcome.exit_code == 1, outcome
        assert outcome.error is not None and outcome.error["kind"] == "FileNotFoundError"


def test_granted_read_only_dir(sandboxed_probe: Callable[..., App], run_probe: RunProbe, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("readable")
    app = sandboxed_probe(read_only_dir=tmp_path, guest_dir="/data")
    assert run_probe(app, "listdir", "/data").value == ["notes.txt"]
    assert run_probe(app, "readfile", "/data/notes.txt").value == "readable"
    for target in ("/data/notes.txt", "/data/new.txt"):
        outcome = run_probe(app, "writefile", target, "overwritten")
        assert outcome.error is not None and outcome.error["kind"] == "PermissionError", outcome
    assert (tmp_path / "notes.txt").read_text() == "readable"
    assert not (tmp_path / "new.txt").exists()
    # Only the granted directory: its parent stays invisible.
    assert run_probe(app, "readfile", str(tmp_path / "notes.txt")).error is not None


def test_no_network(probe: Callable[..., Any], listening_port: int) -> None:
    outcome = probe("connect", "127.0.0.1", str(listening_port))
    assert outcome.exit_code == 1
    assert outcome.error is not None and outcome.error["kind"] == "PermissionError"


def test_a_network_grant_is_refused_rather_than_ignored(sandboxed_probe: Callable[..., App]) -> None:
    # wasmtime-py 50 denies components every socket even with the network inherited (see runtime/sandbox.py).
    with pytest.raises(HostError, match=r"sandbox\.inherit-network"):
        sandboxed_probe(inherit_network=True)


def test_a_missing_read_only_dir_is_a_config_error(sandboxed_probe: Callable[..., App], tmp_path: Path) -> None:
    with pytest.raises(HostError, match=r"sandbox\.read-only-dir.*not a directory"):
        sandboxed_probe(read_only_dir=tmp_path / "missing")


def test_timeout_stops_a_runaway_guest(sandboxed_probe: Callable[..., App], run_probe: RunProbe) -> None:
    app = sandboxed_probe(timeout_s=0.3)
    started = time.monotonic()
    with pytest.raises(GuestTimeout, match=r"sandbox\.timeout-s"):
        app.run_captured(["loop"])
    elapsed = time.monotonic() - started
    assert 0.3 <= elapsed < 5
    assert run_probe(app, "argv").exit_code == 0  # the same app runs again; a fast run is not interrupted


def test_memory_limit(sandboxed_probe: Callable[..., App], run_probe: RunProbe) -> None:
    app = sandboxed_probe(max_memory_mb=64)
    assert run_probe(app, "alloc", "8").value == 8 * 1024 * 1024
    outcome = run_probe(app, "alloc", "128")
    assert outcome.error is not None and outcome.error["kind"] == "MemoryError"


def test_large_captured_output_is_not_truncated(probe: Callable[..., Any]) -> None:
    # One guest write far beyond 8 kB (wasmtime-py's custom-output callback drops the rest of such a write).
    args = [f"{i:05d}" + "x" * 45 for i in range(400)]
    outcome = probe("argv", *args)
    assert outcome.value[1:] == ["argv", *args]
