"""Build a Python guest (a directory with `app.py`) into a component with componentize-py.

componentize-py takes ~20 s per build, so outputs are cached under `cache_dir/guests`, keyed by everything
that goes into the build: the app's files, the WIT files, the world and the componentize-py version.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from llmhost.config import default_cache_dir
from llmhost.toolchains import build_component as build_component  # the one entry point; long imported from here
from llmhost.toolchains import deps, locks
from llmhost.toolchains.errors import BuildError
from llmhost.toolchains.imports import entry_source, snapshot_imports
from llmhost.toolchains.progress import heartbeat
from llmhost.toolchains.sources import BUILT_SUFFIXES, CACHE_DIRS
from llmhost.toolchains.wit_docs import WIT_DIR, docs_of, wit_files, with_docs

Note = Callable[[str], None]  # receives one-line progress messages
APP_MODULE = "app"  # the guest's entry module: `app.py` defining `class WitWorld(WitWorld)`
COMPONENTIZE_PY = "componentize-py"
# Build products and tool caches in an app dir: not sources, and they change between identical builds.
IGNORED_DIRS = CACHE_DIRS
# Not sources: byte code, built components, and documentation (a template's README names its own directory, so a
# copy of one would otherwise never hit the cache; tests build templates every run).
IGNORED_SUFFIXES = {*BUILT_SUFFIXES, ".md"}
IGNORED_NAMES = {"llmhost.toml"}  # the host's config beside a guest (its grants): read when it runs, not built in
# The files of a guest that are build inputs whatever their size: code, WIT and manifests. Any other file is data:
# keyed when it is small (a module may read it at import time, which the snapshot keeps), skipped from
# DATA_KEY_LIMIT bytes up (a model, a corpus: componentize-py bundles no data files, so a big one is no input, and
# hashing it at every rebuild under `--watch` would read it all).
INPUT_SUFFIXES = {".py", ".pyi", ".wit", ".toml"}
INPUT_NAMES = {"requirements.txt"}
DATA_KEY_LIMIT = 1024 * 1024
HASH_CHUNK = 1024 * 1024  # files are hashed in pieces of this size, never read whole
MANIFEST_LIMIT = 1024 * 1024  # a root manifest larger than this is keyed as bytes, not parsed
# A guest's manifest (at its root) is keyed without the fields that only describe the project, for the same reason:
# `llmhost new NAME` writes NAME into it, and nothing else there changes.
PROJECT_FIELDS = {"name", "version", "description", "readme", "authors", "maintainers", "license", "keywords", "urls"}
PACKAGE_FIELDS = {"name", "version", "description", "author", "contributors", "license", "keywords", "homepage", "bugs"}
# file -> (the table holding the fields, "" for the top level; the fields)
DESCRIPTIVE_FIELDS = {"pyproject.toml": ("project", PROJECT_FIELDS), "package.json": ("", PACKAGE_FIELDS)}


# Every guest `llmhost build` produces starts with this prelude. componentize-py's `sys.stdout`/`sys.stderr` write
# straight to WASI, which takes at most 64 KiB per write and drops the rest without an error: the prelude puts a
# writer in front that retries until every byte is written (unbuffered, so nothing waits for a flush).
PRELUDE_MODULE = "_llmhost_prelude"
ENTRY_MODULE = "_llmhost_entry"
PRELUDE = """\
import io
import os
import sys


class _WholeWrites(io.RawIOBase):
    def __init__(self, fd):
        self._fd = fd

    def writable(self):
        return True

    def fileno(self):
        return self._fd

    def write(self, data):
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            written = os.write(self._fd, view[done:])
            if written <= 0:
                raise OSError("write returned 0")
            done += written
        return done


def _install():
    for name, fd in (("stdout", 1), ("stderr", 2)):
        stream = io.TextIOWrapper(_WholeWrites(fd), encoding="utf-8", errors="backslashreplace", write_through=True)
        setattr(sys, name, stream)
        setattr(sys, "__" + name + "__", stream)


