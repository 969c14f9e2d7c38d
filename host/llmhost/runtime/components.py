"""Compile components once and keep the machine code on disk.

Compiling an 18 MB componentize-py guest with Cranelift takes ~25 s; loading the serialized result takes
~0.3 s. Serialized code is only valid for the same wasmtime version and code-generation settings, so both are
part of the cache key.
"""

from __future__ import annotations

import hashlib
import os
import platform
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from wasmtime import Config, Engine, WasmtimeError
from wasmtime.component import Component

# Settings of the wasmtime `Config` that change generated code. Epoch interruption is always on (it inserts
# deadline checks into the code), so one cached compilation serves configs with and without a timeout.
CODEGEN_SETTINGS = {"epoch_interruption": True}
CACHE_FORMAT = 1  # bump when the cache layout or key changes


def create_wasmtime_engine() -> Engine:
    config = Config()
    config.epoch_interruption = CODEGEN_SETTINGS["epoch_interruption"]
    return Engine(config)


def stderr_note(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class LoadedComponent:
    component: Component
    cache_file: Path
    compiled: bool  # True when this load compiled (a cache miss)


class ComponentCache:
    """`load(path)`: deserialize from `directory` when the same bytes were compiled before, else compile."""

    def __init__(self, engine: Engine, directory: Path, note: Callable[[str], None] = stderr_note) -> None:
        self._engine = engine
        self._directory = directory
        self._note = note
        # Components already in memory, by cache file: loading the same app again (a server reloading it, tests)
        # skips even the deserialization.
        self._loaded: dict[Path, Component] = {}

    def cache_file(self, wasm: bytes) -> Path:
        key = hashlib.sha256()
        key.update(hashlib.sha256(wasm).digest())
        key.update(f"|wasmtime={version('wasmtime')}|{sorted(CODEGEN_SETTINGS.items())}".encode())
        key.update(f"|{platform.machine()}|format={CACHE_FORMAT}".encode())
        return self._directory / f"{key.hexdigest()[:40]}.cwasm"

    def load(self, path: Path) -> LoadedComponent:
        wasm = path.read_bytes()
        cache_file = self.cache_file(wasm)
        if cache_file in self._loaded:
            return LoadedComponent(self._loaded[cache_file], cache_file, False)
        if cache_file.is_file():
            try:
                component = Component.deserialize_file(self._engine, str(cache_file))
            except WasmtimeError:
                pass  # truncated or from an incompatible build: compile again and overwrite it
            else:
                self._loaded[cache_file] = component
                return LoadedComponent(component, cache_file, False)
        self._note(f"compiling {path.name} (first run, ~25 s; cached afterwards)")
        component = Component(self._engine, wasm)
        try:
            self._store(cache_file, bytes(component.serialize()))
        except OSError as error:  # a read-only cache only costs time; the component itself is fine
            self._note(f"could not cache the compiled component in {cache_file.parent}: {error}")
        self._loaded[cache_file] = component
        return LoadedComponent(component, cache_file, True)

    def _store(self, cache_file: Path, data: bytes) -> None:
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
