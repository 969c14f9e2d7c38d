"""`--watch` (serve and mcp): a change under a component's guest directory rebuilds it and swaps it in.

The pure parts first, tested apart from any I/O: which paths are sources (`SourceFilter`: build outputs, installed
packages, caches and editor temp files are not) and when a burst of changes has settled (`Debouncer`: an editor's
save is several events, a `git checkout` many). Then `Watcher`, on the server's event loop: it waits for file events
(watchfiles, what uvicorn's own reload uses), builds the changed guest and loads it on a thread, and hands the new
component to the server's `swap`. A build or load that fails is logged (a build error names the file and line) and
the previous component keeps serving. Models and key-value state belong to the host, which is never replaced.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from llmhost.toolchains.sources import BUILT_SUFFIXES, CACHE_DIRS

_log = logging.getLogger("llmhost.serve")

# Folders that are never sources: installed packages, generated bindings, caches and version control.
IGNORED_DIRS = CACHE_DIRS | {"node_modules", ".bindings", ".hg", ".venv"}
# Build outputs and compiled files; SQLite's files (a key-value store kept beside the app changes on every write).
IGNORED_SUFFIXES = (*BUILT_SUFFIXES, ".cwasm", ".tmp", ".db", ".db-journal", ".db-wal", ".db-shm")
# Editor temp files: Emacs backups (`app.py~`) and locks (`.#app.py`), Vim swap files (`.app.py.swp`, `.swo`, ...,
# down to `.saa`, and `.swx`) and the `4913` file Vim writes to test a directory, JetBrains' safe-write copies.
EDITOR_TEMP = re.compile(r"~$|^\.#|^\..*\.s[a-w][a-z]$|^4913$|\.___jb_\w+___$")
QUIET_S = 0.3  # a component is rebuilt once its sources have had no change for this long
MAX_WAIT_S = 2.0  # ... or this long after its first change, however busy the directory (a long copy)
POLL_MS = 100  # how often the watcher looks at the debouncer between file events


class SourceFilter:
    """Which changed paths are sources of which component (`roots`: name -> its guest directory). `ignore`: paths
    whose changes never count (the server's data and cache directories, when inside a guest directory)."""

    def __init__(self, roots: Mapping[str, Path], ignore: Iterable[Path] = ()) -> None:
        self.roots = {name: Path(os.path.abspath(root)) for name, root in roots.items()}
        self._ignore = tuple(Path(os.path.abspath(p)) for p in ignore)

    def is_source(self, path: Path) -> bool:
        """Whether a change to `path` can change a build (False for outputs, caches, temp files, ignored paths)."""
        path = Path(os.path.abspath(path))
        if any(path == p or p in path.parents for p in self._ignore):
            return False
        if any(part in IGNORED_DIRS for part in path.parts):
            return False
        return not (path.name.endswith(IGNORED_SUFFIXES) or EDITOR_TEMP.search(path.name))

    def __call__(self, change: object, path: str) -> bool:  # watchfiles' filter: True keeps the event
        return self.is_source(Path(path))

    def owners(self, paths: Iterable[str | Path]) -> dict[str, list[Path]]:
        """The components whose sources `paths` are (a directory may be several components' source) -> their
        changed source paths."""
        found: dict[str, list[Path]] = {}
        for raw in paths:
            path = Path(os.path.abspath(raw))
            if not self.is_source(path):
                continue
            for name, root in self.roots.items():
                if path == root or root in path.parents:
                    found.setdefault(name, []).append(path)
        return found


@dataclass
class _Pending:
    first: float  # when its first change was seen (monotonic)
    last: float  # when its latest change was seen
    saved: float  # the earliest wall-clock time its changed files were written (for "from save to serving")


@dataclass
class Debouncer:
    """Changes per component, released once settled: `QUIET_S` after the last change, or `MAX_WAIT_S` after the first.
    Pure: the caller passes the clock."""

    quiet_s: float = QUIET_S
    max_wait_s: float = MAX_WAIT_S
    _pending: dict[str, _Pending] = field(default_factory=dict)

    def add(self, name: str, now: float, saved: float) -> None:
        pending = self._pending.get(name)
        if pending is None:
            self._pending[name] = _Pending(now, now, saved)
        else:
            pending.last = now
            pending.saved = min(pending.saved, saved)

    def due(self, now: float) -> dict[str, float]:
        """The components to rebuild now -> when their changes were saved (wall clock); they leave the debouncer."""
        ready = {
            name: p.saved
            for name, p in self._pending.items()
            if now - p.last >= self.quiet_s or now - p.first >= self.max_wait_s
        }
        for name in ready:
            del self._pending[name]
        return ready

    def pending(self) -> bool:
        return bool(self._pending)


def saved_at(paths: Iterable[Path]) -> float:
    """When the earliest of these files was written (wall clock): a reload is timed from the save, not from when
    the event arrived. Now when none still exists (deleted)."""
    times = []
    for path in paths:
        try:
            times.append(path.stat().st_mtime)
        except OSError:
            continue
    return min(times, default=time.time())


Loaded = TypeVar("Loaded")


@dataclass(frozen=True)
class Reload:
    """One successful reload, timed: from the save to the new component serving, the build and the load."""

    name: str
    total_s: float
    built_s: float
    compiled_s: float

    def line(self) -> str:
        times = f"built {self.built_s:.1f} s, compiled {self.compiled_s:.1f} s"
        return f"reloaded {self.name} in {self.total_s:.1f} s ({times})"


class Watcher(Generic[Loaded]):
    """Rebuilds and swaps components on the server's event loop. `build(name)` builds a component's guest directory
    and returns the component file; `load(name, path)` loads (compiles) it; both run on a thread. `swap(name, loaded)`
    runs on the loop and puts it in service. `ignore`: paths inside guest directories that are no sources."""

    def __init__(
        self,
        roots: Mapping[str, Path],
        build: Callable[[str], Path],
        load: Callable[[str, Path], Loaded],
        swap: Callable[[str, Loaded], None],
        ignore: Iterable[Path] = (),
        current: Mapping[str, Path] | None = None,
    ) -> None:
        self.filter = SourceFilter(roots, ignore)
        self._build, self._load, self._swap = build, load, swap
        self.debouncer = Debouncer()
        # Each component's current build, by content: a rebuild to the same bytes (a comment's whitespace, a file
        # touched) is no reload.
        self._digests = {name: _digest(path) for name, path in (current or {}).items()}
        self.reloads: list[Reload] = []

    def start(self) -> None:
        """On the running event loop: watch in a task of its own until `stop()`."""
        import asyncio

        import anyio

        self._loop = asyncio.get_running_loop()
        self._stop = anyio.Event()
        self._task = asyncio.ensure_future(self.run(self._stop))
        self._task.add_done_callback(_log_failure)

    def stop(self) -> None:
        """From any thread (a signal handler): stop watching."""
        loop, stop = getattr(self, "_loop", None), getattr(self, "_stop", None)
        if loop is not None and stop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stop.set)

    async def run(self, stop: object) -> None:
        """Watch until `stop` (an anyio or asyncio Event) is set."""
        from watchfiles import awatch

        if not self.filter.roots:
            return
        roots = sorted({str(root) for root in self.filter.roots.values()})
        _log.info("watching %s for changes", ", ".join(roots))
        async for changes in awatch(
            *roots,
            watch_filter=self.filter,
            stop_event=stop,  # type: ignore[arg-type]
            debounce=int(MAX_WAIT_S * 1000),
            step=50,
            rust_timeout=POLL_MS,
            yield_on_timeout=True,
        ):
            now = time.monotonic()
            for name, paths in self.filter.owners(path for _, path in changes).items():
                self.debouncer.add(name, now, saved_at(paths))
            for name, saved in self.debouncer.due(time.monotonic()).items():
                await self.reload(name, saved)

    async def reload(self, name: str, saved: float) -> Reload | None:
        """Build and load `name` on a thread, then swap it in; None when it failed (logged) or did not change."""
        started = time.monotonic()
        try:
            path = await on_thread(self._build, name)
        except Exception as error:  # a build error is the developer's to fix: the old component keeps serving
            _log.error("%s: the build failed; still serving the previous version: %s", name, error)
            return None
        built = time.monotonic()
        digest = _digest(path)
        if self._digests.get(name) == digest:
            _log.info("%s: rebuilt, unchanged", name)
            return None
        try:
            loaded = await on_thread(self._load, name, path)
        except Exception as error:  # e.g. it no longer exports the handler
            _log.error("%s: the new build cannot be loaded; still serving the previous version: %s", name, error)
            return None
        self._swap(name, loaded)
        self._digests[name] = digest
        done = time.monotonic()
        reload = Reload(name, max(time.time() - saved, done - started), built - started, done - built)
        self.reloads.append(reload)
        _log.info("%s", reload.line())
        return reload


R = TypeVar("R")


async def on_thread(function: Callable[..., R], *args: object) -> R:
    """`function(*args)` on a daemon thread of its own, awaited on the event loop: a build under way never holds up
    the process's exit at shutdown (a worker pool's threads are joined at exit; a build takes ~20 s)."""
    import asyncio

    loop = asyncio.get_running_loop()
    future: asyncio.Future[R] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        if not future.done():
            outcome()

    def work() -> None:
        outcome: Callable[[], None]
        try:
            outcome = functools.partial(future.set_result, function(*args))
        except BaseException as error:  # handed to the awaiting task, which decides
            outcome = functools.partial(future.set_exception, error)
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits for it any more
            loop.call_soon_threadsafe(settle, outcome)

    threading.Thread(target=work, name="llmhost-watch", daemon=True).start()
    return await future


def _log_failure(task: object) -> None:
    """The watcher's task ended: say so if it failed (serving goes on, without watching)."""
    import asyncio

    assert isinstance(task, asyncio.Future)
    if not task.cancelled() and task.exception() is not None:
        _log.error("--watch stopped: %s", task.exception(), exc_info=task.exception())


def _digest(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""
