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
