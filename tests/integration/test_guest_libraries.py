"""Issue 67, item 2: popular pure-Python packages work in a guest as a user uses them, their lazy paths included (a
dependency's function-level imports, codecs C code looks up by name). One guest (tests/guests/libs_probe) built
once; each case runs inside its `run()` under `llmhost run`, and gives what the same function gives in the host's
Python (tests/guests/libs_probe/cases.py), or, for a package the host's environment lacks, the known value. The
packages come from PyPI (as in test_guest_deps.py) once, as the guest's pylock.toml pins them; the test cache keeps
them."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from llmhost import build_component

pytestmark = pytest.mark.wasm
PROBE = Path(__file__).resolve().parents[2] / "tests" / "guests" / "libs_probe"
LLMHOST = str(Path(sys.executable).with_name("llmhost"))
# What the guest prints (the packages are deterministic): checked against the host's Python where it has the package.
EXPECTED: dict[str, Any] = {
    "jinja": "28 Nov|CAFÉ|a&amp;b, c",
    "jinja-errors": [
        "KeyError: 'x'",
        "TemplateSyntaxError: Expected an expression, got 'end of statement block' (line 2)",
        "UndefinedError: 'missing' is undefined",
    ],
    "markdown": (
        '<h1 id="title">Title</h1>\n<p>Some <em>emphasis</em>, <code>code</code> &amp; a '
        '<a href="https://example.com">link</a>.</p>\n<table>\n<thead>\n<tr>\n<th>a</th>\n<th>b</th>\n</tr>\n'
        "</thead>\n<tbody>\n<tr>\n<td>1</td>\n<td>2</td>\n</tr>\n</tbody>\n</table>"
    ),
    "yaml": {
        "loaded": "{'name': 'probe', 'items': [1, 2.5, True, None], 'when': datetime.date(2026, 11, 28), "
        "'nested': {'a': 'x: y'}, 'raw': b'hi'}",
        "dumped": "a: é\nb:\n- 1\n- c: d\n",
    },
    "dateutil": [
        "2026-11-28T22:05:00+01:00",
        "2027-03-03T10:00:00",
        "2026-12-25T22:05:00+01:00",
        ["2026-01-01T00:00:00", "2026-01-08T00:00:00", "2026-01-15T00:00:00"],
    ],
    "humanize": ["1,234,567", "3.0 MB", "2 hours", "22nd", "seven", "1.2 billion", "1 hour, 2 minutes and 5 seconds"],
}
HOST_PACKAGE = {"jinja": "jinja2", "jinja-errors": "jinja2", "markdown": "markdown", "yaml": "yaml"}
HOST_PACKAGE |= {"dateutil": "dateutil", "humanize": "humanize"}


@pytest.fixture(scope="module")
def probe(llmhost_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_component(PROBE, tmp_path_factory.mktemp("libs") / "libs.wasm", cache_dir=llmhost_cache_dir)


def host_cases() -> ModuleType:
    spec = importlib.util.spec_from_file_location("libs_probe_cases", PROBE / "cases.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("case", list(EXPECTED))
def test_a_popular_package_works_inside_run(probe: Path, llmhost_cache_dir: Path, case: str) -> None:
    done = subprocess.run(
        [LLMHOST, "run", str(probe), "--", case],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "LLMHOST_CACHE_DIR": str(llmhost_cache_dir)},
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == EXPECTED[case]
    if importlib.util.find_spec(HOST_PACKAGE[case]) is not None:  # the same code in the host's Python agrees
        assert json.loads(json.dumps(host_cases().CASES[case]())) == EXPECTED[case]
