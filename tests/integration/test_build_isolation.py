"""Builds run nothing of a dependency's, and say what failed (issue 66, part 4), with the real pip, npm and
componentize-py: a dependency's build code sees no host secret; npm runs no install script, and a package that
needs one fails the build naming it; an injected `pylock.toml` never reaches pip; pip's own errors keep pip's
words; a `world.wit` error names its file, line and column; a dependency's data files left out are named.

The pip tests are offline (tiny packages made here, `[tool.llmhost] find-links`, no index); npm fetches esbuild
once (its cache keeps it); the babel test installs babel from the configured index once (the test cache keeps it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from integration.test_guest_lock import guest, make_wheel, offline  # noqa: F401  (a fixture)
from llmhost import build_component
from llmhost.toolchains import deps, npm_deps, pylock, wheels
from llmhost.toolchains.errors import BuildError

pytestmark = pytest.mark.wasm
REPO = Path(__file__).resolve().parents[2]
SECRET = "llmhost-test-secret-1b9e"
LLMHOST = str(Path(sys.executable).with_name("llmhost"))

# An in-tree PEP 517 backend (offline: no build requirements) that records the environment it was built with.
SPY_BACKEND = """\
import json, os, zipfile

def get_requires_for_build_wheel(config_settings=None):
    return []

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    with open({marker!r}, "w") as out:
        json.dump(dict(os.environ), out)
    name = "spy-1.0-py3-none-any.whl"
    info = "spy-1.0.dist-info"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as wheel:
        wheel.writestr("spy/__init__.py", "")
        wheel.writestr(info + "/METADATA", "Metadata-Version: 2.1\\nName: spy\\nVersion: 1.0\\n")
        tags = "Wheel-Version: 1.0\\nGenerator: t\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
        wheel.writestr(info + "/WHEEL", tags)
        wheel.writestr(info + "/RECORD", "")
    return name
