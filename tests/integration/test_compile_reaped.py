"""Compile strategies. The background Cranelift compile that a fast-first load starts is reaped when it ends: it must
not stay a zombie for the rest of the host's life (a server's whole life). "fast" starts none."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from wasmtime import wat2wasm

from llmhost import Host, HostConfig
from llmhost.config import ConfigError, FakeEngineConfig

pytestmark = pytest.mark.wasm

# A component with nothing in it but a `run` export (all a load checks): both compiles take milliseconds.
RUN_ONLY = """
(component
  (core module $m (func (export "run") (result i32) i32.const 0))
  (core instance $i (instantiate $m))
  (func (export "run") (result s32) (canon lift (core func $i "run")))
)
"""


def children() -> set[int]:
    """This process's child processes, zombies included (from /proc: starting a process here would reap them)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # ended meanwhile
        if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid():  # the field after the state: the parent's pid
            found.add(int(entry.name))
    return found


def state(pid: int) -> str | None:
    """The process's state letter (`Z`: a zombie, ended but not reaped), None when it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    return next(line.split()[1] for line in status.splitlines() if line.startswith("State:"))


def test_the_background_compile_is_reaped_when_it_ends(tmp_path: Path) -> None:
    wasm = tmp_path / "app.wasm"
    wasm.write_bytes(wat2wasm(RUN_ONLY))
    config = HostConfig(engine=FakeEngineConfig(), cache_dir=tmp_path / "cache", compile_strategy="fast-first")
    before = children()
    with Host(config, note=lambda _: None) as host:
        app = host.load(wasm)
        assert app.strategy == "winch"
        started = children() - before
        assert len(started) == 1, started  # the background compile
        (pid,) = started
        optimized = app.cache_file.with_name(app.cache_file.name.replace(".winch.cwasm", ".cwasm"))
        lock = optimized.with_suffix(".compiling")
        deadline = time.monotonic() + 120
        while (lock.exists() or not optimized.is_file()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert optimized.is_file() and not lock.exists(), "the background compile never finished"
        # It ended (it removes its lock last): within a few seconds it is gone from the process table, reaped,
        # while the host goes on running.
        deadline = time.monotonic() + 30
        while state(pid) is not None and pid in children() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert state(pid) is None or pid not in children(), f"process {pid} is left in state {state(pid)}"


def test_fast_compiles_with_winch_starts_nothing_and_uses_cranelift_code_already_cached(tmp_path: Path) -> None:
    # "fast" (CI, short-lived runs): Winch only, no background compile; Cranelift code already cached is better and
    # free, so it is used.
    wasm = tmp_path / "app.wasm"
    wasm.write_bytes(wat2wasm(RUN_ONLY))
    notes: list[str] = []
    before = children()
    with Host(HostConfig(engine=FakeEngineConfig(), cache_dir=tmp_path / "cache", compile_strategy="fast"),
              note=notes.append) as host:  # fmt: skip
        app = host.load(wasm)
        assert app.strategy == "winch" and app.cache_file.name.endswith(".winch.cwasm")
        assert children() == before
        optimized = app.cache_file.with_name(app.cache_file.name.replace(".winch.cwasm", ".cwasm"))
        assert not optimized.exists() and not optimized.with_suffix(".compiling").exists()
    assert any(note.startswith("fast compile (Winch)") for note in notes), notes
    assert not any("background" in note for note in notes), notes

    with Host(HostConfig(engine=FakeEngineConfig(), cache_dir=tmp_path / "cache", compile_strategy="optimized"),
              note=lambda _: None) as host:  # fmt: skip
        assert host.load(wasm).strategy == "cranelift"
    with Host(HostConfig(engine=FakeEngineConfig(), cache_dir=tmp_path / "cache", compile_strategy="fast"),
              note=lambda _: None) as host:  # fmt: skip
        again = host.load(wasm)
        assert again.strategy == "cranelift" and again.cache_file == optimized and not again.compiled


def test_the_compile_strategy_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for strategy in ("fast-first", "optimized", "fast"):
        monkeypatch.setenv("LLMHOST_COMPILE_STRATEGY", strategy)
        assert HostConfig().compile_strategy == strategy
    monkeypatch.setenv("LLMHOST_COMPILE_STRATEGY", "")
    assert HostConfig().compile_strategy == "fast-first"
    monkeypatch.setenv("LLMHOST_COMPILE_STRATEGY", "turbo")
    with pytest.raises(ConfigError, match=r"LLMHOST_COMPILE_STRATEGY='turbo' is not a compile strategy.*fast-first"):
        HostConfig()


def test_a_mistyped_compile_strategy_stops_the_cli_naming_the_fix(tmp_path: Path) -> None:
    env = {**os.environ, "LLMHOST_COMPILE_STRATEGY": "optimised", "LLMHOST_CACHE_DIR": str(tmp_path)}
    llmhost = str(Path(sys.executable).with_name("llmhost"))
    guest = Path(__file__).resolve().parents[2] / "guest-examples" / "hello"  # refused before any build
    done = subprocess.run([llmhost, "run", str(guest)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "LLMHOST_COMPILE_STRATEGY='optimised' is not a compile strategy" in done.stderr
    assert "optimized" in done.stderr and "Traceback" not in done.stderr
