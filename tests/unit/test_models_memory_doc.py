"""docs/models.md's `llmhost models --memory` block is what the command prints for the built-in models."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from llmhost.cli import cli

DOC = Path(__file__).resolve().parents[2] / "docs" / "models.md"


def test_the_documented_models_memory_output_is_the_commands(tmp_path: Path) -> None:
    block = re.search(r"```console\n\$ llmhost models --memory\n(.*?)```", DOC.read_text(), re.S)
    assert block is not None
    result = CliRunner().invoke(cli, ["models", "--memory"], env={"LLMHOST_CONFIG": None})
    assert result.exit_code == 0, result.output
    assert result.stdout.split("\n")[:4] == block.group(1).split("\n")[:4]
