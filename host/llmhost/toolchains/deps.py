"""PyPI dependencies of a Python guest: `[project].dependencies` of its pyproject.toml (or requirements.txt), installed
for the guest's interpreter into the build cache and put on its module path.

The guest runs componentize-py's CPython (GUEST_PYTHON) on WASI, which loads no compiled extension. So the install
resolves for that interpreter, not for the Python running the build: pip with `--python-version`, `--implementation`,
`--abi` and `--platform` (which pip allows only with `--only-binary=:all:`), markers evaluated for it. Pure wheels
(`py3-none-any`) install as they are; from a platform wheel (any of PLATFORMS: its Python code is the same) the
extension modules are removed, so that a package whose speedups are optional (markupsafe, pyyaml) falls back to its
Python code, and one that needs them fails the build naming the package and the module. A package with no wheel at
all is built from its sdist (by the build machine's Python) and used when that gives a pure wheel. The user's pip
configuration (pip.conf, `PIP_*`: indexes, find-links, certificates, proxies) applies: pip reads it as usual.
`[tool.llmhost] find-links = ["wheels/"]` (relative to the guest) is searched first, for WASI builds of packages.

The first resolve writes `pylock.toml` beside the guest (toolchains/pylock.py); later builds install exactly its
files (`--no-deps --require-hashes`), and resolve again only for `--upgrade` or when the declared requirements
changed (then preferring the locked versions). The install is cached by what decides it: the requirements, the
lock, the find-links' files, local packages' sources, the target and pip's version. A rebuild with unchanged
dependencies runs no pip at all (and so works offline).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from llmhost.toolchains import pylock, wheels
from llmhost.toolchains.errors import BuildError
from llmhost.toolchains.progress import heartbeat
from llmhost.toolchains.wheels import Note

GUEST_PYTHON = "3.14"  # componentize-py 0.25.1 embeds CPython 3.14
_ABI = "cp314"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "any")
EXTENSION_SUFFIXES = (".so", ".pyd", ".dylib")
STRIPPED_FILE = "llmhost-stripped.json"  # module name -> distribution, for the build's error messages
# Package data files (anything but Python code and metadata) of each distribution, which the component does not get:
# componentize-py keeps the modules imported when it snapshots the guest, and a guest has no files at run time.
DATA_FILE = "llmhost-data-files.json"
_CODE_SUFFIXES = (".py", ".pyi", ".pyc", ".pth")
_NOT_DATA = {"py.typed", STRIPPED_FILE, DATA_FILE}
DATA_SHOWN = 4  # folders or files named per distribution in the build's warning
_SDIST_ROUNDS = 20  # packages built from sdists in one resolve, at most


@dataclass(frozen=True)
class Dependencies:
    requirements: tuple[str, ...]  # as pip takes them (a local path as an absolute file URL)
    find_links: tuple[Path, ...]
    source: str  # where they were declared, for messages
    app_dir: Path = Path(".")
    declared: tuple[str, ...] = ()  # as the guest writes them (what the lock records)

    def key(self, lock: str = "") -> str:
        # Requirements as written (a local package relative to the guest) and the local folders' contents: a copy of
        # the guest and its packages elsewhere reuses the install.
        written = self.declared or self.requirements
        digest = hashlib.sha256(json.dumps([GUEST_PYTHON, PLATFORMS, written, _pip_version()]).encode())
        digest.update(lock.encode())
        folders = [*self.find_links, *(Path(p) for p in _split_local(self.requirements)[1])]
        for folder in folders:
            for path in sorted(folder.rglob("*")) if folder.is_dir() else ():
                relative = path.relative_to(folder)
                if path.is_file() and not {"build", "dist", "__pycache__"}.intersection(relative.parts):
                    digest.update(str(relative).encode() + bytes.fromhex(wheels.sha256(path)))
        return digest.hexdigest()[:32]


def declared(app_dir: Path) -> Dependencies | None:
    """The guest's dependencies: pyproject's `[project].dependencies`, else requirements.txt; None when it has none."""
    data: dict[str, object] = {}
    pyproject = app_dir / "pyproject.toml"
    if pyproject.is_file():
        try:
            data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as error:
            raise BuildError(f"{pyproject}: {error}") from None
    project = data.get("project", {})
    listed = project.get("dependencies", []) if isinstance(project, dict) else []
    if not isinstance(listed, list) or not all(isinstance(r, str) for r in listed):
        raise BuildError(f"{pyproject}: [project] dependencies must be a list of requirement strings")
    source = f"{pyproject} [project] dependencies"
    written = [r.strip() for r in listed]
    if not written and (app_dir / "requirements.txt").is_file():
        source = str(app_dir / "requirements.txt")
        lines = (app_dir / "requirements.txt").read_text(encoding="utf-8").splitlines()
        written = [line.split("#", 1)[0].strip() for line in lines]
        written = [r for r in written if r]
    if not written:
        return None
    tool = data.get("tool", {})
    links = tool.get("llmhost", {}).get("find-links", []) if isinstance(tool, dict) else []
    if not isinstance(links, list) or not all(isinstance(link, str) for link in links):
        raise BuildError(f"{pyproject}: [tool.llmhost] find-links must be a list of folders")
    for requirement in written:  # each goes to pip as an argument: an option there would be pip's, not a package
        if requirement.startswith("-") or "\n" in requirement or "\r" in requirement:
            raise BuildError(f"{source}: {requirement!r} is not a requirement (pip options are not taken here)")
    requirements = tuple(_local(app_dir, r) for r in written)
    found = tuple((app_dir / link).resolve() for link in links)
    return Dependencies(requirements, found, source, app_dir.resolve(), tuple(written))


def _local(app_dir: Path, requirement: str) -> str:
    """`name @ file:../shared` relative to the guest directory, as an absolute file URL (pip needs one)."""
    name, at, location = requirement.partition("@")
    location = location.strip()
    if at and location.startswith("file:") and not location.startswith("file:///"):
        return f"{name.strip()} @ {(app_dir / location.removeprefix('file:')).resolve().as_uri()}"
    return requirement


def install(deps: Dependencies, cache_dir: Path, note: Note = None, upgrade: bool = False) -> Path:
    """The folder holding the installed dependencies (built once per key, in the cache): from the guest's
    pylock.toml when it is for these requirements (and not `upgrade`), else resolved, and the lock written. A guest
    without a lock whose requirements were resolved before gets that resolve's lock (and install) back."""
    lock = None if upgrade else pylock.read(deps.app_dir)
    prefer = lock
    if lock is not None and lock.requirements != deps.declared:
        if note is not None:
            note(f"the dependencies changed since {pylock.LOCK_FILE} was written: resolving them again")
        lock = None
    target_parent, last = cache_dir / "guest-deps", _last_resolve(deps, cache_dir)
    if lock is not None and (target_parent / deps.key(lock.text) / STRIPPED_FILE).is_file():
        return target_parent / deps.key(lock.text)
    if lock is None and not upgrade and last.is_file():
        text = last.read_text(encoding="utf-8")
        if (target_parent / deps.key(text) / STRIPPED_FILE).is_file():
            pylock.write(deps.app_dir, text)
            return target_parent / deps.key(text)
    target_parent.mkdir(parents=True, exist_ok=True)
    how = f"from {pylock.LOCK_FILE}" if lock is not None else f"({', '.join(deps.declared)})"
    doing = f"installing the guest's dependencies {how} for CPython {GUEST_PYTHON}"
    with heartbeat(note, doing), tempfile.TemporaryDirectory(prefix="llmhost-deps-", dir=target_parent) as tmp:
        work = Path(tmp)
        staging = work / "site-packages"
        if lock is not None:
            _install_locked(deps, lock, staging, work, note)
            text = lock.text
        else:
            text = pylock.render(deps.declared, _resolve(deps, staging, work, prefer, note))
            if not pylock.write(deps.app_dir, text) and note is not None:
                note(f"{deps.app_dir} is read-only: no {pylock.LOCK_FILE} written")
            (work / "last.toml").write_text(text, encoding="utf-8")
            os.replace(work / "last.toml", last)
        stripped = _strip_extensions(staging)
        (staging / STRIPPED_FILE).write_text(json.dumps(stripped, indent=1, sort_keys=True))
        (staging / DATA_FILE).write_text(json.dumps(_data_files(staging), indent=1, sort_keys=True))
        target = target_parent / deps.key(text)
        if not target.exists():  # else another build installed the same set meanwhile
            os.replace(staging, target)
    return target


