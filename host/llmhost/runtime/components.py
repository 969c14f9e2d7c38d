"""Compile components once and keep the machine code on disk.

Compiling an 18 MB componentize-py guest with Cranelift takes ~15-25 s; loading the serialized result takes
~0.3 s. Serialized code is only valid for the same wasmtime version and code-generation settings, so both are
part of the cache key.

Fast first run: with a fast engine given (Wasmtime's baseline compiler, Winch: ~3 s for the same guest), a
component that has no optimized (Cranelift) code cached yet is compiled with Winch and runs at once, while a
low-priority background process compiles it with Cranelift into the cache; the next load uses that. Guest code
in an LLM app spends its time waiting on the model, so the slower Winch code costs little on a first run
(docs/benchmarks.md measures it). Without the background compile ("fast"), Winch code is all a run uses unless
Cranelift code is cached already.
"""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Literal

from wasmtime import Config, Engine, WasmtimeError
from wasmtime.component import Component

# Settings of the wasmtime `Config` that change generated code. Epoch interruption is always on (it inserts
# deadline checks into the code), so one cached compilation serves configs with and without a timeout.
CODEGEN_SETTINGS = {"epoch_interruption": True}
CACHE_FORMAT = 1  # bump when the cache layout or key changes


# wasmtime's C API strategy values: wasmtime-py names only "auto" and "cranelift"; 2 is Winch.
WINCH_STRATEGY = 2


def create_wasmtime_engine(strategy: Strategy = "cranelift") -> Engine:
    config = Config()
    config.epoch_interruption = CODEGEN_SETTINGS["epoch_interruption"]
    if strategy == "winch":
        from wasmtime import _ffi

        _ffi.wasmtime_config_strategy_set(config.ptr(), WINCH_STRATEGY)
    return Engine(config)


