"""PyPI dependencies of a Python guest: `[project].dependencies` of its pyproject.toml (or requirements.txt), installed
for the guest's interpreter into the build cache and put on its module path.

The guest runs componentize-py's CPython (GUEST_PYTHON) on WASI, which loads no compiled extension. So the install
resolves for that interpreter, not for the Python running the build: pip with `--python-version`, `--implementation`,
`--abi` and `--platform` (which pip allows only with `--only-binary=:all:`), markers evaluated for it. Pure wheels
(`py3-none-any`) install as they are; from a platform wheel (any of PLATFORMS: its Python code is the same) the
extension modules are removed, so that a package whose speedups are optional (markupsafe, pyyaml) falls back to its
Python code, and one that needs them fails the build naming the package and the module. The user's pip
configuration (pip.conf, `PIP_*`: indexes, find-links, certificates, proxies) applies: pip reads it as usual.
`[tool.llmhost] find-links = ["wheels/"]` (relative to the guest) is searched first, for WASI builds of packages.

The install is cached by what decides it: the requirements, the find-links' files, the target and pip's version. A
rebuild with unchanged dependencies runs no pip at all (and so works offline).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from llmhost.toolchains.errors import BuildError

GUEST_PYTHON = "3.14"  # componentize-py 0.25.1 embeds CPython 3.14
_ABI = "cp314"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "any")
EXTENSION_SUFFIXES = (".so", ".pyd", ".dylib")
STRIPPED_FILE = "llmhost-stripped.json"  # module name -> distribution, for the build's error messages


@dataclass(frozen=True)
class Dependencies:
    requirements: tuple[str, ...]
    find_links: tuple[Path, ...]
    source: str  # where they were declared, for messages

    def key(self) -> str:
        digest = hashlib.sha256(json.dumps([GUEST_PYTHON, PLATFORMS, self.requirements, _pip_version()]).encode())
        for folder in self.find_links:
            for path in sorted(folder.rglob("*")) if folder.is_dir() else ():
                if path.is_file():
                    digest.update(path.name.encode() + hashlib.sha256(path.read_bytes()).digest())
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
    requirements = [_local(app_dir, r) for r in listed]
    if not requirements and (app_dir / "requirements.txt").is_file():
        source = str(app_dir / "requirements.txt")
        lines = (app_dir / "requirements.txt").read_text(encoding="utf-8").splitlines()
        requirements = [_local(app_dir, line.split("#", 1)[0].strip()) for line in lines]
        requirements = [r for r in requirements if r]
    if not requirements:
        return None
    tool = data.get("tool", {})
    links = tool.get("llmhost", {}).get("find-links", []) if isinstance(tool, dict) else []
    if not isinstance(links, list) or not all(isinstance(link, str) for link in links):
        raise BuildError(f"{pyproject}: [tool.llmhost] find-links must be a list of folders")
    return Dependencies(tuple(requirements), tuple((app_dir / link).resolve() for link in links), source)


def _local(app_dir: Path, requirement: str) -> str:
    """`name @ file:../shared` relative to the guest directory, as an absolute file URL (pip needs one)."""
    name, at, location = requirement.partition("@")
    location = location.strip()
    if at and location.startswith("file:") and not location.startswith("file:///"):
        return f"{name.strip()} @ {(app_dir / location.removeprefix('file:')).resolve().as_uri()}"
    return requirement


def install(deps: Dependencies, cache_dir: Path, note: Callable[[str], None] | None = None) -> Path:
    """The folder holding the installed dependencies (built once per key, in the cache)."""
    target = cache_dir / "guest-deps" / deps.key()
    if (target / STRIPPED_FILE).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    if note is not None:
        note(f"installing the guest's dependencies ({', '.join(deps.requirements)}) for CPython {GUEST_PYTHON} …")
    with tempfile.TemporaryDirectory(prefix="llmhost-deps-", dir=target.parent) as tmp:
        staging = Path(tmp) / "site-packages"
        pure, built = _split_local(deps.requirements)
        wheels = Path(tmp) / "wheels"
        for i, location in enumerate(built):  # a local source tree: built as a wheel, from a copy (a build
            # backend writes build/ and *.egg-info beside the sources it builds)
            source = Path(tmp) / f"source-{i}"
            shutil.copytree(location, source, ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", ".*"))
            _pip(["wheel", "--no-deps", "--wheel-dir", str(wheels), str(source)], deps)
        command = ["install", "--target", str(staging), "--only-binary=:all:", "--no-compile"]
        command += ["--python-version", GUEST_PYTHON, "--implementation", "cp"]
        command += [flag for abi in (_ABI, "abi3", "none") for flag in ("--abi", abi)]
        command += [flag for platform in PLATFORMS for flag in ("--platform", platform)]
        for folder in (*deps.find_links, *([wheels] if built else [])):
            command += ["--find-links", str(folder)]
        _pip(command + list(pure) + [str(p) for p in sorted(wheels.glob("*.whl"))], deps)
        stripped = _strip_extensions(staging)
        (staging / STRIPPED_FILE).write_text(json.dumps(stripped, indent=1, sort_keys=True))
        if not target.exists():  # else another build installed the same set meanwhile
            os.replace(staging, target)
    return target


def _split_local(requirements: tuple[str, ...]) -> tuple[list[str], list[str]]:
    pure, local = [], []
    for requirement in requirements:
        location = requirement.partition("@")[2].strip()
        if location.startswith("file:") and Path(location.removeprefix("file://")).is_dir():
            local.append(location.removeprefix("file://"))
        else:
            pure.append(requirement)
    return pure, local


def _pip(args: list[str], deps: Dependencies) -> None:
    command = [sys.executable, "-m", "pip", *args, "--disable-pip-version-check"]
    shown = sys.stderr.isatty()  # progress on a terminal; captured (for the error) otherwise
    result = subprocess.run(
        command, stdout=sys.stderr if shown else subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False
    )
    if result.returncode != 0:
        detail = "\n".join((result.stderr or "").strip().splitlines()[-6:])
        raise BuildError(
            f"installing the guest's dependencies ({deps.source}) for CPython {GUEST_PYTHON} failed: a package "
            f"must have a pure-Python wheel, or a platform wheel whose Python code works without its compiled "
            f"part (`[tool.llmhost] find-links` can add WASI builds):\n{detail}"
        )


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


def stripped_modules(site: Path) -> dict[str, str]:
    path = site / STRIPPED_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def _pip_version() -> str:
    try:
        from importlib.metadata import version

        return version("pip")
    except Exception:  # no pip metadata: the key just cannot tell pip versions apart
        return "?"


def remove_cached(cache_dir: Path, deps: Dependencies) -> None:
    """`llmhost build --upgrade`: resolve again."""
    shutil.rmtree(cache_dir / "guest-deps" / deps.key(), ignore_errors=True)