def _last_resolve(deps: Dependencies, cache_dir: Path) -> Path:
    """The lock of the last resolve of these requirements (kept in the cache, for a guest with no lock file)."""
    return cache_dir / "guest-deps" / f"{deps.key()}.pylock.toml"


def location(deps: Dependencies, cache_dir: Path) -> Path:
    """Where the install of the guest's dependencies as its pylock.toml pins them is (or would be) cached."""
    lock = pylock.read(deps.app_dir)
    if lock is not None and lock.requirements == deps.declared:
        return cache_dir / "guest-deps" / deps.key(lock.text)
    last = _last_resolve(deps, cache_dir)
    return cache_dir / "guest-deps" / deps.key(last.read_text(encoding="utf-8") if last.is_file() else "")


def _target_flags(links: list[Path]) -> list[str]:
    command = ["--only-binary=:all:", "--no-compile", "--python-version", GUEST_PYTHON, "--implementation", "cp"]
    command += [flag for abi in (_ABI, "abi3", "none") for flag in ("--abi", abi)]
    command += [flag for platform in PLATFORMS for flag in ("--platform", platform)]
    return command + [flag for folder in links for flag in ("--find-links", str(folder))]


def _resolve(
    deps: Dependencies, staging: Path, work: Path, prefer: pylock.Lock | None, note: Note
) -> list[pylock.Package]:
    """Resolve and install into `staging`; the packages installed, for the lock. A package with no usable wheel is
    built from its sdist (when that gives a pure wheel) and the resolve runs again."""
    pure, local = _split_local(deps.requirements)
    origins: dict[str, pylock.Package] = {}  # a wheel built here (its URL) -> what the lock records
    links = list(deps.find_links)
    for i, location in enumerate(local):
        wheel = wheels.from_directory(Path(location), work / f"local-{i}", deps.source, note)
        relative = os.path.relpath(location, deps.app_dir)
        origins[wheel.as_uri()] = pylock.Package(wheel.name.split("-")[0], None, "directory", path=relative)
        pure.append(str(wheel))
    constraints = work / "prefer.txt"  # a changed set keeps the versions it had where it can
    kept = [f"{p.name}=={p.version}" for p in prefer.packages if p.version] if prefer is not None else []
    constraints.write_text("\n".join(kept) + "\n")
    report, tried = work / "report.json", set[str]()
    for _ in range(_SDIST_ROUNDS):
        command = ["install", "--target", str(staging), "--report", str(report), *_target_flags(links)]
        try:
            wheels.pip(command + (["-c", str(constraints)] if kept else []) + pure, note)
            break
        except wheels.PipFailed as failure:
            if kept:  # the locked versions do not fit the new requirements: resolve without them
                kept = []
                continue
            missing = wheels.NO_DISTRIBUTION.search(failure.output)
            if missing is None or missing.group(1) in tried:  # (its built wheel did not do either)
                raise _failed(deps, failure) from None
            tried.add(missing.group(1))
            wheel, sdist = _from_sdist(missing.group(1), work / f"sdist-{len(tried)}", deps, note)
            origins[wheel.as_uri()] = sdist
            links.append(wheel.parent)
    else:
        raise BuildError(f"installing the guest's dependencies ({deps.source}): too many packages need sdists")
    return [_locked(deps, item, origins) for item in json.loads(report.read_text())["install"]]


