"""What a build reads and what reaches pip and npm (issue 66, parts 3 and 4): the build key hashes files in chunks and
skips big data that is no build input; a `file:` npm dependency's contents are in the key; `pylock.toml` fields are
validated before pip sees them; dependency installers get a minimal environment; npm packages that need install
scripts are found (the build refuses them)."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

from llmhost.toolchains import buildenv, javascript, npm_deps, pylock, python
from llmhost.toolchains.errors import BuildError

WIT = python.wit_dir()
APP = "import wit_world\n\n\nclass WitWorld(wit_world.WitWorld):\n    def run(self, args):\n        return 0\n"
BIG = 200 * 1024 * 1024
PEAK_LIMIT = 8 * 1024 * 1024  # a key's peak allocation: a few chunks, never a file


def sparse(path: Path, size: int) -> Path:
    with path.open("wb") as handle:
        handle.truncate(size)  # no disk blocks: the test costs no disk, and reading it costs the hash only
    return path


def key(app: Path) -> tuple[str, int]:
    """(the Python build key, the peak of Python allocations while computing it)"""
    tracemalloc.start()
    try:
        found = python.build_key(app, WIT, "command", "componentize-py (any version)")
        return found, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_big_data_file_beside_app_py_is_no_build_input_and_is_not_read(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(APP)
    before, _ = key(tmp_path)
    sparse(tmp_path / "model.bin", BIG)
    after, peak = key(tmp_path)
    assert after == before and peak < PEAK_LIMIT
    (tmp_path / "small.dat").write_bytes(b"read at import time")  # small data stays keyed
    assert key(tmp_path)[0] != before


def test_a_big_build_input_is_hashed_in_chunks(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(APP)
    before, _ = key(tmp_path)
    sparse(tmp_path / "table.pyi", 64 * 1024 * 1024)  # an input whatever its size
    after, peak = key(tmp_path)
    assert after != before and peak < PEAK_LIMIT, peak


def test_a_file_dependency_resolves_from_the_guest_and_its_contents_are_in_the_key(tmp_path: Path) -> None:
    lib, app = tmp_path / "lib", tmp_path / "guest"
    lib.mkdir()
    app.mkdir()
    (lib / "package.json").write_text(json.dumps({"name": "lib", "version": "1.0.0", "main": "index.js"}))
    (lib / "index.js").write_text("export const x = 1;\n")
    (app / "app.js").write_text('import { x } from "lib";\nexport function run() { return x; }\n')
    (app / "package.json").write_text(json.dumps({"dependencies": {"lib": "file:../lib"}}))
    assert npm_deps.local_packages(app, {"lib": "file:../lib"}) == {"lib": lib.resolve()}
    before = javascript.build_key(app, WIT, "command")
    (lib / "index.js").write_text("export const x = 2;\n")
    assert javascript.build_key(app, WIT, "command") != before
    (lib / "node_modules").mkdir()  # what npm may leave in it is not its contents
    (lib / "node_modules" / "x.js").write_text("")
    edited = javascript.build_key(app, WIT, "command")
    assert javascript.build_key(app, WIT, "command") == edited
    (app / "package.json").write_text(json.dumps({"dependencies": {"lib": "file:../nowhere"}}))
    with pytest.raises(BuildError, match=r"the dependency lib is 'file:../nowhere', and .*nowhere does not exist"):
        javascript.build_key(app, WIT, "command")


LOCK = """\
[tool.llmhost]
requirements = ["x"]

