"""`llmhost pull` against a local server speaking the Hub's download protocol (tests/hub_server.py, HF_ENDPOINT),
serving the built-in SmolLM2 GGUF under a repo name: the download, resume after a cut connection, the checks, the
errors a user meets, and the cache being what every command then resolves. Nothing reaches the internet."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from hub_server import COMMIT, Hub, hub_server
from llmhost.cli import cli
from llmhost.config import ModelConfig
from llmhost.engine.hub import model_file
from llmhost.engine.local.models import SMOLLM2_SHA256, smollm2_path

REPO = "test/SmolLM2-135M-Instruct-GGUF"
FILE = "SmolLM2-135M-Instruct-Q4_1.gguf"


@pytest.fixture
def hub(llmhost_cache_dir: Path, tmp_path: Path) -> Iterator[Hub]:
    readme = tmp_path / "README.md"
    readme.write_text("no weights here\n")
    repos = {REPO: {FILE: smollm2_path(llmhost_cache_dir), "README.md": readme}, "test/no-gguf": {"README.md": readme}}
    with hub_server(Hub(repos)) as running:
        yield running


def pull(hub: Hub, tmp_path: Path, *args: str, **env: str) -> Result:
    environment = {"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_CACHE": None, "HF_TOKEN": None}
    environment |= {"HF_HUB_OFFLINE": None, "HF_HUB_DISABLE_PROGRESS_BARS": "1", **env}
    return CliRunner().invoke(cli, ["pull", *args], env=environment, catch_exceptions=False)


def pulled_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path | None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    return model_file(ModelConfig(hf_repo=REPO, hf_file=FILE))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_pull_by_quantization_prints_the_table_and_caches_the_file(
    hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "llmhost.toml"
    result = pull(hub, tmp_path, f"{REPO}:q4_1", "--name", "smol", "--config", str(config))
    assert result.exit_code == 0, result.stderr
    table = f'[models.smol]\nhf-repo = "{REPO}"\nhf-file = "{FILE}"\n'
    assert result.stdout == table and config.read_text() == table
    assert COMMIT in result.stderr  # the resolved commit is logged
    path = pulled_file(tmp_path, monkeypatch)
    assert path is not None and path.parent.name == COMMIT and sha256(path) == SMOLLM2_SHA256
    # Every command resolves it from the cache: `llmhost models` reads its GGUF header (an instruct model).
    listed = CliRunner().invoke(cli, ["-c", str(config), "models"], env={"HF_HOME": str(tmp_path / "hf")})
    assert listed.exit_code == 0, listed.stderr
    [row] = [line.split() for line in listed.stdout.splitlines() if line.startswith("smol ")]
    assert row[1:6] == ["instruct", "4096", "98MB", "Q4_1", "yes"] and row[-1] == f"hf:{REPO}"


def test_a_cut_connection_is_resumed_from_where_it_stopped(
    hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub.cut_once.add(FILE)
    first = pull(hub, tmp_path, f"{REPO}:{FILE}")
    # No file a start would use, and the message promises what the next pull does: resume from the bytes kept.
    kept = re.search(r"\((\d+) of (\d+) bytes kept\): run the command again to resume from there", first.stderr)
    assert first.exit_code == 2 and kept, first.stderr
    assert pulled_file(tmp_path, monkeypatch) is None
    assert pull(hub, tmp_path, f"{REPO}:{FILE}").exit_code == 0
    gets = [(path, ranged) for method, path, ranged in hub.requests if method == "GET" and path.endswith(FILE)]
    assert gets[0][1] is None and len(gets) == 2, gets  # the whole file once, then only the rest
    offset = int((gets[1][1] or "").removeprefix("bytes=").removesuffix("-"))
    assert 0 < offset == int(kept.group(1)) < smollm2_path_size(hub) == int(kept.group(2))
    path = pulled_file(tmp_path, monkeypatch)
    assert path is not None and sha256(path) == SMOLLM2_SHA256


def smollm2_path_size(hub: Hub) -> int:
    return hub.repos[REPO][FILE].stat().st_size


def test_a_checksum_mismatch_is_caught_and_the_file_removed(
    hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub.corrupt.add(FILE)
    result = pull(hub, tmp_path, f"{REPO}:Q4_1")
    assert result.exit_code == 2 and "checksum mismatch" in result.stderr, result.stderr
    assert pulled_file(tmp_path, monkeypatch) is None
    assert not [p for p in (tmp_path / "hf").rglob("*") if p.is_file() and p.stat().st_size > 1_000_000]


@pytest.mark.parametrize(
    ("ref", "env", "says"),
    [
        ("test/nope-GGUF", {}, "not-found: no such repo"),
        ("test/no-gguf", {}, "not-found: test/no-gguf has no GGUF file"),
        (f"{REPO}:Q8_0", {}, "not-found: " + REPO + " has no GGUF file for 'Q8_0'; it has: Q4_1"),
        (f"{REPO}:Q4_1", {"HF_HUB_OFFLINE": "1"}, "unreachable: HF_HUB_OFFLINE"),
        ("not-a-repo", {}, "usage-error: 'not-a-repo' is not a Hub repo: give OWNER/NAME"),
    ],
)
def test_errors_say_what_is_wrong(hub: Hub, tmp_path: Path, ref: str, env: dict[str, str], says: str) -> None:
    result = pull(hub, tmp_path, ref, **env)
    assert result.exit_code == 2 and says in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_a_gated_repo_names_hf_token(hub: Hub, tmp_path: Path) -> None:
    hub.gated.add(REPO)
    result = pull(hub, tmp_path, f"{REPO}:Q4_1")
    assert result.exit_code == 2 and "access-denied: " in result.stderr and "gated" in result.stderr, result.stderr
    assert "HF_TOKEN" in result.stderr


def test_a_model_not_pulled_is_refused_naming_the_pull_command(tmp_path: Path) -> None:
    config = tmp_path / "llmhost.toml"
    config.write_text(f'[models.smol]\nhf-repo = "{REPO}"\nhf-file = "*Q4_1.gguf"\n')
    result = CliRunner().invoke(
        cli, ["-c", str(config), "infer", "smol", "hi"], env={"HF_HOME": str(tmp_path / "hf"), "HF_HUB_CACHE": None}
    )
    assert result.exit_code == 2, result.stderr
    assert f"llmhost pull '{REPO}:*Q4_1.gguf'" in result.stderr and "--pull" in result.stderr  # shell-quoted


def test_hf_repo_and_path_together_are_a_config_error(tmp_path: Path) -> None:
    config = tmp_path / "llmhost.toml"
    config.write_text(f'[models.smol]\nhf-repo = "{REPO}"\npath = "x.gguf"\n')
    result = CliRunner().invoke(cli, ["-c", str(config), "models"])
    assert result.exit_code == 2 and "`hf-repo` and `path`" in result.stderr, result.stderr