def _locked(deps: Dependencies, item: dict[str, object], origins: dict[str, pylock.Package]) -> pylock.Package:
    metadata, info = item["metadata"], item["download_info"]
    assert isinstance(metadata, dict) and isinstance(info, dict)
    url = str(info["url"])
    if url in origins:  # built here: the lock records its sdist or directory
        return dataclasses.replace(origins[url], name=str(metadata["name"]))
    sha256 = info.get("archive_info", {}).get("hashes", {}).get("sha256")
    local = Path(unquote(urlsplit(url).path))
    if sha256 is None and urlsplit(url).scheme == "file":
        sha256 = wheels.sha256(local)
    where, path = pylock.located(deps.app_dir, url)
    return pylock.Package(metadata["name"], metadata["version"], "wheel", local.name, where, path, sha256)


def _install_locked(deps: Dependencies, lock: pylock.Lock, staging: Path, work: Path, note: Note) -> None:
    """Exactly the lock's files, with no resolve: pip `--no-deps --require-hashes`."""
    lines = []
    for i, package in enumerate(lock.packages):
        if package.kind == "directory":
            wheel = wheels.from_directory(
                (deps.app_dir / str(package.path)).resolve(), work / f"local-{i}", deps.source, note
            )
            lines.append(f"{wheel} --hash=sha256:{wheels.sha256(wheel)}")
        elif package.kind == "sdist":
            spec = f"{package.name}=={package.version} --hash=sha256:{package.sha256}"
            wheel, _ = _from_sdist(spec, work / f"sdist-{i}", deps, note)
            lines.append(f"{wheel} --hash=sha256:{wheels.sha256(wheel)}")
        else:
            lines.append(f"{package.name}=={package.version} --hash=sha256:{package.sha256}")
    requirements = work / "locked.txt"
    requirements.write_text("\n".join(lines) + "\n")
    command = ["install", "--target", str(staging), "--no-deps", "--require-hashes", "-r", str(requirements)]
    try:
        wheels.pip(command + _target_flags(list(deps.find_links)), note)
    except wheels.PipFailed as failure:
        raise BuildError(
            f"installing the guest's dependencies from {deps.app_dir / pylock.LOCK_FILE} failed (a locked file is "
            f"gone or changed? `llmhost build --upgrade` resolves them again):\n{failure.tail()}"
        ) from None