def stderr_note(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


Strategy = Literal["cranelift", "winch"]


@dataclass(frozen=True)
class LoadedComponent:
    component: Component
    cache_file: Path
    compiled: bool  # True when this load compiled (a cache miss)
    engine: Engine | None = None  # the engine it was compiled for (stores and linkers must use it)
    strategy: Strategy = "cranelift"


class ComponentCache:
    """`load(path)`: deserialize from `directory` when the same bytes were compiled before, else compile."""

    def __init__(
        self,
        engine: Engine,
        directory: Path,
        note: Callable[[str], None] = stderr_note,
        fast: Engine | None = None,
        optimize_later: bool = True,
    ) -> None:
        self._engine = engine
        self._fast = fast  # a Winch engine: compile with it when no Cranelift code is cached
        self._optimize_later = optimize_later  # and then compile with Cranelift in the background
        self._directory = directory
        self._note = note
        # Components already in memory, by cache file, for as long as something uses them: loading the same app again
        # (a server reloading it, tests) skips even the deserialization. Weakly held: the version `--watch` replaced
        # is freed with its last user (its compiled code is ~53 MB for a Python guest), not kept for the process's
        # life; going back to it deserializes it from the disk cache.
        self._loaded: weakref.WeakValueDictionary[Path, Component] = weakref.WeakValueDictionary()

    def cache_file(self, wasm: bytes, strategy: Strategy = "cranelift") -> Path:
        key = hashlib.sha256()
        key.update(hashlib.sha256(wasm).digest())
        key.update(f"|wasmtime={version('wasmtime')}|{sorted(CODEGEN_SETTINGS.items())}".encode())
        key.update(f"|{platform.machine()}|format={CACHE_FORMAT}".encode())
        suffix = ".winch.cwasm" if strategy == "winch" else ".cwasm"
        return self._directory / f"{key.hexdigest()[:40]}{suffix}"

    def load(self, path: Path) -> LoadedComponent:
        wasm = path.read_bytes()
        cache_file = self.cache_file(wasm)
        found = self._cached(cache_file, self._engine, "cranelift")
        if found is not None:
            return found
        if self._fast is not None:
            fast_file = self.cache_file(wasm, "winch")
            found = self._cached(fast_file, self._fast, "winch")
            if found is None:
                found = self._compile(path, wasm, fast_file, self._fast, "winch")
            if self._optimize_later:
                start_optimizing(path, cache_file, self._note)
            return found
        return self._compile(path, wasm, cache_file, self._engine, "cranelift")

    def _cached(self, cache_file: Path, engine: Engine, strategy: Strategy) -> LoadedComponent | None:
        in_memory = self._loaded.get(cache_file)  # one look-up: a weak entry can go between two
        if in_memory is not None:
            return LoadedComponent(in_memory, cache_file, False, engine, strategy)
        if not cache_file.is_file():
            return None
        try:
            component = Component.deserialize_file(engine, str(cache_file))
        except WasmtimeError:
            return None  # truncated or from an incompatible build: compile again and overwrite it
        self._loaded[cache_file] = component
        return LoadedComponent(component, cache_file, False, engine, strategy)

    def _compile(
        self, path: Path, wasm: bytes, cache_file: Path, engine: Engine, strategy: Strategy
    ) -> LoadedComponent:
        what = "compiling"
        if strategy == "winch":
            later = "; optimized code is compiled in the background" if self._optimize_later else ""
            what = f"fast compile (Winch{later})"
        self._note(f"{what} {path.name} …")
        started = time.monotonic()
        component = Component(engine, wasm)
        self._note(f"compiled {path.name} in {time.monotonic() - started:.1f} s ({strategy}; cached afterwards)")
        try:
            self._store(cache_file, bytes(component.serialize()))
        except OSError as error:  # a read-only cache only costs time; the component itself is fine
            self._note(f"could not cache the compiled component in {cache_file.parent}: {error}")
        self._loaded[cache_file] = component
        return LoadedComponent(component, cache_file, True, engine, strategy)

    def _store(self, cache_file: Path, data: bytes) -> None:
        store_file(cache_file, data)


def store_file(cache_file: Path, data: bytes) -> None:
    # Write to a temporary file and rename, so a concurrent or interrupted run never sees a partial file.
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=cache_file.parent, prefix=cache_file.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, cache_file)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# A background compile that has not finished after this long is presumed dead (killed machine, full disk).
OPTIMIZE_LOCK_STALE_S = 600


def start_optimizing(wasm: Path, cache_file: Path, note: Callable[[str], None]) -> bool:
    """Compile `wasm` with Cranelift into `cache_file` in a detached, low-priority process (at most one per
    file); returns whether one was started."""
    lock = cache_file.with_suffix(".compiling")
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    try:
        if lock.exists() and time.time() - lock.stat().st_mtime > OPTIMIZE_LOCK_STALE_S:
            lock.unlink(missing_ok=True)
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except OSError:
        return False  # another run is compiling it already
    os.close(fd)
    command = [sys.executable, "-m", "llmhost.runtime.optimize", str(wasm), str(cache_file), str(lock)]
    # A process group of its own: it outlives `llmhost run` and its Ctrl-C. Not a session of its own: Linux shares
    # the CPU between sessions (autogroups) before priorities count, so a compile in another session, even at nice
    # 10, took half the cores and slowed llama.cpp's decoding 4x while it ran (docs/benchmarks.md). In this session,
    # at idle priority (set by the child itself, llmhost.runtime.optimize), it runs on cores nothing else wants.
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        process_group=0,
    )
    # Reaped when it ends, or it would stay a zombie for as long as this process runs (a server: its whole life).
    # A daemon thread: a short-lived `llmhost run` exits without waiting for it (init then reaps it).
    threading.Thread(target=process.wait, name=f"llmhost-optimize-{process.pid}", daemon=True).start()
    note(f"optimizing {wasm.name} in the background (used from the next run)")
    return True