[[packages]]
name = {name}
version = {version}
wheels = [{{ name = {file}, url = {url}, hashes = {{ sha256 = {sha} }} }}]
"""
GOOD = {
    "name": "x",
    "version": "1.0",
    "file": "x-1.0-py3-none-any.whl",
    "url": "https://files.example/x-1.0-py3-none-any.whl",
    "sha": "ab" * 32,
}


@pytest.mark.parametrize(
    ("field", "value", "refused"),
    [
        ("name", "x\n-r /etc/passwd", "name"),
        ("name", "x\n--index-url http://127.0.0.1:9/simple", "name"),
        ("name", "x --hash=sha256:00", "name"),
        ("version", "1.0\n-r /etc/passwd", "version"),
        ("version", "1.0 --index-url=http://evil", "version"),
        ("sha", "ab" * 32 + "\n-r /etc/passwd", "sha256"),
        ("sha", "AB" * 31, "sha256"),
        ("url", "http://files.example/x.whl", "url"),
        ("url", "ftp://files.example/x.whl", "url"),
        ("file", "x.whl\n-e .", "file name"),
    ],
)
def test_a_lock_field_that_could_reach_pip_as_an_option_is_refused(
    tmp_path: Path, field: str, value: str, refused: str
) -> None:
    (tmp_path / pylock.LOCK_FILE).write_text(LOCK.format(**{k: json.dumps(v) for k, v in GOOD.items()}))
    assert pylock.read(tmp_path) is not None  # the well-formed lock reads
    fields = {**GOOD, field: value}
    (tmp_path / pylock.LOCK_FILE).write_text(LOCK.format(**{k: json.dumps(v) for k, v in fields.items()}))
    with pytest.raises(BuildError, match=rf"pylock\.toml: .*{refused} .* is not .*--upgrade"):
        pylock.read(tmp_path)


def test_an_installer_gets_a_minimal_environment(tmp_path: Path) -> None:
    environ = {
        "PATH": "/usr/bin",
        "HOME": str(tmp_path / "user"),
        "LANG": "C.UTF-8",
        "OPENAI_API_KEY": "sk-secret",
        "AWS_SECRET_ACCESS_KEY": "secret",
        "GITHUB_TOKEN": "secret",
        "PIP_INDEX_URL": "https://mirror.example/simple",
        "npm_config_registry": "https://registry.example/",
    }
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / ".npmrc").write_text("registry=https://registry.example/\n")
    env = buildenv.minimal(tmp_path / "home", environ)
    assert "secret" not in json.dumps(env) and env["HOME"] == str(tmp_path / "home")
    assert env["PATH"] == "/usr/bin" and env["LANG"] == "C.UTF-8"
    assert env["PIP_INDEX_URL"] == environ["PIP_INDEX_URL"]  # the tools' own configuration applies
    assert env["npm_config_userconfig"] == str(tmp_path / "user" / ".npmrc")
    assert env["PIP_CACHE_DIR"] == str(tmp_path / "user" / ".cache" / "pip")  # caches where they were
    assert env["npm_config_cache"] == str(tmp_path / "user" / ".npm")
    assert set(env) <= {*buildenv.PASSED, *environ, "npm_config_userconfig", "PIP_CACHE_DIR", "npm_config_cache",
                        "XDG_CONFIG_HOME", "XDG_CACHE_HOME"}  # fmt: skip


def test_packages_that_need_install_scripts_are_found(tmp_path: Path) -> None:
    modules = tmp_path / "node_modules"

    def package(folder: Path, **fields: object) -> Path:
        folder.mkdir(parents=True)
        (folder / "package.json").write_text(json.dumps({"name": folder.name, "version": "1.0.0", **fields}))
        return folder

    package(modules / "plain")
    package(modules / "esbuild", scripts={"postinstall": "node install.js"})  # llmhost's own
    package(modules / "hooked", scripts={"postinstall": "node steal.js", "test": "x"})
    (package(modules / "@scope" / "native") / "binding.gyp").write_text("{}")
    package(modules / "plain" / "node_modules" / "nested", scripts={"preinstall": "sh x.sh"})
    assert npm_deps.needs_scripts(modules) == [
        ("@scope/native", "binding.gyp, native code npm would build with node-gyp"),
        ("hooked", "a `postinstall` script: node steal.js"),
        ("nested", "a `preinstall` script: sh x.sh"),
    ]
