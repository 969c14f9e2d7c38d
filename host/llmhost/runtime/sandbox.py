"""What a guest may reach, set up fresh for every store.

By default a guest gets its arguments, stdout and stderr, and nothing else: no environment, no files, no
network. `SandboxConfig` grants environment variables and a read-only directory.

Network cannot be granted with wasmtime-py 50.0.1: after `wasi_config_inherit_network` (and
`wasi_config_allow_ip_name_lookup`) a component still gets `access-denied` from `create-tcp-socket` and
`create-udp-socket` (checked with a componentize-py guest), and the C API has no `allow_tcp`. Rather than accept
a grant that does nothing, `sandbox_problems` names it and the host refuses the config.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
import threading
from collections.abc import Callable
from typing import Any

from wasmtime import Engine, Store, WasiConfig, _value
from wasmtime import _ffi as ffi

from llmhost.config import SandboxConfig
from llmhost.domain.errors import EngineError
from llmhost.run.scope import RunScope

# How often the epoch advances while a timeout is configured; a guest overruns its limit by at most this much.
EPOCH_TICK_S = 0.05
# With no timeout the deadline is never reached (no ticker runs), but it must still be set: with epoch
# interruption on, a store's default deadline is "now" (even instantiation traps with `wasm trap: interrupt`).
NO_DEADLINE_TICKS = 2**48

OutputSink = Callable[[bytes], None]


class CapturedOutput:
    """A guest's stdout or stderr captured in a temporary file, handed to a sink when the run ends.

    Why not `WasiConfig.stdout_custom`: with wasmtime-py 50.0.1 a single guest write larger than 8192 bytes
    reaches a custom callback truncated to 8192 bytes, and the rest is lost without an error (seen with a
    componentize-py guest printing a 21 kB line). A file takes every byte.

    The file has no name while the run uses it: on Linux its name goes at once and wasmtime opens it through
    /proc/self/fd; elsewhere the name goes as soon as wasmtime has opened it (`wasi_config`). A process that ends
    mid-run (SIGTERM with a guest still looping, `kill -9`) leaves no file behind.
    """

    def __init__(self, sink: OutputSink) -> None:
        self._sink = sink
        self._fd, self._name = tempfile.mkstemp(prefix="llmhost-output-")
        self._closed = False
        self.path = self._name  # what wasmtime opens
        by_descriptor = f"/proc/self/fd/{self._fd}"
        if os.path.exists(by_descriptor):
            self.path = by_descriptor
            self.opened()

    def opened(self) -> None:
        """wasmtime holds the file open now (or can open it by descriptor): its name can go (idempotent)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._name)

    def close(self) -> None:
        """Remove the file and close it (idempotent)."""
        if not self._closed:
            self._closed = True
            self.opened()
            os.close(self._fd)

    def read_capped(self, limit: int, tail: int = 4096) -> tuple[bytes, bytes, int]:
        """(the first `limit` bytes, the last `tail` bytes, the total size) of what the guest wrote, read once
        (the file is closed): memory stays bounded whatever the guest wrote."""
        try:
            size = os.fstat(self._fd).st_size
            head = _read_at(self._fd, min(limit, size), 0)
            start = max(len(head), size - tail)
            end = _read_at(self._fd, size - start, start)
        finally:
            self.close()
        return head, end, size

    def deliver(self) -> None:
        """Pass everything the guest wrote to the sink, once, and close the file."""
        try:
            data = _read_at(self._fd, os.fstat(self._fd).st_size, 0)
        finally:
            self.close()
        if data:
            self._sink(data)


def _read_at(fd: int, size: int, offset: int) -> bytes:
    """`size` bytes of `fd` from `offset` (fewer at its end), without moving its position."""
    parts = []
    while size > 0:
        part = os.pread(fd, size, offset)
        if not part:
            break
        parts.append(part)
        size, offset = size - len(part), offset + len(part)
    return b"".join(parts)


def wasi_config(
    sandbox: SandboxConfig,
    argv: list[str],
    stdout: CapturedOutput | None = None,
    stderr: CapturedOutput | None = None,
) -> WasiConfig:
    """A new `WasiConfig` (a store consumes it). `stdout`/`stderr`: capture instead of inheriting."""
    wasi = WasiConfig()
    wasi.argv = argv
    if stdout is None:
        wasi.inherit_stdout()
    else:
        wasi.stdout_file = stdout.path
        stdout.opened()
    if stderr is None:
        wasi.inherit_stderr()
    else:
        wasi.stderr_file = stderr.path
        stderr.opened()
    if sandbox.env:
        wasi.env = list(sandbox.env.items())
    if sandbox.read_only_dir is not None:
        # fs_mutable=False: wasmtime preopens with read-only dir and file permissions (writes get EPERM).
        wasi.preopen_dir(str(sandbox.read_only_dir), sandbox.guest_dir, fs_mutable=False)
    return wasi


def sandbox_problems(sandbox: SandboxConfig) -> list[str]:
    """Why this sandbox config cannot be honoured, each naming its config key (empty: it can)."""
    problems = []
    if sandbox.inherit_network:
        problems.append(
            "`sandbox.inherit-network` cannot be granted: wasmtime-py 50 denies components every socket even when "
            "the network is inherited; remove it from the config"
        )
    if sandbox.read_only_dir is not None and not sandbox.read_only_dir.is_dir():
        problems.append(f"`sandbox.read-only-dir` = {sandbox.read_only_dir} is not a directory")
    return problems


def new_store(
    engine: Engine,
    sandbox: SandboxConfig,
    argv: list[str],
    stdout: CapturedOutput | None = None,
    stderr: CapturedOutput | None = None,
    *,
    scope: RunScope,
) -> Store:
    """A sandboxed store whose data is `scope` (host functions find the run's handles there; see `run.scope`).
    The caller owns both: it closes the scope, then the store, when the run ends."""
    store = Store(engine, scope)
    store.set_wasi(wasi_config(sandbox, argv, stdout, stderr))
    # The limit applies to each linear memory; a guest that hits it sees allocation failure (Python: MemoryError).
    store.set_limits(memory_size=sandbox.max_memory_mb * 1024 * 1024)
    store.set_epoch_deadline(deadline_ticks(sandbox.timeout_s))
    return store


def deadline_ticks(timeout_s: float | None) -> int:
    if timeout_s is None:
        return NO_DEADLINE_TICKS
    # +1: the first tick comes anywhere within one period after the deadline is set; the guest gets at least
    # `timeout_s` and at most one tick more.
    return math.ceil(timeout_s / EPOCH_TICK_S) + 1


class EpochTicker:
    """Advances the engine's epoch every `EPOCH_TICK_S` on a daemon thread, so store deadlines can expire.

    One ticker per engine serves every store at once (each store's deadline is relative to when it was set).
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="llmhost-epoch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(EPOCH_TICK_S):
            self._engine.increment_epoch()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def scope_of(store: Any) -> RunScope:
    """The `RunScope` a store was created with (host functions get the store's context as `store`)."""
    data = ffi.wasmtime_context_get_data(store._context())
    scope = _value._unintern(data) if data else None  # type: ignore[arg-type]  # as wasmtime-py's Store.data
    if not isinstance(scope, RunScope):
        raise EngineError("this store has no run scope (create stores with runtime.sandbox.new_store)")
    return scope
