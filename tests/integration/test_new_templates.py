"""`llmhost new`: every template is created as its example, every error is one line with exit status 2, and a
command guest's directory runs with the config it carries (`llmhost run DIR` reads DIR/llmhost.toml)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from llmhost.cli import cli
from llmhost.toolchains.templates import CONFIG_FILE, JS_TEMPLATES, TEMPLATES, examples_dir
from serve_driver import LLMHOST


def new(cwd: Path, *args: str) -> tuple[int, str, str]:
    """`llmhost new ARGS` in `cwd` (CliRunner: in-process, so each case costs milliseconds)."""
    here = Path.cwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(cli, ["new", *args], env={"LLMHOST_CONFIG": None}, catch_exceptions=False)
    finally:
        os.chdir(here)
    return result.exit_code, result.stdout, result.stderr


NOT_IN_JS = next(t for t in TEMPLATES if t not in JS_TEMPLATES)  # a Python template with no JavaScript twin yet
# Each mistake, and what its one line must name.
MISTAKES = {
    "a JavaScript template that does not exist yet": (["x", "--lang", "js", "--template", NOT_IN_JS], "drop --lang js"),
    "an unknown template": (["x", "--template", "nope"], "choose one of: command, http-app"),
    "an unknown language": (["x", "--lang", "rust"], "one of python, js"),
    "no name": ([], "Missing argument 'NAME'"),
    "an unknown option": (["x", "--bogus"], "No such option '--bogus'"),
    "an option without its value": (["x", "--template"], "requires an argument"),
    "no directory name": ([".", "--template", "chat"], "is not a name for a new directory"),
    "an existing directory": (["taken"], "taken already exists (choose another name"),
}


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_every_error_of_new_is_one_line_with_exit_status_2(tmp_path: Path, mistake: str) -> None:
    (tmp_path / "taken").mkdir()
    args, named = MISTAKES[mistake]
    status, stdout, stderr = new(tmp_path, *args)
    assert (status, stdout) == (2, "")
    assert stderr.startswith("llmhost: error: ") and stderr.count("\n") == 1 and named in stderr, stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]  # nothing half-made


def test_a_missing_js_template_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """The issue's case (`--lang js --template chat`, before the JavaScript chat existed), through the installed
    command in a subprocess, as a user meets it."""
    done = subprocess.run(
        [LLMHOST, "new", "x", "--lang", "js", "--template", NOT_IN_JS], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 2 and done.stdout == "", done
    assert done.stderr.startswith(f"llmhost: error: no JavaScript template {NOT_IN_JS!r}"), done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


@pytest.mark.parametrize("template", list(TEMPLATES))
def test_every_python_template_is_its_example_renamed(tmp_path: Path, template: str) -> None:
    status, stdout, stderr = new(tmp_path, "mine", "--template", template)
    assert (status, stdout.strip(), stderr) == (0, "mine", "")
    example = examples_dir() / TEMPLATES[template]
    guest = tmp_path / "mine"
    made = {str(p.relative_to(guest)) for p in guest.rglob("*") if p.is_file()}
    assert {"app.py", "README.md", "pyproject.toml"} <= made
    assert (CONFIG_FILE in made) == (example / CONFIG_FILE).is_file()  # its grants come with it
    readme = (guest / "README.md").read_text()
    assert readme.startswith("# mine\n") and f"guest-examples/{example.name}" not in readme
    assert 'name = "mine"' in (guest / "pyproject.toml").read_text()
    if template in ("chat", "rag"):  # an http-app keeping state: its config serves the directory, with the grant
        assert "llmhost serve -c mine/llmhost.toml --watch" in readme
        config = (guest / CONFIG_FILE).read_text()
        assert 'source = "."' in config and 'key-value-stores = ["default"]' in config


@pytest.mark.wasm
def test_run_dir_reads_the_config_the_directory_carries(tmp_path: Path, llmhost_cache_dir: Path) -> None:
    assert new(tmp_path, "mybot", "--template", "command")[0] == 0
    # A config only a test would write: the fake engine, whose text no model generates.
    (tmp_path / "mybot" / CONFIG_FILE).write_text('[engine]\nkind = "fake"\n')
    env = {k: v for k, v in os.environ.items() if k != "LLMHOST_CONFIG"}
    env["LLMHOST_CACHE_DIR"] = str(llmhost_cache_dir)
    done = subprocess.run(
        [LLMHOST, "run", "mybot", "--", "Hi"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Hello from the fake engine."[:8]), done.stdout
    # -c names another config: it wins (here, one that does not parse, so the run stops before building).
    (tmp_path / "other.toml").write_text("[engine\n")
    done = subprocess.run(
        [LLMHOST, "-c", "other.toml", "run", "mybot"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 2 and "other.toml" in done.stderr, done.stderr
