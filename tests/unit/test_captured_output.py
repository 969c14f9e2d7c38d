"""A guest's captured stdout/stderr file (runtime.sandbox.CapturedOutput) has no name while it is used on Linux:
a process killed at any moment of a run leaves nothing in the temporary directory."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest

from llmhost.runtime.sandbox import CapturedOutput


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/fd is Linux's")
def test_the_file_is_nameless_from_the_start_and_still_takes_every_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    got: list[bytes] = []
    output = CapturedOutput(got.append)
    assert not list(tmp_path.iterdir())  # before wasmtime has even opened it
    with open(output.path, "wb") as guest:  # as wasmtime opens it (create, truncate), and a guest writes
        guest.write(b"x" * 100_000 + b"end")
    output.deliver()
    assert got == [b"x" * 100_000 + b"end"]
    output.close()  # idempotent
    assert not list(tmp_path.iterdir())