def _from_sdist(spec: str, out: Path, deps: Dependencies, note: Note) -> tuple[Path, pylock.Package]:
    return wheels.from_sdist(spec, out, deps.app_dir, deps.find_links, deps.source, note, GUEST_PYTHON)


def _failed(deps: Dependencies, failure: wheels.PipFailed) -> BuildError:
    """pip's own reason first. Only a package pip found no usable file for gets the guest's wheel rules; a conflict
    or a bad requirement string is pip's to explain."""
    reason = wheels.first_error(failure.output)
    if wheels.NO_DISTRIBUTION.search(failure.output) or "Could not find a version" in failure.output:
        return BuildError(
            f"installing the guest's dependencies ({deps.source}) for CPython {GUEST_PYTHON} failed: {reason} (a "
            f"package must have a pure-Python wheel, a platform wheel whose Python code works without its compiled "
            f"part, or an sdist that builds a pure wheel; `[tool.llmhost] find-links` can add WASI builds):\n"
            f"{failure.tail()}"
        )
    where = f"pip: {reason.removeprefix('ERROR:').strip()}" if reason else "pip failed"
    return BuildError(f"installing the guest's dependencies ({deps.source}): {where}\n{failure.tail()}")


def _split_local(requirements: tuple[str, ...]) -> tuple[list[str], list[str]]:
    pure, local = [], []
    for requirement in requirements:
        location = requirement.partition("@")[2].strip()
        if location.startswith("file:") and Path(location.removeprefix("file://")).is_dir():
            local.append(location.removeprefix("file://"))
        else:
            pure.append(requirement)
    return pure, local