"""


def test_a_dependencys_build_code_sees_no_host_secret(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    offline: None,  # noqa: F811
) -> None:
    source, marker = tmp_path / "spy", tmp_path / "seen.json"
    source.mkdir()
    (source / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n\n'
        '[project]\nname = "spy"\nversion = "1.0"\n'
    )
    (source / "backend.py").write_text(SPY_BACKEND.format(marker=str(marker)))
    monkeypatch.setenv("LLMHOST_TEST_API_KEY", SECRET)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    wheel = wheels.from_directory(source, tmp_path / "out", "test", None)
    assert wheel.name == "spy-1.0-py3-none-any.whl"
    seen = json.loads(marker.read_text())  # the backend ran (pip builds a local package: its code runs)
    assert SECRET not in json.dumps(seen)
    assert seen["HOME"] != str(Path.home()) and "PATH" in seen


def test_npm_runs_no_install_script_and_a_package_needing_one_fails_the_build_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app, hooked, marker = tmp_path / "guest", tmp_path / "hooked", tmp_path / "ran.txt"
    app.mkdir()
    hooked.mkdir()
    (hooked / "package.json").write_text(
        json.dumps(
            {
                "name": "hooked",
                "version": "1.0.0",
                "main": "index.js",
                "scripts": {"postinstall": f"node -e \"require('fs').writeFileSync('{marker}', 'ran')\""},
            }
        )
    )
    (hooked / "index.js").write_text("module.exports = 1;\n")
    monkeypatch.setenv("LLMHOST_TEST_API_KEY", SECRET)
    # Relative to the guest's directory (npm would resolve it from the cache's staging folder).
    dependencies = {"hooked": "file:../hooked"}
    with pytest.raises(BuildError) as refused:
        npm_deps.install(app, dependencies, tmp_path / "cache", None)
    message = str(refused.value)
    assert "the npm package hooked needs its install scripts (a `postinstall` script: node -e" in message
    assert "llmhost does not run" in message
    assert not marker.exists()  # nothing of the package ran
    # The same package without its script installs (copied in from the guest's `file:` path) and bundles.
    (hooked / "package.json").write_text(json.dumps({"name": "hooked", "version": "1.0.0", "main": "index.js"}))
    installed = npm_deps.install(app, dependencies, tmp_path / "cache", None)
    assert (installed / "node_modules" / "hooked" / "index.js").read_text() == "module.exports = 1;\n"
    (app / "app.js").write_text('import x from "hooked";\nexport function run() { return x; }\n')
    npm_deps.bundle(app / "app.js", installed, tmp_path / "bundle.js")
    assert "module.exports = 1" in (tmp_path / "bundle.js").read_text()


def test_an_injected_lock_never_reaches_pip(tmp_path: Path, offline: None) -> None:  # noqa: F811
    app = tmp_path / "app"
    make_wheel(app / "wheels", "tiny", "1.0")
    declared = guest(app, ["tiny"])
    site = deps.install(declared, tmp_path / "cache")  # the first resolve writes the lock
    assert deps.bundled(site) == ["tiny 1.0"]
    text = (app / pylock.LOCK_FILE).read_text()
    secret = tmp_path / "secret.txt"
    secret.write_text("not-a-requirement==1\n")
    injected = text.replace('name = "tiny"', f'name = "tiny\\n-r {secret}"')
    assert injected != text
    (app / pylock.LOCK_FILE).write_text(injected)
    with pytest.raises(BuildError, match=r"pylock\.toml: name .*-r .* is not a package name") as refused:
        deps.install(declared, tmp_path / "other-cache")
    assert "not-a-requirement" not in str(refused.value)  # pip never read the file


@pytest.mark.parametrize(
    ("requirements", "words"),
    [
        (["tiny>>1"], "pip: Invalid requirement: 'tiny>>1'"),
        (["needsold", "tiny==2.0"], "pip: Cannot install needsold==1.0 and tiny==2.0 because these package "),
    ],
)
def test_pips_own_errors_keep_pips_words(
    tmp_path: Path,
    requirements: list[str],
    words: str,
    offline: None,  # noqa: F811
) -> None:
    app = tmp_path / "app"
    make_wheel(app / "wheels", "tiny", "1.0")
    make_wheel(app / "wheels", "tiny", "2.0")
    make_wheel(app / "wheels", "needsold", "1.0", requires=("tiny==1.0",))
    with pytest.raises(BuildError) as refused:
        deps.install(guest(app, requirements), tmp_path / "cache")
    message = str(refused.value)
    assert words in message.splitlines()[0] and "pure-Python wheel" not in message


def test_a_world_wit_error_names_the_file_line_and_column(tmp_path: Path) -> None:
    app = tmp_path / "tools"
    shutil.copytree(REPO / "guest-examples" / "mcp-tools", app)
    world = app / "wit" / "world.wit"
    lines = world.read_text().splitlines()
    world.write_text("\n".join([lines[0].replace(";", " oops;"), *lines[1:]]) + "\n")
    with pytest.raises(BuildError) as refused:
        build_component(app, tmp_path / "tools.wasm", cache_dir=tmp_path / "cache")
    message = str(refused.value)
    assert message.startswith(f"{world}:1:")  # componentize-py's `world.wit:1:COL`, as the guest has the file
    assert "expected '{', found an identifier" in message and "oops;" in message
    assert "app.py" not in message and "AssertionError" not in message


def test_a_dependencys_data_files_left_out_are_named_by_the_build(tmp_path: Path, llmhost_cache_dir: Path) -> None:
    app = tmp_path / "dates"
    app.mkdir()
    (app / "pyproject.toml").write_text('[project]\nname = "dates"\nversion = "0"\ndependencies = ["babel==2.17.0"]\n')
    (app / "app.py").write_text(BABEL_APP)
    notes: list[str] = []
    wasm = build_component(app, tmp_path / "dates.wasm", cache_dir=llmhost_cache_dir, note=notes.append)
    warning = next(n for n in notes if n.startswith("warning: "))
    assert "babel: babel/locale-data/ (" in warning and "babel/global.dat" in warning
    assert "no files at run time" in warning and "FileNotFoundError" in warning
    # As the warning and the docs say: the locale loaded at import time is in the snapshot, another one is not.
    done = subprocess.run(
        [LLMHOST, "run", str(wasm)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "LLMHOST_CACHE_DIR": str(llmhost_cache_dir)},
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"de_DE": "02.01.24", "fr_FR": "FileNotFoundError"}


BABEL_APP = """\
import datetime
import json

import wit_world
from babel.dates import format_date

DAY = datetime.date(2024, 1, 2)
format_date(DAY, format="short", locale="de_DE")  # at import time: de_DE's data is loaded into the snapshot


class WitWorld(wit_world.WitWorld):
    def run(self, args):
        found = {}
        for locale in ("de_DE", "fr_FR"):
            try:
                found[locale] = format_date(DAY, format="short", locale=locale)
            except OSError as error:
                found[locale] = type(error).__name__
        print(json.dumps(found))
        return 0
"""
