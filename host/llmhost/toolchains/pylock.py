"""`pylock.toml` (PEP 751) beside a Python guest: the exact packages its dependencies resolved to, so that every
later build installs the same files (toolchains/deps.py writes it after a resolve and installs from it after).

Each package is a wheel (name, version, the wheel's sha256; its URL only when it is portable: an https one, never a
`file:///` path of this machine), an sdist that llmhost builds into a pure wheel, or a
local directory (`name @ file:../shared`, its path relative to the guest). `[tool.llmhost] requirements` records
the declared requirements the lock was resolved for: a lock for other requirements is resolved again.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from llmhost.toolchains.errors import BuildError

LOCK_FILE = "pylock.toml"
KINDS = ("wheel", "sdist", "directory")
# What a lock's fields may hold: each reaches pip (a requirements file line, a constraint), so none may hold
# whitespace, a newline or an option. A name as PEP 508 allows it, a version as PEP 440 spells one, a hex sha256, a
# file name, a relative path and a URL of an allowed scheme, each on one line.
# (Each is matched whole: `fullmatch`, as `$` would let a trailing newline through.)
NAME = re.compile(r"(?i)[a-z0-9](?:[a-z0-9._-]*[a-z0-9])?")
VERSION = re.compile(
    r"(?i)v?(?:\d+!)?\d+(?:\.\d+)*(?:[-_.]?(?:a|b|c|rc|alpha|beta|pre|preview)[-_.]?\d*)?"
    r"(?:-\d+|[-_.]?(?:post|rev|r)[-_.]?\d*)?(?:[-_.]?dev[-_.]?\d*)?(?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?"
)
SHA256 = re.compile(r"[0-9a-f]{64}")
FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+!-]*")
URL_SCHEMES = ("https", "file")
_UNSAFE = re.compile(r"[\x00-\x20\x7f]")  # control characters and spaces: nothing pip would split on


@dataclass(frozen=True)
class Package:
    name: str
    version: str | None  # None for a local directory
    kind: str  # one of KINDS
    file: str | None = None  # the wheel's or sdist's file name
    url: str | None = None  # where it came from, when portable (for people: installs go by name, version and hash)
    path: str | None = None  # a local directory, relative to the guest
    sha256: str | None = None


@dataclass(frozen=True)
class Lock:
    requirements: tuple[str, ...]  # the declared requirements it was resolved for
    packages: tuple[Package, ...]
    text: str = ""  # the file's text (part of the install's cache key)


def read(app_dir: Path) -> Lock | None:
    path = app_dir / LOCK_FILE
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8")
    fix = "fix it, or delete it (or run `llmhost build --upgrade`) to resolve the dependencies again"
    try:
        data = tomllib.loads(text)
        requirements = data.get("tool", {}).get("llmhost", {}).get("requirements")
        if not isinstance(requirements, list) or not all(isinstance(r, str) for r in requirements):
            raise ValueError("[tool.llmhost] requirements must be a list of requirement strings")
        if any("\n" in r or "\r" in r for r in requirements):
            raise ValueError("[tool.llmhost] requirements must each be one line")
        packages = tuple(_package(entry) for entry in data.get("packages", []))
    except (tomllib.TOMLDecodeError, ValueError, TypeError, AttributeError, KeyError, IndexError) as error:
        raise BuildError(f"{path}: {error} ({fix})") from None
    return Lock(tuple(requirements), packages, text)


def _package(entry: dict[str, object]) -> Package:
    name, version = entry["name"], entry.get("version")
    _check(name, NAME, "a package name (PEP 508)", "name")
    if isinstance(entry.get("directory"), dict):
        path = entry["directory"]["path"]  # type: ignore[index]
        return Package(str(name), None, "directory", path=_check_path(name, path))
    wheels = entry.get("wheels")
    source = wheels[0] if isinstance(wheels, list) and wheels else entry.get("sdist")
    if not isinstance(source, dict) or not isinstance(version, str):
        raise ValueError(f"package {name!r} needs a version and `wheels`, `sdist` or `directory`")
    _check(version, VERSION, "a version (PEP 440)", f"{name}'s version")
    sha256 = _check(source["hashes"]["sha256"], SHA256, "a sha256 (64 lowercase hex digits)", f"{name}'s sha256")
    file = _check(source["name"], FILE_NAME, "a file name", f"{name}'s file name")
    url, path = source.get("url"), source.get("path")
    if url is not None:
        _check_url(name, url)
    kind = "wheel" if wheels else "sdist"
    return Package(str(name), version, kind, file, url, None if path is None else _check_path(name, path), sha256)


def _check(value: object, pattern: re.Pattern[str], what: str, field: str) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise ValueError(f"{field} {value!r} is not {what}")
    return value


def _check_path(name: object, path: object) -> str:
    if not isinstance(path, str) or not path or _UNSAFE.search(path) or path.startswith("-"):
        raise ValueError(f"{name}'s path {path!r} is not a relative path on one line")
    return path


def _check_url(name: object, url: object) -> str:
    if not isinstance(url, str) or _UNSAFE.search(url) or urlsplit(url).scheme not in URL_SCHEMES:
        raise ValueError(f"{name}'s url {url!r} is not an {' or '.join(URL_SCHEMES)} URL on one line")
    return url


def render(requirements: tuple[str, ...], packages: list[Package]) -> str:
    q = json.dumps  # a JSON string is a TOML basic string
    lines = ['lock-version = "1.0"', 'created-by = "llmhost"', 'requires-python = "==3.14.*"', ""]
    lines.append("# Written by `llmhost build` (resolved for the guest's CPython 3.14 on WASI); `llmhost build")
    lines.append("# --upgrade` resolves again. Commit it: every build installs exactly these files.")
    lines += ["[tool.llmhost]", f"requirements = [{', '.join(q(r) for r in requirements)}]", ""]
    for package in sorted(packages, key=lambda p: p.name.lower()):
        lines += ["[[packages]]", f"name = {q(package.name)}"]
        if package.kind == "directory":
            lines += [f"directory = {{ path = {q(package.path)} }}", ""]
            continue
        lines.append(f"version = {q(package.version)}")
        where = f"path = {q(package.path)}, " if package.path else f"url = {q(package.url)}, " if package.url else ""
        source = f"{{ name = {q(package.file)}, {where}hashes = {{ sha256 = {q(package.sha256)} }} }}"
        lines += [f"wheels = [{source}]" if package.kind == "wheel" else f"sdist = {source}", ""]
    return "\n".join(lines)


def write(app_dir: Path, text: str) -> bool:
    """Write the lock atomically; False when the guest's directory is read-only (the build goes on without)."""
    path = app_dir / LOCK_FILE
    try:
        partial = path.with_name(f".{LOCK_FILE}.{os.getpid()}.tmp")
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, path)
    except OSError:
        return False
    return True


def located(app_dir: Path, url: str) -> tuple[str | None, str | None]:
    """(url, path) for the lock: a file inside the guest's directory by its relative path, one from an https index
    or page by its URL, and any other file by neither (a `file:///` URL of this machine's pip
    configuration, a local mirror or find-links folder, does not exist elsewhere: pip finds the file by its name,
    version and hash wherever that machine's configuration says)."""
    parts = urlsplit(url)
    if parts.scheme == "file":
        local = Path(unquote(parts.path))
        if local.is_relative_to(app_dir.resolve()):
            return None, local.relative_to(app_dir.resolve()).as_posix()
    return (url, None) if parts.scheme == "https" else (None, None)
