"""`llmhost pull` and `--pull`: a GGUF (every part of a split one) downloaded from the Hugging Face Hub into its
cache with huggingface_hub (resumed when interrupted, progress on a terminal), then checked: the size and the Hub's
sha256, and the GGUF header. A file that fails a check is removed, so no later start uses it."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmhost.config import ModelConfig, read_toml
from llmhost.domain.errors import EngineError
from llmhost.engine.hub import first_part, hub_cache, matching, offline

_QUANT = re.compile(r"(?i)(?:^|[-._])((?:I?Q\d\w*?)|F16|F32|BF16)(?=[-._](?:\d{5}-of-\d{5}\.)?gguf$|\.gguf$)")
_SPLIT = re.compile(r"-\d{5}-of-\d{5}\.gguf$")


@dataclass(frozen=True)
class Pulled:
    repo: str
    revision: str
    commit: str
    files: tuple[Path, ...]  # every part
    path: Path  # the file llama.cpp opens (the first part)
    filename: str  # its name in the repo (`hf-file`)


def parse_ref(ref: str) -> tuple[str, str | None]:
    """`REPO[:QUANT|FILE]` -> (repo, selector)."""
    repo, _, selector = ref.partition(":")
    if repo.count("/") != 1 or not all(repo.split("/")):
        raise EngineError(
            f"{ref!r} is not a Hub repo: give OWNER/NAME[:QUANT|FILE], e.g. bartowski/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M"
        )
    return repo, selector or None


def endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "").rstrip("/") or "https://huggingface.co"


def _token() -> str | None:
    return os.environ.get("HF_TOKEN") or None


def quantizations(names: list[str]) -> list[str]:
    return sorted({m.group(1).upper() for n in names if (m := _QUANT.search(Path(n).name))})


def pull(repo: str, selector: str | None, revision: str = "main", note: Callable[[str], None] | None = None) -> Pulled:
    """Download (or find complete in the cache) the GGUF `selector` picks; `EngineError` with what to do otherwise."""
    if offline():
        raise EngineError(f"HF_HUB_OFFLINE is set: cannot download {repo} (unset it, or use a cached model)")
    info = _repo_info(repo, revision)
    sizes = {s.rfilename: (s.size, s.lfs.sha256 if s.lfs else None) for s in info.siblings or []}
    chosen = _choose(repo, list(sizes), selector)
    first = first_part(chosen)
    assert first is not None
    _check_room([sizes[name][0] or 0 for name in chosen])
    files = []
    for name in chosen:
        if note is not None:
            note(f"downloading {repo}/{name} ({(sizes[name][0] or 0) / 1e6:.0f} MB, commit {info.sha})")
        path = _download(repo, name, revision)
        _verify(path, name, *sizes[name])
        files.append(path)
    path = files[chosen.index(first)]
    _check_header(path)
    return Pulled(repo, revision, str(info.sha), tuple(files), path, first)


def _repo_info(repo: str, revision: str) -> Any:
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    try:
        return HfApi(endpoint=endpoint(), token=_token()).model_info(repo, revision=revision, files_metadata=True)
    except GatedRepoError:
        raise EngineError(
            f"{repo} is gated: accept its terms on the Hub, then set HF_TOKEN to a token of that account"
        ) from None
    except RevisionNotFoundError:
        raise EngineError(f"{repo} has no revision {revision!r}") from None
    except RepositoryNotFoundError:
        raise EngineError(f"no such repo on the Hub ({endpoint()}): {repo} (or it is private: set HF_TOKEN)") from None
    except Exception as error:  # a network failure: httpx's and the Hub client's errors
        raise EngineError(f"cannot reach the Hub ({endpoint()}) for {repo}: {error}") from None


def _choose(repo: str, names: list[str], selector: str | None) -> list[str]:
    ggufs = matching(names, None)
    if not ggufs:
        raise EngineError(f"{repo} has no GGUF file (llmhost runs GGUF models; look for a -GGUF repo of the model)")
    chosen = matching(names, selector)
    if not chosen:
        present = ", ".join(quantizations(ggufs)) or ", ".join(ggufs)
        raise EngineError(f"{repo} has no GGUF file for {selector!r}; it has: {present}")
    if first_part(chosen) is None:
        firsts = [n for n in chosen if not _SPLIT.search(n) or "-00001-of-" in n]
        if len(firsts) == 1:  # a split GGUF: every part of it
            stem = _SPLIT.sub("", firsts[0])
            return sorted(n for n in ggufs if _SPLIT.sub("", n) == stem)
        listed = ", ".join(firsts)
        raise EngineError(f"{repo}: {selector or 'no selector'} matches several files ({listed}): name one (REPO:FILE)")
    if _SPLIT.search(chosen[0]):  # a first part named alone: the other parts come too
        stem = _SPLIT.sub("", chosen[0])
        return sorted(n for n in ggufs if _SPLIT.sub("", n) == stem)
    return chosen


def _check_room(sizes: list[int]) -> None:
    cache = hub_cache()
    existing = next(p for p in (cache, *cache.parents) if p.exists())
    free = shutil.disk_usage(existing).free
    if sum(sizes) > free:
        raise EngineError(
            f"not enough disk space in {cache}: {sum(sizes) / 1e6:.0f} MB needed, {free / 1e6:.0f} MB free"
        )


def _download(repo: str, name: str, revision: str) -> Path:
    from huggingface_hub import hf_hub_download

    try:
        return Path(
            hf_hub_download(repo, name, revision=revision, cache_dir=hub_cache(), endpoint=endpoint(), token=_token())
        )
    except Exception as error:  # the partial file stays in the cache's blobs as `.incomplete`: resumed next time
        raise EngineError(f"download of {repo}/{name} failed: {error} (run the command again to resume)") from None


def _remove(path: Path) -> None:
    blob = path.resolve()
    path.unlink(missing_ok=True)
    blob.unlink(missing_ok=True)


def _verify(path: Path, name: str, size: int | None, sha256: str | None) -> None:
    actual = path.stat().st_size
    if size is not None and actual != size:
        _remove(path)
        raise EngineError(f"{name}: {actual} bytes where the Hub says {size}: removed; run the command again")
    if sha256 is None:
        return
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(1 << 20):
            digest.update(block)
    if digest.hexdigest() != sha256:
        _remove(path)
        raise EngineError(
            f"{name}: checksum mismatch (sha256 is not the Hub's {sha256}): removed; run the command again"
        )


def _check_header(path: Path) -> None:
    from llmhost.engine.local.gguf import GgufError
    from llmhost.engine.local.gguf_meta import read_metadata

    try:
        read_metadata(path)
    except GgufError as error:
        _remove(path)
        raise EngineError(f"{path.name} is no usable GGUF file ({error}): removed") from None


def model_name(repo: str) -> str:
    return re.sub(r"[-_.]gguf$", "", repo.split("/")[1], flags=re.IGNORECASE).lower()


def config_table(name: str, pulled: Pulled) -> str:
    """The `[models.NAME]` table that names the pulled file."""
    key = name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else f'"{name}"'
    revision = f'hf-revision = "{pulled.revision}"\n' if pulled.revision != "main" else ""
    return f'[models.{key}]\nhf-repo = "{pulled.repo}"\nhf-file = "{pulled.filename}"\n{revision}'


# -- for the CLI: `--pull` and `pull --config` ------------------------------------------------------------


def pull_models(models: dict[str, ModelConfig], note: Callable[[str], None]) -> None:
    """Download each `hf-repo` model not in the cache yet (`--pull`)."""
    from llmhost.engine.hub import model_file

    for name, model in models.items():
        if model.hf_repo is None or model_file(model) is not None:
            continue
        pulled = pull(model.hf_repo, model.hf_file, model.hf_revision, note)
        note(f"model {name}: {pulled.repo} at commit {pulled.commit}: {pulled.path}")


def models_of(config_file: Path) -> dict[str, ModelConfig]:
    """The `[models]` of a config file (a host config or serve's app config)."""
    from pydantic import ValidationError

    tables = read_toml(config_file).get("models", {})
    try:
        return {name: ModelConfig.model_validate(table) for name, table in tables.items()}
    except ValidationError:
        return {}  # the command's own loading reports the error, naming the key


def add_table(config_file: Path, table: str) -> None:
    text = config_file.read_text() if config_file.exists() else ""
    separator = "" if not text or text.endswith("\n\n") else ("\n" if text.endswith("\n") else "\n\n")
    config_file.write_text(text + separator + table)