_install()
"""


def entry(app_dir: Path, site: Path | None = None) -> str:
    """The generated entry module: the prelude, every module the app imports anywhere (toolchains/imports.py), then
    app.py's world classes. `site`: the guest's installed dependencies (toolchains/deps.py), if any: what they import
    is imported too."""
    stripped = deps.stripped_modules(site) if site is not None else {}
    return entry_source(PRELUDE_MODULE, APP_MODULE, snapshot_imports(app_dir, site), stripped)


def wit_dir() -> Path:
    """The canonical WIT: `wit/` at the root of a source checkout, else `llmhost/wit` inside the package."""
    here = Path(__file__).resolve().parents[1]  # the package directory
    for candidate in (here.parents[1] / "wit", here / "wit"):
        if (candidate / "llm.wit").is_file():  # wit/0.1.0/ below it holds the previous version's WIT
            return candidate
    raise BuildError(f"the WIT files were not found next to {here} (a broken install? reinstall llmhost)")


def write_wit(output: Path) -> Path:
    """Copy the WIT package llmhost serves into `output`: the current version's files, and each earlier version in
    its own folder (`0.1.0/`, ...), as the package ships them."""
    source = wit_dir()
    output.mkdir(parents=True, exist_ok=True)
    for path in sorted(source.rglob("*.wit")):
        target = output / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    return output


def guest_sdk_dir() -> Path:
    """The directory holding the `llmhost_guest` package (the guest SDK), put on every guest's module path."""
    return Path(__file__).resolve().parents[1] / "guest_sdk"


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
        ignored = path.suffix in IGNORED_SUFFIXES or path.name in IGNORED_NAMES
        if path.is_file() and not IGNORED_DIRS.intersection(relative.parts) and not ignored and is_input(path):
            yield path


def is_input(path: Path) -> bool:
    """Whether a guest's file goes into its build (its key): code, WIT and manifests, and data under
    DATA_KEY_LIMIT."""
    return path.suffix in INPUT_SUFFIXES or path.name in INPUT_NAMES or path.stat().st_size < DATA_KEY_LIMIT


