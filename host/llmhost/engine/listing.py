"""`llmhost models`' table: one row per configured model, from the config and each GGUF's header (engine.kinds);
with `--memory`, each local model's keep-alive and estimated footprint too; with `--server URL`, a running server's
models as its metrics listener's `/models` tells (engine/status.py): loaded or not, memory, idle time."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence

from llmhost.config import KEEP_ALIVE_FOREVER, HostConfig, ModelConfig
from llmhost.domain.kinds import ModelKind
from llmhost.engine.kinds import FileFacts, file_facts
from llmhost.engine.status import ModelStatus

HEADER = ("NAME", "KIND", "CONTEXT", "SIZE", "QUANT", "TEMPLATE", "ALIASES", "SOURCE")


def _size(size: int | None) -> str:
    if size is None:
        return "-"
    return f"{size / 1e9:.1f}GB" if size >= 1e9 else f"{size / 1e6:.0f}MB"


def _template(facts: FileFacts) -> str:
    return "-" if facts.chat_template is None else ("yes" if facts.chat_template else "no")


def _context(model: ModelConfig, facts: FileFacts) -> str:
    """The window the engine will use: an encoder's learned positions end at its training context, so an embedding
    model gets the smaller of the two (as the decoder sets n_ctx); a causal model gets the configured length."""
    if facts.kind is ModelKind.EMBEDDING and facts.trained_context is not None and model.backend != "openai":
        return str(min(model.context_length, facts.trained_context))
    return str(model.context_length)


MEMORY_HEADER = ("KEEP-ALIVE", "MEMORY")


def _keep_alive(model: ModelConfig) -> str:
    if model.backend != "llama-cpp":
        return "-"
    return "forever" if model.keep_alive_s == KEEP_ALIVE_FOREVER else f"{model.keep_alive_s:g}s"


def _memory(name: str, model: ModelConfig, config: HostConfig) -> str:
    """The footprint the memory budget counts (engine/local/footprint.py), once the model's file is here."""
    from llmhost.engine.hub import model_file
    from llmhost.engine.local.footprint import footprint_bytes
    from llmhost.engine.local.models import builtin_installed, resolve_model_path

    if model.backend != "llama-cpp":
        return "-"
    path = model_file(model) if model.hf_repo is not None else model.path
    if path is None and builtin_installed(name, config.cache_dir):
        path = resolve_model_path(name, model, config.cache_dir)  # made from its cached wheel, as first use would
    if path is None or not path.is_file():
        return "-"
    return _size(footprint_bytes(path, model))


def model_rows(config: HostConfig, memory: bool = False) -> list[str]:
    """The table's lines, header first; SOURCE last (a path may hold spaces). `memory`: with each local model's
    KEEP-ALIVE and MEMORY (its estimated footprint: file plus KV cache) before SOURCE."""
    from llmhost.engine.hub import model_file  # an `hf-repo` model's cached file, if any
    from llmhost.engine.local.models import builtin_installed

    header = HEADER[:-1] + MEMORY_HEADER + HEADER[-1:] if memory else HEADER
    rows = [header]
    for name, model in config.models.items():
        facts = file_facts(name, model, model_file(model))
        size = facts.size
        source = "(built-in)" if facts.source == "built-in" else facts.source
        if facts.source == "built-in" and not builtin_installed(name, config.cache_dir):
            # Its size is a constant of the file it would be: never shown for a file that is not there.
            size, source = None, f"(built-in, not installed: llmhost pull {name})"
        if model.hf_repo is not None:
            source = f"hf:{model.hf_repo}" + ("" if facts.size is not None else " (not pulled)")
        rows.append(
            (
                name,
                facts.kind.value if facts.kind_known else "unknown",
                _context(model, facts),
                _size(size),
                facts.quantization or "-",
                _template(facts),
                ",".join(model.aliases) or "-",
                *((_keep_alive(model), _memory(name, model, config)) if memory else ()),
                source,
            )
        )
    return _table(rows)


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    """Columns padded to their widest cell, the last one left as it is."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return [
        "  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[-1]]) for row in rows
    ]


STATUS_HEADER = ("NAME", "LOADED", "MEMORY", "IN-USE", "IDLE", "UNLOADS-IN")
SERVER_TIMEOUT_S = 10.0  # a metrics listener answers /models from memory: a slower one is not answering
_LOADED = {"loaded": "yes", "unloaded": "no"}  # the other states by their names: loading, unloading, remote


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds:.1f}s" if seconds < 60 else f"{seconds / 60:.0f}m" if seconds < 3600 else f"{seconds / 3600:.1f}h"


def status_rows(statuses: Sequence[ModelStatus]) -> list[str]:
    """`llmhost models --server`'s table, header first. MEMORY: what a model holds while loaded (`-`: nothing);
    IDLE: since its last use, while loaded and unused; UNLOADS-IN: its keep-alive left (`-`: in use, not loaded,
    or kept for good)."""
    rows = [STATUS_HEADER]
    for s in statuses:
        memory = _size(s.memory_bytes) if s.memory_bytes else "-"
        rows.append(
            (
                s.name,
                _LOADED.get(s.state, s.state),
                memory,
                str(s.in_use),
                _duration(s.idle_s),
                _duration(s.unload_in_s),
            )
        )
    return _table(rows)


def models_url(server: str) -> str:
    """The `/models` URL of a metrics listener given as `http://HOST:PORT` (or its `/models` URL itself)."""
    parsed = urllib.parse.urlsplit(server if "://" in server else f"http://{server}")
    path = parsed.path.rstrip("/")
    return urllib.parse.urlunsplit(
        (parsed.scheme, parsed.netloc, path if path.endswith("/models") else f"{path}/models", "", "")
    )


def read_statuses(server: str, timeout_s: float = SERVER_TIMEOUT_S) -> list[ModelStatus]:
    """A running server's model statuses from its metrics listener; `OSError` naming the URL when it cannot be
    read (unreachable, not a metrics listener)."""
    url = models_url(server)
    fix = "give --server the server's metrics-listen address, e.g. http://127.0.0.1:9464"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            answer = json.load(response)
        return [ModelStatus.from_json(entry) for entry in answer["models"]]
    except urllib.error.HTTPError as error:
        raise OSError(f"{url} answered {error.code} {error.reason}: {fix}") from None
    except urllib.error.URLError as error:
        raise OSError(f"cannot reach {url}: {error.reason}; {fix}") from None
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise OSError(f"cannot read model status from {url}: {error}; {fix}") from None
