"""Models from the Hugging Face Hub (`hf-repo`): their files in the Hub's own cache (HF_HOME), shared with other
tools. Resolving reads the cache only; `llmhost pull` and `--pull` download (engine/hub_pull.py, hub_download.py)."""

from __future__ import annotations

import fnmatch
import logging
import os
import re
import shlex
from pathlib import Path

from llmhost.config import ModelConfig
from llmhost.domain.errors import EngineError

_log = logging.getLogger(__name__)
_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def hub_cache() -> Path:
    """The Hub's cache directory, read from the environment now (huggingface_hub reads it once, at import)."""
    explicit = os.environ.get("HF_HUB_CACHE")
    if explicit:
        return Path(explicit)
    home = os.environ.get("HF_HOME") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface"
    )
    return Path(home) / "hub"


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def pull_command(config: ModelConfig) -> str:
    """The command that downloads `config`'s file, quoted for a POSIX shell (a glob such as `*Q4_K_M.gguf` would
    otherwise be expanded by the shell before `pull` sees it)."""
    selector = f":{config.hf_file}" if config.hf_file else ""
    revision = f" --revision {shlex.quote(config.hf_revision)}" if config.hf_revision != "main" else ""
    return f"llmhost pull {shlex.quote(f'{config.hf_repo}{selector}')}{revision}"


def repo_dir(repo: str) -> Path:
    """`repo`'s folder in the cache (huggingface_hub's layout: blobs/, snapshots/COMMIT/, refs/REVISION)."""
    return hub_cache() / f"models--{repo.replace('/', '--')}"


def snapshot_dir(repo: str, revision: str) -> Path | None:
    """The cached snapshot of `revision` (a branch, tag or commit) of `repo`, if one was downloaded."""
    root = repo_dir(repo)
    commit = revision if _COMMIT.match(revision) else None
    if commit is None and (revision.startswith("/") or ".." in revision.split("/")):
        return None  # a ref outside refs/ is never read (`pull` refuses such a revision)
    if commit is None:
        try:
            commit = (root / "refs" / revision).read_text().strip()
        except OSError:
            return None
    snapshot = root / "snapshots" / commit
    return snapshot if snapshot.is_dir() else None


def matching(names: list[str], selector: str | None) -> list[str]:
    """The GGUF files `selector` picks: a file name or glob, a quantization (`Q4_K_M`, matched as a whole word of
    the name, any case), or None (every GGUF). A split GGUF's parts all match when its first part does."""
    ggufs = sorted(n for n in names if n.lower().endswith(".gguf"))
    if selector is None:
        return ggufs
    if selector.lower().endswith(".gguf") or any(c in selector for c in "*?["):
        return [n for n in ggufs if fnmatch.fnmatch(n, selector) or fnmatch.fnmatch(Path(n).name, selector)]
    word = re.compile(rf"(^|[-._/]){re.escape(selector)}([-._]|$)", re.IGNORECASE)
    return [n for n in ggufs if word.search(Path(n).name[: -len(".gguf")] + ".")]


def first_part(names: list[str]) -> str | None:
    """The file llama.cpp opens: the only one, or a split GGUF's `-00001-of-N` part (it finds the rest beside it)."""
    if len(names) == 1:
        return names[0]
    firsts = [n for n in names if (m := _SPLIT.search(n)) and m.group(1) == "00001"]
    return firsts[0] if len(firsts) == 1 and all(_SPLIT.search(n) for n in names) else None


def cached_files(config: ModelConfig) -> list[Path]:
    """The files of an `hf-repo` model in the cached snapshot of its revision (every part of a split GGUF)."""
    assert config.hf_repo is not None
    snapshot = snapshot_dir(config.hf_repo, config.hf_revision)
    if snapshot is None:
        return []
    names = [str(p.relative_to(snapshot)) for p in snapshot.rglob("*.gguf") if p.is_file()]
    return [snapshot / name for name in matching(names, config.hf_file)]


def model_file(config: ModelConfig) -> Path | None:
    """The cached file of an `hf-repo` model that llama.cpp opens; None when it is not cached (or no hf-repo)."""
    if config.hf_repo is None:
        return None
    files = cached_files(config)
    first = first_part([str(f) for f in files])
    return Path(first) if first is not None else None


def resolve(name: str, config: ModelConfig) -> Path:
    """The cached file, or `EngineError` naming the `llmhost pull` command (or `--pull`) that downloads it."""
    found = model_file(config)
    if found is not None:
        assert config.hf_repo is not None
        commit = snapshot_dir(config.hf_repo, config.hf_revision)
        _log.info("model %s: %s at commit %s (%s)", name, config.hf_repo, commit and commit.name, config.hf_revision)
        return found
    files = cached_files(config)
    if len(files) > 1:
        listed = ", ".join(f.name for f in files)
        raise EngineError(
            f"`models.{name}.hf-file` matches several cached files ({listed}): name one file, or a quantization"
        )
    raise EngineError(
        f"model {name!r} ({config.hf_repo}, revision {config.hf_revision}) is not downloaded: run "
        f"`{pull_command(config)}`, or start with --pull"
    )