def file_sha256(path: Path) -> bytes:
    """A file's sha256, read in HASH_CHUNK pieces (a big file costs no memory)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.digest()


def digest_files(digest: Any, label: str, root: Path, paths: Iterable[Path]) -> None:
    """Add each file's path (relative to `root`) and content to a build key's `digest` (every toolchain's key)."""
    for path in paths:
        digest.update(f"|{label}:{path.relative_to(root).as_posix()}:".encode())
        content = manifest_content(path) if path.parent == root else None
        digest.update(hashlib.sha256(content).digest() if content is not None else file_sha256(path))


def manifest_content(path: Path) -> bytes | None:
    """A root manifest's content without its descriptive fields (`DESCRIPTIVE_FIELDS`), as canonical JSON; None for
    any other file, or a manifest that does not parse (keyed whole: its build fails and says why)."""
    if path.name not in DESCRIPTIVE_FIELDS or path.stat().st_size > MANIFEST_LIMIT:
        return None
    table, fields = DESCRIPTIVE_FIELDS[path.name]
    try:
        text = path.read_text(encoding="utf-8")
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    described = data.get(table) if table else data
    if not isinstance(described, dict):
        return None
    for field in fields:
        described.pop(field, None)
    return json.dumps(data, sort_keys=True).encode()


def build_key(app_dir: Path, wit: Path, world: str, tool_version: str, site: Path | None = None) -> str:
    prelude = hashlib.sha256((PRELUDE + entry(app_dir, site)).encode()).hexdigest()
    installed = f"|deps={site.name}" if site is not None else ""  # the install's key names what went into it
    digest = hashlib.sha256(f"world={world}|{tool_version}|prelude={prelude}{installed}".encode())
    for label, root in (("app", app_dir), ("wit", wit), ("sdk", guest_sdk_dir())):
        digest_files(digest, label, root, _source_files(root))
    return digest.hexdigest()[:40]


def build_python(
    app_dir: Path,
    output: Path,
    world: str | None,
    wit: Path | None,
    cache_dir: Path | None,
    note: Note | None,
    upgrade: bool,
) -> Path:
    """`build_component` of a Python guest: `app_dir/app.py` into the component `output` (copied from the cache when
    the sources are unchanged). `world`: None reads it from the guest (see `world.detect_world`)."""
    from llmhost.toolchains.world import check_sources, detect_world

    if not (app_dir / f"{APP_MODULE}.py").is_file():
        raise BuildError(
            f"{app_dir}: no {APP_MODULE}.py or app.js (a guest directory needs one; start one with `llmhost new NAME`"
            ", or `llmhost new NAME --lang js`)"
        )
    check_sources(app_dir)
    world = world or detect_world(app_dir)
    tool = componentize_py()
    wit = wit or wit_dir()  # another WIT directory, e.g. wit/0.1.0 to build a guest of the previous version
    declared = deps.declared(app_dir)
    site = None if declared is None else deps.install(declared, cache_dir or default_cache_dir(), note, upgrade)
    cached = cached_build(app_dir, wit, world, tool, cache_dir, site)
    locks.build_once(cached, lambda: _build(tool, app_dir, wit, world, cached, site, note))
    if note is not None and site is not None and (warning := deps.data_warning(site)) is not None:
        note(warning)  # every build says it, a cached one too
    output.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(cached, output)
    return output


def _build(
    tool: str, app_dir: Path, wit: Path, world: str, cached: Path, site: Path | None, note: Callable[[str], None] | None
) -> None:
    started = time.monotonic()
    # A compiled component keeps no doc comments: tool descriptions need them, added before the build is cached
    # (a build that finds `cached` takes it as it is).
    documented = bool(wit_files(app_dir))
    built = cached.with_name(cached.name + ".undocumented") if documented else cached
    with guest_wit(app_dir, wit) as world_wit, heartbeat(note, f"building {app_dir} ({world}) with componentize-py"):
        _componentize(tool, app_dir, world_wit, world, built, site)
    if documented:
        try:
            staged = cached.with_suffix(".docs.tmp")  # the caller holds the entry's lock: a fixed name is safe
            staged.write_bytes(with_docs(built.read_bytes(), docs_of(app_dir)))
            os.replace(staged, cached)
        finally:
            built.unlink(missing_ok=True)
    if note is not None:
        bundled = f", with {', '.join(deps.bundled(site))}" if site is not None else ""
        size = cached.stat().st_size / 1024 / 1024
        note(f"built {app_dir} in {time.monotonic() - started:.1f} s ({size:.1f} MB{bundled})")


def cached_build(
    app_dir: Path,
    wit: Path,
    world: str,
    tool: str | None = None,
    cache_dir: Path | None = None,
    site: Path | None = None,
) -> Path:
    """Where the build of these sources is (or would be) cached (`site`: its installed dependencies, if any)."""
    tool = tool or componentize_py()
    key = build_key(app_dir, wit, world, _tool_version(tool), site)
    return (cache_dir or default_cache_dir()) / "guests" / f"{key}.wasm"


def bindings(app_dir: Path, output: Path, world: str | None = None, wit: Path | None = None) -> Path:
    """Write the generated `wit_world` Python package for `app_dir`'s world into `output` (for editors)."""
    from llmhost.toolchains.world import detect_world

    world = world or detect_world(app_dir)
    from llmhost.toolchains.world import explain_wit_failure

    with guest_wit(app_dir, wit or wit_dir()) as world_wit:
        command = [componentize_py(), "-d", str(world_wit), "-w", world, "bindings", str(output)]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        failure = (result.stderr or result.stdout).strip()
        explained = explain_wit_failure(app_dir, failure, world_wit) if result.returncode != 0 else None
    if result.returncode != 0:
        raise BuildError(explained or f"componentize-py could not write the bindings: {failure}")
    return output


_PACKAGE_LINE = re.compile(r"^\s*package\s+llmhost:llm@(\d+\.\d+\.\d+)\s*;", re.M)
_LLM_REFERENCE = re.compile(r"\bllmhost:llm/[a-z][a-z0-9-]*@(\d+\.\d+\.\d+)")


def shipped_versions(wit: Path) -> dict[str, Path]:
    """Each `llmhost:llm` version in a WIT directory as llmhost ships it: the current one at the top, earlier ones
    in their own folders (`0.2.2/`, ...) -> the folder holding its files."""
    found = {}
    for folder in (wit, *sorted(p for p in wit.iterdir() if p.is_dir() and p.name != "deps")):
        llm = folder / "llm.wit"
        if llm.is_file() and (match := _PACKAGE_LINE.search(llm.read_text(encoding="utf-8"))):
            found[match.group(1)] = folder
    return found


def referenced_version(texts: Iterable[str], wit: Path, where: str) -> Path:
    """The folder of the one `llmhost:llm` version that guest sources (WIT, or JavaScript imports) name, e.g.
    `import llmhost:llm/llm@0.2.2;`; the current version when they name none. A guest written against an earlier
    version builds against that version, unchanged."""
    versions = shipped_versions(wit)
    named = sorted({m.group(1) for text in texts for m in _LLM_REFERENCE.finditer(text)})
    if not named:
        return wit
    if len(named) > 1:
        raise BuildError(f"{where} names llmhost:llm at several versions ({', '.join(named)}): use one of them")
    if named[0] not in versions:
        raise BuildError(
            f"{where} names llmhost:llm@{named[0]}, which this llmhost does not ship (it has "
            f"{', '.join(sorted(versions))}): change the version in the import"
        )
    return versions[named[0]]


def copy_package(source: Path, deps: Path) -> None:
    """One `llmhost:llm` version's files as a dependency (`deps/llmhost-llm/`), with the standard packages its
    worlds import (`deps/` of llmhost's WIT: wasi:keyvalue, wasi:config)."""
    llm = deps / "llmhost-llm"
    if not llm.exists():
        llm.mkdir(parents=True)
        for path in sorted(source.glob("*.wit")):  # one version only: a package per directory
            shutil.copyfile(path, llm / path.name)
    standard = wit_dir() / "deps"
    if standard.is_dir():
        for package in sorted(p for p in standard.iterdir() if p.is_dir()):
            if not (deps / package.name).exists():
                shutil.copytree(package, deps / package.name)


@contextlib.contextmanager
def guest_wit(app_dir: Path, wit: Path) -> Iterator[Path]:
    """The WIT directory a guest builds against: llmhost's; or, for a guest of its own world (`wit/` beside app.py),
    its WIT package with the llmhost version it names as a dependency (so it can `import llmhost:llm/llm@VERSION`
    or `include llmhost:llm/platform@VERSION`)."""
    files = wit_files(app_dir)
    if not files:
        yield wit
        return
    texts = [path.read_text(encoding="utf-8") for path in files]
    source = referenced_version(texts, wit, str(app_dir / WIT_DIR))
    with tempfile.TemporaryDirectory(prefix="llmhost-wit-") as tmp:
        combined = Path(tmp) / "wit"
        shutil.copytree(app_dir / WIT_DIR, combined)
        copy_package(source, combined / "deps")
        yield combined


def _componentize(tool: str, app_dir: Path, wit: Path, world: str, destination: Path, site: Path | None) -> None:
    from llmhost.toolchains.world import explain_build_failure

    destination.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=destination.parent, suffix=".wasm.tmp")
    os.close(fd)
    with tempfile.TemporaryDirectory(prefix="llmhost-entry-") as entry_dir:
        # The entry module runs the prelude, then re-exports app.py's world classes (see PRELUDE).
        Path(entry_dir, f"{ENTRY_MODULE}.py").write_text(entry(app_dir, site))
        Path(entry_dir, f"{PRELUDE_MODULE}.py").write_text(PRELUDE)
        command = [tool, "-d", str(wit), "-w", world, "componentize", ENTRY_MODULE, "-p", entry_dir, "-p", str(app_dir)]
        command += ["-p", str(guest_sdk_dir())]  # the app's own modules shadow the SDK's
        command += ["-p", str(site)] if site is not None else []  # and the SDK its dependencies
        command += ["-o", tmp]
        # componentize-py adds $VIRTUAL_ENV's site-packages to the guest's module path, and without one `pipenv
        # --venv`'s, or else those of the first `python3` on PATH: the build machine's packages, which the cache
        # key cannot see. An empty environment of its own stops every fallback: the guest gets only its own
        # directory and the SDK.
        empty = Path(entry_dir, "no-site-packages")
        (empty / "lib" / "site-packages").mkdir(parents=True)
        env = {**os.environ, "VIRTUAL_ENV": str(empty)}
        try:
            result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
            if result.returncode != 0:
                output = (result.stderr or result.stdout).strip()
                raise BuildError(explain_build_failure(app_dir, world, output, wit))
            os.replace(tmp, destination)
        finally:
            Path(tmp).unlink(missing_ok=True)