def _strip_extensions(site: Path) -> dict[str, str]:
    """Remove compiled extension modules (a guest loads none): their module names, each with its distribution."""
    owners: dict[str, str] = {}
    for record in site.glob("*.dist-info/RECORD"):
        distribution = record.parent.name.split("-")[0].replace("_", "-").lower()
        for line in record.read_text(encoding="utf-8").splitlines():
            owners[line.split(",", 1)[0]] = distribution
    stripped = {}
    for path in sorted(p for p in site.rglob("*") if p.is_file() and p.name.endswith(EXTENSION_SUFFIXES)):
        relative = path.relative_to(site).as_posix()
        module = relative.split(".", 1)[0].replace("/", ".")
        stripped[module] = owners.get(relative, "?")
        path.unlink()
    return stripped


def _data_files(site: Path) -> dict[str, list[str]]:
    """Each distribution's data files (relative to `site`), which the component leaves out."""
    owners: dict[str, str] = {}
    for record in site.glob("*.dist-info/RECORD"):
        distribution = record.parent.name.split("-")[0].replace("_", "-").lower()
        for line in record.read_text(encoding="utf-8").splitlines():
            owners[line.split(",", 1)[0]] = distribution
    found: dict[str, list[str]] = {}
    for path in sorted(p for p in site.rglob("*") if p.is_file()):
        relative = path.relative_to(site)
        top = relative.parts[0]
        if path.name in _NOT_DATA or path.suffix in _CODE_SUFFIXES or top.endswith(".dist-info") or top == "bin":
            continue
        if "__pycache__" in relative.parts:
            continue
        found.setdefault(owners.get(relative.as_posix(), "?"), []).append(relative.as_posix())
    return found


def data_files(site: Path) -> dict[str, list[str]]:
    """distribution -> its data files left out of the component (as the install recorded them)."""
    path = site / DATA_FILE
    return json.loads(path.read_text()) if path.is_file() else _data_files(site)  # (an install from before)


def data_warning(site: Path) -> str | None:
    """The build's warning naming the dependencies' data files it left out, and why; None when there are none."""
    found = data_files(site)
    if not found:
        return None
    parts = []
    for distribution, files in sorted(found.items()):
        groups: dict[str, int] = {}  # a folder (`babel/locale-data/`) or a file -> how many files
        for file in files:
            folder = file.rsplit("/", 1)[0] + "/" if file.count("/") > 1 else file
            groups[folder] = groups.get(folder, 0) + 1
        shown = [f"{g} ({n} files)" if n > 1 else g for g, n in sorted(groups.items(), key=lambda i: -i[1])]
        more = f", and {len(shown) - DATA_SHOWN} more" if len(shown) > DATA_SHOWN else ""
        parts.append(f"{distribution}: {', '.join(shown[:DATA_SHOWN])}{more}")
    return (
        f"warning: the component leaves out the data files of its dependencies ({'; '.join(parts)}): a guest keeps "
        "the modules imported at build time and has no files at run time, so code that opens these files (to load "
        "them at run time) fails with FileNotFoundError; use what they hold at import time, or a package that "
        "embeds its data in Python code"
    )


def stripped_modules(site: Path) -> dict[str, str]:
    path = site / STRIPPED_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def _pip_version() -> str:
    try:
        from importlib.metadata import version

        return version("pip")
    except Exception:  # no pip metadata: the key just cannot tell pip versions apart
        return "?"


def bundled(site: Path) -> list[str]:
    """The distributions installed in `site`, `name version` each (for the build's summary)."""
    found = []
    for info in sorted(site.glob("*.dist-info")):
        name, _, version = info.name.removesuffix(".dist-info").partition("-")
        found.append(f"{name.replace('_', '-').lower()} {version}")
    return found
