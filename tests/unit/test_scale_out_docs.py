"""docs/scale-out.md says what llmhost accepts: every TOML block loads with llmhost's own config loaders, every
`llmhost ...` command parses with the CLI (its subcommand's `--help` works, its options exist), and every
`key = value` the prose names is a key of the config section it belongs to."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from llmhost.cli import cli
from llmhost.config import ClusterConfig, ModelConfig, load_config
from llmhost.shell.config import load_app_config

DOC = Path(__file__).resolve().parents[2] / "docs" / "scale-out.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
# An app config (`llmhost serve -c APP.toml`) has components or routes; a host config has neither.
APP_TABLES = re.compile(r"^\[(components|routes|serve)[.\]]", re.M)
# `key = value` in the prose (not in a code block): a config key the doc tells the reader to set.
PROSE_KEY = re.compile(r"`([a-z][a-z0-9-]*) = [^`]+`")


def blocks(kind: str) -> list[str]:
    return [body for lang, body in FENCE.findall(DOC.read_text()) if lang == kind]


def commands() -> list[list[str]]:
    """`llmhost ...` commands of the shell blocks: `$ ` lines of a console block (the rest is output), every line
    of an sh block; `.venv/bin/` and a trailing `&` dropped."""
    lines = [line[2:] for body in blocks("console") for line in body.splitlines() if line.startswith("$ ")]
    lines += [line for body in blocks("sh") for line in body.splitlines()]
    found = []
    for line in lines:
        words = shlex.split(line.strip().removesuffix("&"), comments=True)
        if words and words[0].rsplit("/", 1)[-1] == "llmhost":
            found.append(words[1:])
    return found


def config_keys() -> set[str]:
    fields = list(ModelConfig.model_fields) + list(ClusterConfig.model_fields)
    return {name.replace("_", "-") for name in fields}


def test_the_doc_has_what_these_tests_read() -> None:
    assert len(blocks("toml")) >= 3
    assert any(words and words[-1] == "--ray" for words in commands())
    assert any("infer" in words for words in commands())


@pytest.mark.parametrize("index", range(len(blocks("toml"))))
def test_every_toml_block_loads_with_llmhosts_config_loader(index: int, tmp_path: Path) -> None:
    body = blocks("toml")[index]
    path = tmp_path / "config.toml"
    path.write_text(body)
    config = load_app_config(path) if APP_TABLES.search(body) else load_config(path)
    # Every model table of the block arrives (a misspelt table name would be a model of another name).
    for name in re.findall(r"^\[models\.([\w.-]+)\]", body, re.M):
        assert name in config.models


def split_at_subcommand(words: list[str]) -> tuple[list[str], str, list[str]]:
    """`-c FILE infer ...` -> the group's options, the subcommand, its arguments."""
    valued = {o for p in cli.params if isinstance(p, click.Option) and not p.is_flag for o in p.opts}
    i = 0
    while i < len(words) and words[i].startswith("-"):
        i += 2 if words[i] in valued else 1
    assert i < len(words), f"`llmhost {shlex.join(words)}`: no subcommand"
    return words[:i], words[i], words[i + 1 :]


def test_every_llmhost_command_parses_with_the_cli() -> None:
    runner = CliRunner()
    for words in commands():
        shown = f"`llmhost {shlex.join(words)}`"
        options, name, args = split_at_subcommand(words)
        command = cli.get_command(click.Context(cli), name)
        assert command is not None, f"{shown}: no subcommand {name!r}"
        helped = runner.invoke(cli, [name, "--help"])
        assert helped.exit_code == 0, helped.output
        try:  # parsed (an unknown option, a missing argument fail here), not run
            root = cli.make_context("llmhost", [*options, name])
            command.make_context(name, list(args), parent=root)
        except click.UsageError as e:
            # The walkthrough's files (cluster.toml, ...) are not here: a path that must exist is all it may miss.
            if not (isinstance(e, click.BadParameter) and "does not exist" in e.format_message()):
                raise AssertionError(f"{shown}: {e.format_message()}") from None


def test_every_key_the_prose_names_is_a_config_key() -> None:
    prose = FENCE.sub("", DOC.read_text())
    named = set(PROSE_KEY.findall(prose))
    assert named, "the doc names no `key = value`"
    assert named <= config_keys(), sorted(named - config_keys())
