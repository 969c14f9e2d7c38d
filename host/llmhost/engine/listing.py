"""`llmhost models`' table: one row per configured model, from the config and each GGUF's header (engine.kinds);
with `--memory`, each local model's keep-alive and estimated footprint too."""

from __future__ import annotations

from llmhost.config import KEEP_ALIVE_FOREVER, HostConfig, ModelConfig
from llmhost.domain.kinds import ModelKind
from llmhost.engine.kinds import FileFacts, file_facts

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
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    return [
        "  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[-1]]) for row in rows
    ]
