"""Two builds of the same sources at once, in two processes (two `llmhost build`s, a build beside `serve --watch`,
two apps that embed the host) build once: the second waits for the first's build and copies it. Real
componentize-py, real processes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llmhost.toolchains.python import cached_build, wit_dir
from llmhost.toolchains.world import detect_world

pytestmark = pytest.mark.wasm

REPO = Path(__file__).resolve().parents[2]


def test_two_builds_of_the_same_sources_at_once_build_once(tmp_path: Path, llmhost_cache_dir: Path) -> None:
    guest = tmp_path / "twice"
    shutil.copytree(REPO / "guest-examples" / "hello", guest)
    with (guest / "app.py").open("a") as app:
        app.write("\n# built by two processes at once (tests/integration/test_build_once.py)\n")
    # The shared cache, without this entry: the first build must run, whichever process gets it.
    cached_build(guest, wit_dir(), detect_world(guest), cache_dir=llmhost_cache_dir).unlink(missing_ok=True)
    script = (
        "import sys; from pathlib import Path; from llmhost import build_component\n"
        "build_component(Path(sys.argv[1]), Path(sys.argv[2]), cache_dir=Path(sys.argv[3]), "
        "note=lambda m: print(m, file=sys.stderr, flush=True))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "host")}
    builds = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(guest), str(tmp_path / f"{i}.wasm"), str(llmhost_cache_dir)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(2)
    ]
    outputs = [build.communicate(timeout=300) for build in builds]
    assert [build.returncode for build in builds] == [0, 0], outputs
    notes = "".join(err for _, err in outputs)
    assert notes.count("with componentize-py …") == 1, notes  # one built, the other waited and copied its result
    assert (tmp_path / "0.wasm").read_bytes() == (tmp_path / "1.wasm").read_bytes()
