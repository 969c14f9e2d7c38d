"""Issue 67, item 7's build papercuts, through one real `llmhost build` (a subprocess whose output is not a
terminal) of a copy of guest-examples/hello with one dependency from a local find-links folder (pip's only source:
`PIP_NO_INDEX`, nothing reaches the network), into a cache of its own (so that it really builds):

- the build leaves nothing in the guest's directory beyond `pylock.toml` (no `__pycache__`);
- the lock records the package by name, version and hash, with no `file:///` URL of this machine;
- a build prints a line when a step starts and one every HEARTBEAT_S seconds (set small here) to a log.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from llmhost.toolchains import deps, pylock

pytestmark = pytest.mark.wasm
REPO = Path(__file__).resolve().parents[2]
HEARTBEAT_S = 0.5
# `llmhost build` with a short heartbeat (toolchains/progress.py's HEARTBEAT_S), as the console script runs it.
CLI = "from llmhost.toolchains import progress; progress.HEARTBEAT_S = {}; from llmhost.cli import main; main()"
PROGRESS = re.compile(r"\[ *(\d+\.\d)s\] (.*)")


@dataclass(frozen=True)
class Built:
    guest: Path
    before: set[str]
    wheel: Path
    stderr: str


def listing(folder: Path) -> set[str]:
    return {path.relative_to(folder).as_posix() for path in folder.rglob("*")}


def pure_wheel(folder: Path, name: str, version: str, code: str) -> Path:
    """A minimal pure wheel, written here (no index, no build backend)."""
    folder.mkdir(parents=True, exist_ok=True)
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": code,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: llmhost-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = ""
    for file, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record += f"{file},sha256={digest},{len(text.encode())}\n"
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for file, text in files.items():
            archive.writestr(file, text)
        archive.writestr(f"{info}/RECORD", record + f"{info}/RECORD,,\n")
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    root = tmp_path_factory.mktemp("papercuts")
    guest = root / "hello"
    shutil.copytree(REPO / "guest-examples" / "hello", guest, ignore=shutil.ignore_patterns("__pycache__"))
    pyproject = guest / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace("dependencies = []", 'dependencies = ["tinydep"]'))
    app = guest / "app.py"
    app.write_text(app.read_text().replace("import sys\n", "import sys\n\nimport tinydep  # noqa: F401\n", 1))
    wheel = pure_wheel(root / "links", "tinydep", "1.0", "def shout(text):\n    return text.upper()\n")
    before = listing(guest)
    env = {**os.environ, "LLMHOST_CACHE_DIR": str(root / "cache"), "PIP_NO_INDEX": "1"}
    env["PIP_FIND_LINKS"] = str(wheel.parent)
    command = [sys.executable, "-c", CLI.format(HEARTBEAT_S), "build", str(guest), "-o", str(root / "hello.wasm")]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=300, env=env, cwd=root, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(root / "hello.wasm")
    return Built(guest, before, wheel, done.stderr)


def test_a_build_leaves_only_the_lock_in_the_guest_directory(built: Built) -> None:
    assert "__pycache__" not in built.before  # (the copy had none)
    assert listing(built.guest) == built.before | {pylock.LOCK_FILE}


def test_the_lock_is_index_independent(built: Built, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = (built.guest / pylock.LOCK_FILE).read_text()
    assert "file:" not in text and str(built.wheel.parent) not in text
    lock = pylock.read(built.guest)
    assert lock is not None
    digest = hashlib.sha256(built.wheel.read_bytes()).hexdigest()
    assert [(p.name, p.version, p.url, p.sha256) for p in lock.packages] == [("tinydep", "1.0", None, digest)]
    # Elsewhere (another cache, the wheel in another folder) the lock installs the same file by name and hash.
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    shutil.copy(built.wheel, moved)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(moved))
    declared = deps.declared(built.guest)
    assert declared is not None
    site = deps.install(declared, tmp_path / "cache")
    assert (site / "tinydep" / "__init__.py").is_file()


def test_a_build_not_on_a_terminal_says_when_it_starts_and_every_heartbeat(built: Built) -> None:
    lines = built.stderr.strip().splitlines()
    found = [PROGRESS.fullmatch(line) for line in lines]
    assert all(found), built.stderr  # progress lines only: nothing else is noted to a log
    steps = [(float(m.group(1)), m.group(2)) for m in found if m is not None]
    assert steps[0][1] == "installing the guest's dependencies (tinydep) for CPython 3.14 …"
    starts = [i for i, (_, text) in enumerate(steps) if text.endswith("with componentize-py …")]
    assert len(starts) == 1, built.stderr
    beats = [t for t, text in steps[starts[0] + 1 :] if text.startswith("still building ")]
    assert len(beats) >= 2, built.stderr  # a componentize-py build takes seconds: several heartbeats
    assert all(later - earlier >= HEARTBEAT_S - 0.1 for earlier, later in zip(beats, beats[1:], strict=False))
    assert steps[0][0] < beats[0]  # the start line came first, at the start, not with the result
