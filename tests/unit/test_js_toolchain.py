"""The JavaScript toolchain's pure parts: the world a guest declares or exports, the language of a directory, and
how a syntax error is reported (node's message, named `app.js:LINE`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmhost import BuildError
from llmhost.toolchains import detect_world, is_js, javascript


def guest(tmp_path: Path, source: str, package: str | None = None) -> Path:
    (tmp_path / "app.js").write_text(source)
    if package is not None:
        (tmp_path / "package.json").write_text(package)
    return tmp_path


@pytest.mark.parametrize(
    ("source", "world"),
    [
        ("export function run(args) { return 0; }", "command"),
        ("export async function run(args) { return 0; }", "command"),
        ("export const handler = { handle(request, writer) {} };", "http-app"),
        ("const handler = {};\nexport { handler };", "http-app"),
    ],
)
def test_the_world_is_what_app_js_exports(tmp_path: Path, source: str, world: str) -> None:
    assert is_js(guest(tmp_path, source)) and detect_world(tmp_path) == world


def test_package_json_declares_the_world_and_bad_declarations_are_named(tmp_path: Path) -> None:
    guest(tmp_path, "export function run(args) { return 0; }", '{"llmhost": {"world": "http-app"}}')
    assert detect_world(tmp_path) == "http-app"
    (tmp_path / "package.json").write_text('{"llmhost": {"world": "daemon"}}')
    with pytest.raises(BuildError, match="llmhost.world must be one of command, http-app"):
        detect_world(tmp_path)
    (tmp_path / "package.json").unlink()
    (tmp_path / "app.js").write_text("export const x = 1;")
    with pytest.raises(BuildError, match="exports neither `run`"):
        detect_world(tmp_path)


def test_a_python_guest_stays_python(tmp_path: Path) -> None:
    guest(tmp_path, "export function run(args) { return 0; }")
    (tmp_path / "app.py").write_text("")
    assert not is_js(tmp_path)


def test_a_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    guest(tmp_path, "export function run(args) {\n  return 0;\n}\nconst = 5;\n")
    with pytest.raises(BuildError) as caught:
        javascript.check_sources(tmp_path)
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'app.js'}:4") and "SyntaxError" in message and "const = 5;" in message


@pytest.mark.parametrize(
    ("source", "uses"),
    [
        ('import { llm, kv } from "llmhost";', True),
        ("import {llm} from 'llmhost'", True),
        ('import * as sdk from "llmhost/llm.js";', True),
        ('import { infer } from "llmhost:llm/llm@0.2.4";', False),  # the raw interface: no SDK, no bundling
        ('import { llmhost } from "./llmhost-utils.js";', False),
    ],
)
def test_a_guest_that_imports_the_sdk_is_bundled_with_it(tmp_path: Path, source: str, uses: bool) -> None:
    assert javascript.uses_sdk(guest(tmp_path, source + "\nexport function run(args) { return 0; }")) is uses


def test_the_sdk_is_part_of_the_build_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    wit = Path(javascript.__file__).resolve().parents[3] / "wit"
    sdk = tmp_path / "sdk"
    shutil.copytree(javascript.sdk_dir(), sdk)
    assert (sdk / "index.js").is_file() and (sdk / "index.d.ts").is_file()
    (tmp_path / "app").mkdir()
    (tmp_path / "raw").mkdir()
    app = guest(tmp_path / "app", 'import { llm } from "llmhost";\nexport function run(args) { return 0; }')
    raw = guest(tmp_path / "raw", "export function run(args) { return 0; }")
    monkeypatch.setattr(javascript, "sdk_dir", lambda: sdk)
    before = (javascript.build_key(app, wit, "command"), javascript.build_key(raw, wit, "command"))
    (sdk / "llm.js").write_text((sdk / "llm.js").read_text() + "\n// changed\n")
    assert javascript.build_key(app, wit, "command") != before[0]  # a guest that uses the SDK rebuilds
    assert javascript.build_key(raw, wit, "command") == before[1]  # one that does not, does not


def test_a_long_install_says_it_is_still_at_work(monkeypatch: pytest.MonkeyPatch) -> None:
    from llmhost.toolchains import npm_deps

    monkeypatch.setattr(npm_deps, "PROGRESS_EVERY_S", 0.2)
    notes: list[str] = []
    npm_deps.run_with_progress(["sleep", "0.7"], "installing something", notes.append)
    assert len(notes) >= 2 and all(n.startswith("still installing something (") for n in notes), notes
    with pytest.raises(BuildError, match=r"installing something failed:\nboom"):
        npm_deps.run_with_progress(["sh", "-c", "echo boom >&2; exit 3"], "installing something", None)
