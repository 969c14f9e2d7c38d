"""Build keys see what reaches a component and nothing else: a guest made by `llmhost new NAME` from a template
has its example's key (NAME is only in the README and the manifest's descriptive fields), while a dependency, a
source line or a WIT package name changes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmhost.toolchains import detect_world, javascript, python, templates

WIT = python.wit_dir()


def key(app: Path, world: str = "command") -> str:
    if (app / "app.js").is_file():
        return javascript.build_key(app, WIT, world)
    return python.build_key(app, WIT, world, "componentize-py (any version)")


def made(tmp_path: Path, template: str, lang: str) -> tuple[Path, Path]:
    """(the example, a guest made from it under another name)"""
    names = templates.JS_TEMPLATES if lang == "js" else templates.TEMPLATES
    return templates.examples_dir() / names[template], templates.create(tmp_path / f"my-{template}", template, lang)


@pytest.mark.parametrize(
    ("template", "lang"),
    [*((t, "python") for t in templates.TEMPLATES if t != "mcp-tool"), *((t, "js") for t in templates.JS_TEMPLATES)],
)
def test_a_guest_made_from_a_template_has_its_examples_build_key(tmp_path: Path, template: str, lang: str) -> None:
    example, guest = made(tmp_path, template, lang)
    manifest = guest / ("package.json" if lang == "js" else "pyproject.toml")
    assert f"my-{template}" in manifest.read_text()  # the name differs, and is not part of the build
    world = detect_world(example)
    assert detect_world(guest) == world and key(guest, world) == key(example, world)


def test_a_tool_template_renames_its_wit_package_and_so_builds_anew(tmp_path: Path) -> None:
    example, guest = made(tmp_path, "mcp-tool", "python")
    assert "package example:my-mcp-tool@" in (guest / "wit" / "world.wit").read_text()
    assert key(guest) != key(example)  # the package name is in the component's exports


def test_python_manifest_fields_that_reach_the_build_change_the_key(tmp_path: Path) -> None:
    _, guest = made(tmp_path, "command", "python")
    pyproject = guest / "pyproject.toml"
    original, before = pyproject.read_text(), key(guest)
    changes = [
        original.replace("dependencies = []", 'dependencies = ["jinja2"]'),
        original + '\n[tool.llmhost.extra]\ninclude = ["json"]\n',
        original.replace("[project]", "[project]\nx-custom = 1"),  # a field not known to be descriptive
    ]
    for changed in changes:
        pyproject.write_text(changed)
        assert key(guest) != before, changed
    pyproject.write_text(original.replace('version = "0.1.0"', 'version = "9.9"').replace("An llmhost", "My"))
    assert key(guest) == before
    (guest / "app.py").write_text((guest / "app.py").read_text() + "\n# a comment\n")
    assert key(guest) != before


def test_js_manifest_fields_that_reach_the_build_change_the_key(tmp_path: Path) -> None:
    _, guest = made(tmp_path, "command", "js")
    package = guest / "package.json"
    data, before = json.loads(package.read_text()), key(guest)
    package.write_text(json.dumps({**data, "name": "other", "version": "3.0.0", "description": "x"}))
    assert key(guest) == before
    package.write_text(json.dumps({**data, "dependencies": {"left-pad": "1.3.0"}}))
    assert key(guest) != before
    package.write_text(json.dumps({**data, "imports": {"#x": "./app.js"}}))  # not known to be descriptive
    assert key(guest) != before
