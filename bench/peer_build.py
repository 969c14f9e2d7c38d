"""Build llama.cpp's own `llama-server` once, from the llama.cpp that our llama-cpp-python sdist vendors, with the
ISA flags of our wheel (scripts/llama-wheel.sh): the peer that bench/peer_server.py measures `llmhost serve` against.

Cached in ~/.cache/llmhost/llama-server/<version>-<key>/ (key: version + the wheel's CMAKE_ARGS); a second call
reuses it. The sdist comes from pip's own cache or `pip download` (PyPI ships llama-cpp-python as source only).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VERSION = os.environ.get("LLAMA_CPP_PYTHON_VERSION", "0.3.36")
# What `llama-server` needs beyond the wheel's flags: the server and its tools, no UI download (the build would
# fetch prebuilt web assets from a hub) and no network clients; Release, as scikit-build-core builds the wheel.
SERVER_ARGS = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_CURL=OFF",
    "-DBUILD_SHARED_LIBS=OFF",  # one self-contained binary: nothing to find at run time once cached
]


def cache_root() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "llmhost" / "llama-server"


def wheel_cmake_args() -> list[str]:
    """The CMAKE_ARGS our wheel is built with, from scripts/llama-wheel.sh itself (its dry run)."""
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "llama-wheel.sh"), sys.executable],
        env=dict(os.environ, LLAMA_WHEEL_DRY_RUN="1", LLAMA_CPP_PYTHON_VERSION=VERSION),
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    for line in out.splitlines():
        if line.startswith("CMAKE_ARGS="):
            return line.removeprefix("CMAKE_ARGS=").split()
    raise RuntimeError("scripts/llama-wheel.sh printed no CMAKE_ARGS")


def sdist(folder: Path) -> Path:
    """llama-cpp-python's sdist: already in `folder`, else from pip (its cache, or PyPI)."""
    name = f"llama_cpp_python-{VERSION}.tar.gz"
    if (folder / name).is_file():
        return folder / name
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps"]
        + ["-d", str(folder), f"llama-cpp-python=={VERSION}"],
        check=True,
        stdout=sys.stderr,
    )
    return folder / name


def llama_server() -> Path:
    """The cached `llama-server` binary, built on first use (~10 min on 2 cores: ggml, llama, common, server)."""
    flags = wheel_cmake_args() + SERVER_ARGS
    key = hashlib.sha256("|".join([VERSION, *flags]).encode()).hexdigest()[:16]
    target = cache_root() / f"{VERSION}-{key}"
    binary = target / "bin" / "llama-server"
    if binary.is_file():
        return binary
    source = sdist(cache_root() / "sdist")
    with tempfile.TemporaryDirectory(dir=cache_root()) as scratch:
        with tarfile.open(source) as archive:
            members = [m for m in archive.getmembers() if "/vendor/llama.cpp/" in m.name + "/"]
            archive.extractall(scratch, members=members, filter="data")
        src = next(Path(scratch).glob("*/vendor/llama.cpp"))
        build = Path(scratch) / "build"
        print(f"peer_server: building llama-server ({VERSION}) with {' '.join(flags)}", file=sys.stderr)
        subprocess.run(["cmake", "-S", str(src), "-B", str(build), *flags], check=True, stdout=sys.stderr)
        jobs = str(max(1, min(2, os.cpu_count() or 1)))
        subprocess.run(
            ["cmake", "--build", str(build), "--target", "llama-server", "-j", jobs], check=True, stdout=sys.stderr
        )
        staged = Path(scratch) / "out"
        (staged / "bin").mkdir(parents=True)
        shutil.copy2(build / "bin" / "llama-server", staged / "bin" / "llama-server")
        (staged / "CMAKE_ARGS").write_text(" ".join(flags) + "\n")
        shutil.rmtree(target, ignore_errors=True)
        staged.rename(target)
    return binary


if __name__ == "__main__":
    print(llama_server())
