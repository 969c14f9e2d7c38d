#!/usr/bin/env bash
# Build (once) and install llama-cpp-python with flags that work on this machine kind.
#
# Why: PyPI ships only the source package; the default build uses -march=native, and on CPUs that report AMX
# the first llama_decode segfaults in ggml_backend_amx_mul_mat. pip's wheel cache ignores CMAKE_ARGS, so a
# wheel built with other flags would be reused silently: we keep our own cache keyed by version + Python + flags.
#
# Usage: scripts/llama-wheel.sh PYTHON [cpu|cuda]
#   PYTHON  the interpreter (usually a venv's bin/python) to install into
#   cpu     (default) explicit x86 ISA flags instead of -march=native; AVX-512 only where this CPU has it
#   cuda    -DGGML_CUDA=on (needs nvcc); then set `n-gpu-layers = -1` in the model config
# Environment: CMAKE_ARGS (replaces the flags above), LLAMA_CPP_PYTHON_VERSION (default 0.3.36),
#   LLMHOST_WHEEL_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/llmhost/wheels).
# A second run with the same key installs the cached wheel (or does nothing when it is already installed).
set -euo pipefail
python=${1:?usage: scripts/llama-wheel.sh PYTHON [cpu|cuda]}
variant=${2:-cpu}
version=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
cache_root=${LLMHOST_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/llmhost/wheels}

case "$variant" in
  cpu | cuda) ;;
  *) echo "llama-wheel: unknown variant '$variant' (expected cpu or cuda)" >&2; exit 2 ;;
esac

if [ -z "${CMAKE_ARGS:-}" ]; then
  common="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
  if [ "$variant" = cuda ]; then
    CMAKE_ARGS="$common -DGGML_CUDA=on"
  else
    # Explicit ISA flags instead of -march=native (which turns AMX on); AVX-512 only where the CPU has it.
    CMAKE_ARGS="$common -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
    if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
      CMAKE_ARGS="$CMAKE_ARGS -DGGML_AVX512=ON"
      grep -qw avx512_vnni /proc/cpuinfo && CMAKE_ARGS="$CMAKE_ARGS -DGGML_AVX512_VNNI=ON"
      grep -qw avx512_bf16 /proc/cpuinfo && CMAKE_ARGS="$CMAKE_ARGS -DGGML_AVX512_BF16=ON"
    fi
    grep -qw avx_vnni /proc/cpuinfo 2>/dev/null && CMAKE_ARGS="$CMAKE_ARGS -DGGML_AVX_VNNI=ON"
  fi
fi
pyver=$("$python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
# The key (and so the cache directory name) must stay stable across edits of this script: it names built wheels.
key=$(printf '%s|%s|%s' "$version" "$pyver" "$CMAKE_ARGS" | sha256sum | cut -c1-16)
dir="$cache_root/llama-cpp-python-$version-$pyver-$key"

# One build per key at a time: a second caller (another `make install`, CI) waits, then finds the wheel cached.
mkdir -p "$cache_root"
if command -v flock >/dev/null 2>&1; then
  exec 9>"$dir.lock"
  flock 9
fi

if ! ls "$dir"/llama_cpp_python-*.whl >/dev/null 2>&1; then
  if [ "$variant" = cuda ] && ! command -v nvcc >/dev/null 2>&1 && [ -z "${CUDACXX:-}" ]; then
    echo "llama-wheel: the cuda variant needs nvcc on PATH (or CUDACXX set to it)" >&2
    exit 1
  fi
  echo "llama-wheel: building llama-cpp-python $version (7-9 min on 2 cores) with CMAKE_ARGS=$CMAKE_ARGS" >&2
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
  CMAKE_ARGS="$CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
    "$python" -m pip wheel --no-deps --no-cache-dir -w "$dir.tmp" "llama-cpp-python==$version"
  printf '%s\n' "$CMAKE_ARGS" > "$dir.tmp/CMAKE_ARGS"
  rm -rf "$dir" && mv "$dir.tmp" "$dir"
else
  echo "llama-wheel: using cached wheel $dir" >&2
fi
wheel=$(ls "$dir"/llama_cpp_python-*.whl | head -n1)
# The installed copy records the key it was built with (WHEEL_KEY in its dist-info): reinstall only on a mismatch,
# with --force-reinstall --no-deps to replace a differently-built copy even at the same version.
installed=$("$python" -c 'import importlib.metadata as m; print(m.distribution("llama_cpp_python").read_text("WHEEL_KEY") or "")' 2>/dev/null || true)
if [ "$installed" != "$key" ]; then
  "$python" -m pip install --quiet --no-deps --force-reinstall "$wheel"
  "$python" -m pip install --quiet "numpy>=1.20" "typing-extensions>=4.5" "diskcache>=5.6.1" "jinja2>=2.11.3"
  "$python" - "$key" <<'PY'
import importlib.metadata as m, sys, pathlib
d = m.distribution("llama_cpp_python")
pathlib.Path(d._path, "WHEEL_KEY").write_text(sys.argv[1])
PY
else
  echo "llama-wheel: llama-cpp-python $version ($variant, key $key) is already installed in $python" >&2
fi
