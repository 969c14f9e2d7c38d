"""Running pip for a Python guest's dependencies (toolchains/deps.py), and the wheels llmhost builds itself: from a
local source tree (`name @ file:../shared`), and from the sdist of a package that has no wheel the guest can use.

pip's output shows on a terminal (its progress bars included); elsewhere its progress lines go to the build's
`note`, and the output is kept for the error message of a failed run.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote, urlsplit

from llmhost.toolchains import buildenv, pylock
from llmhost.toolchains.errors import BuildError

Note = Callable[[str], None] | None
NO_DISTRIBUTION = re.compile(r"No matching distribution found for (\S+)")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_PROGRESS = ("Collecting", "Downloading", "Processing", "Building wheel", "Installing collected")


class PipFailed(Exception):
    def __init__(self, output: str) -> None:
        super().__init__(output)
        self.output = output

    def tail(self) -> str:
        return "\n".join(line for line in self.output.strip().splitlines() if line.strip())[-2000:]


def pip(args: list[str], note: Note) -> None:
    """Run pip. On a terminal its output (and progress bars) go to stderr; otherwise its progress lines (collecting,
    downloading, building) go to `note`, one each. Raises PipFailed with the output. pip (and any build backend
    it runs: a local package's, an sdist's) gets a minimal environment (toolchains/buildenv.py)."""
    command = [sys.executable, "-m", "pip", *args, "--disable-pip-version-check"]
    with buildenv.installing() as env:
        if sys.stderr.isatty():
            shown = subprocess.run(command, stdout=sys.stderr, stderr=subprocess.PIPE, text=True, check=False, env=env)
            if shown.returncode != 0:
                raise PipFailed(shown.stderr or "")
            return
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        assert process.stdout is not None
        lines = []
        for line in process.stdout:
            lines.append(line)
            if note is not None and line.strip().startswith(_PROGRESS):
                note(f"  pip: {line.strip()}")
        if process.wait() != 0:
            raise PipFailed("".join(lines))


def first_error(output: str) -> str:
    """pip's own one-line reason (its first `ERROR:` line), or "" when it printed none."""
    return next((line.strip() for line in output.splitlines() if line.startswith("ERROR:")), "")


def sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def from_directory(location: Path, out: Path, source: str, note: Note) -> Path:
    """A local source tree built as a wheel, from a copy (a build backend writes build/ and *.egg-info beside the
    sources it builds). `source`: where the dependency was declared, for messages."""
    copy = out / "source"
    shutil.copytree(location, copy, ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", ".*"))
    try:
        pip(["wheel", "--no-deps", "--wheel-dir", str(out / "wheel"), str(copy)], note)
    except PipFailed as failure:
        raise BuildError(f"building the local package {location} ({source}) failed:\n{failure.tail()}") from None
    return next((out / "wheel").glob("*.whl"))


def from_sdist(
    spec: str, out: Path, app_dir: Path, links: tuple[Path, ...], source: str, note: Note, guest_python: str
) -> tuple[Path, pylock.Package]:
    """The pure wheel built from a package's sdist (`spec`: a requirement, or a requirements-file line with its
    hash), and the sdist as the lock records it. A wheel with compiled code fails the build naming the package."""
    found = _NAME.match(spec)
    name = found.group(0) if found else spec
    find_links = [flag for folder in links for flag in ("--find-links", str(folder))]
    out.mkdir(parents=True)
    (out / "wanted.txt").write_text(spec + "\n")
    report = out / "report.json"
    no_wheel = f"{name} has no wheel for CPython {guest_python}"
    if note is not None:
        note(f"{no_wheel}: building one from its sdist …")
    # Which sdist (its URL and hash, for the lock; the build machine's pip reads its metadata), then the wheel built
    # from exactly that file.
    which = ["install", "--dry-run", "--ignore-installed", "--no-deps", "--no-binary", name, "--report", str(report)]
    which += ["--python-version", guest_python, "--target", str(out / "unused"), *find_links]
    which += ["-r", str(out / "wanted.txt")]
    build = ["wheel", "--no-deps", "--no-binary", name, "--ignore-requires-python", "--wheel-dir", str(out / "wheel")]
    build += [*find_links, "-r", str(out / "exact.txt")]
    try:
        pip(which, note)
        info = json.loads(report.read_text())["install"][0]
        url, digest = info["download_info"]["url"], info["download_info"]["archive_info"]["hashes"]["sha256"]
        (out / "exact.txt").write_text(f"{name}=={info['metadata']['version']} --hash=sha256:{digest}\n")
        pip(build, note)
    except PipFailed as failure:
        if NO_DISTRIBUTION.search(failure.output):
            raise BuildError(
                f"{spec.split(' ')[0]} was not found: no wheel for CPython {guest_python} and no sdist (check its name "
                f"and version in {source}; your pip configuration picks the indexes):\n{failure.tail()}"
            ) from None
        raise BuildError(f"{no_wheel}, and building one from its sdist failed ({source}):\n{failure.tail()}") from None
    wheel = next((out / "wheel").glob("*.whl"))
    python, abi, platform = wheel.name.removesuffix(".whl").split("-")[-3:]
    if abi != "none" or platform != "any" or not all(tag.startswith("py") for tag in python.split(".")):
        raise BuildError(
            f"{no_wheel}, and its sdist builds a wheel with compiled code ({wheel.name}), which a guest cannot load "
            f"({source}): use a pure-Python package, or add a WASI build with `[tool.llmhost] find-links`"
        )
    where, path = pylock.located(app_dir, url)
    file = Path(unquote(urlsplit(url).path)).name
    version = info["metadata"]["version"]
    return wheel, pylock.Package(info["metadata"]["name"], version, "sdist", file, where, path, digest)
