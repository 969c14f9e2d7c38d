"""Build a Python guest (a directory with `app.py`) into a component with componentize-py.

componentize-py takes ~20 s per build, so outputs are cached under `cache_dir/guests`, keyed by everything
that goes into the build: the app's files, the WIT files, the world and the componentize-py version.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from .config import default_cache_dir

APP_MODULE = "app"  # the guest's entry module: `app.py` defining `class WitWorld(WitWorld)`
COMPONENTIZE_PY = "componentize-py"
# Build products and tool caches in an app dir: not sources, and they change between identical builds.
IGNORED_DIRS = {"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".git"}
IGNORED_SUFFIXES = {".pyc", ".pyo", ".wasm"}


class BuildError(Exception):
    """The guest could not be built; the message names the fix."""


def wit_dir() -> Path:
    """The canonical WIT: `wit/` at the root of a source checkout, else `llmhost/wit` inside the package."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parents[1] / "wit", here / "wit"):
        if (candidate / "llm.wit").is_file():  # wit/0.1.0/ below it holds the previous version's WIT
            return candidate
    raise BuildError(f"the WIT files were not found next to {here} (a broken install? reinstall llmhost)")


def guest_sdk_dir() -> Path:
    """The directory holding the `llmhost_guest` package (the guest SDK), put on every guest's module path."""
    return Path(__file__).resolve().parent / "guest_sdk"


def componentize_py() -> str:
    """componentize-py from this interpreter's environment first (the pinned version), else from PATH."""
    beside = Path(sys.executable).parent / COMPONENTIZE_PY
    if beside.is_file():
        return str(beside)
    found = shutil.which(COMPONENTIZE_PY)
    if found is None:
        raise BuildError(f"{COMPONENTIZE_PY} was not found (install it: pip install componentize-py==0.25.1)")
    return found


def _tool_version(tool: str) -> str:
    result = subprocess.run([tool, "--version"], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BuildError(f"`{tool} --version` failed: {result.stderr.strip()}")
    return result.stdout.strip()


def _source_files(root: Path) -> Iterator[Path]:
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if path.is_file() and not IGNORED_DIRS.intersection(relative.parts) and path.suffix not in IGNORED_SUFFIXES:
            yield path


def build_key(app_dir: Path, wit: Path, world: str, tool_version: str) -> str:
    digest = hashlib.sha256(f"world={world}|{tool_version}".encode())
    for label, root in (("app", app_dir), ("wit", wit), ("sdk", guest_sdk_dir())):
        for path in _source_files(root):
            digest.update(f"|{label}:{path.relative_to(root).as_posix()}:".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:40]


def build_component(
    app_dir: str | Path,
    output: str | Path,
    world: str = "command",
    *,
    cache_dir: Path | None = None,
    note: Callable[[str], None] | None = None,
    wit: Path | None = None,
) -> Path:
    """Build `app_dir/app.py` into the component `output` (copied from the cache when the sources are unchanged)."""
    app_dir, output = Path(app_dir), Path(output)
    if not (app_dir / f"{APP_MODULE}.py").is_file():
        raise BuildError(f"{app_dir}: no {APP_MODULE}.py (a guest directory needs app.py with `class WitWorld`)")
    tool = componentize_py()
    wit = wit or wit_dir()  # another WIT directory, e.g. wit/0.1.0 to build a guest of the previous version
    cached = (
        (cache_dir or default_cache_dir()) / "guests" / f"{build_key(app_dir, wit, world, _tool_version(tool))}.wasm"
    )
    if not cached.is_file():
        if note is not None:
            note(f"building {app_dir} with componentize-py (~20 s; cached afterwards)")
        _componentize(tool, app_dir, wit, world, cached)
    output.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(cached, output)
    return output


def _componentize(tool: str, app_dir: Path, wit: Path, world: str, destination: Path) -> None:
    destination.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=destination.parent, suffix=".wasm.tmp")
    os.close(fd)
    command = [tool, "-d", str(wit), "-w", world, "componentize", APP_MODULE, "-p", str(app_dir)]
    command += ["-p", str(guest_sdk_dir()), "-o", tmp]  # the app's own modules shadow the SDK's
    # componentize-py adds $VIRTUAL_ENV's site-packages to the guest's module path; the host's virtualenv is
    # not the guest's (and the cache key cannot see it), so the guest gets only its own directory and the SDK.
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    try:
        result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        if result.returncode != 0:
            output = (result.stderr or result.stdout).strip()
            raise BuildError(f"componentize-py failed for {app_dir}:\n{output}")
        os.replace(tmp, destination)
    finally:
        Path(tmp).unlink(missing_ok=True)
