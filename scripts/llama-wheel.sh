#!/usr/bin/env bash
# Build (once) and install llama-cpp-python with flags that work on this machine kind.
#
# Why: PyPI ships only the source package; the default build uses -march=native, and on CPUs that report AMX
# the first llama_decode segfaults in ggml_backend_amx_mul_mat. pip's wheel cache ignores CMAKE_ARGS, so a
# wheel built with other flags would be reused silently: we keep our own cache keyed by version + Python + flags.
#
# Usage: scripts/llama-wheel.sh PYTHON [cpu|cuda]
#        scripts/llama-wheel.sh --cuda-architectures   (prints what a cuda build would target here, e.g. 90)
#   PYTHON  the interpreter (usually a venv's bin/python) to install into
#   cpu     (default) explicit x86 ISA flags instead of -march=native; AVX-512 only where this CPU has it
#   cuda    -DGGML_CUDA=on (needs nvcc), for this machine's GPUs only (see CUDA_ARCHITECTURES); then set
#           `n-gpu-layers = -1` in the model config
# Environment: CMAKE_ARGS (replaces the flags above), LLAMA_CPP_PYTHON_VERSION (default 0.3.36),
#   LLMHOST_WHEEL_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/llmhost/wheels),
#   CUDA_ARCHITECTURES (cuda: CMAKE_CUDA_ARCHITECTURES, e.g. 86 or "80;90" to build for another machine; default:
#   the compute capabilities nvidia-smi reports here, "9.0" -> 90, else `native`),
#   LLAMA_WHEEL_DRY_RUN=1 (print the cache key and CMAKE_ARGS, build and install nothing).
# A second run with the same key installs the cached wheel (or does nothing when it is already installed).
set -euo pipefail

# GGML_NATIVE=OFF (below) also turns off llama.cpp's own detection of the GPU's architecture: without an explicit
# list a CUDA 13 build compiles 86, 89, 120a and 121a and PTX for 75, 80 and 90 (an H100 then JIT-compiles the 90
# PTX at first use). So build for the GPUs that are here: nvidia-smi's compute capabilities, distinct, "9.0" -> 90.
detect_cuda_architectures() {
  local caps
  caps=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d ' .\r' | grep -E '^[0-9]+$' \
    | sort -un | paste -sd';') || caps=
  echo "${caps:-native}"
}
if [ "${1:-}" = --cuda-architectures ]; then
  detect_cuda_architectures
  exit 0
fi
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
    archs=${CUDA_ARCHITECTURES:-$(detect_cuda_architectures)}
    arch='([0-9]+[af]?(-real|-virtual)?)'
    if ! [[ "$archs" =~ ^(native|all|all-major|$arch(\;$arch)*)$ ]]; then
      echo "llama-wheel: CUDA_ARCHITECTURES='$archs' is not a CUDA architecture list" \
        "(e.g. 90 for compute capability 9.0, \"86;90\", or native)" >&2
      exit 2
    fi
    CMAKE_ARGS="$common -DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=$archs"
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
if [ -n "${LLAMA_WHEEL_DRY_RUN:-}" ]; then
  printf 'key=%s\nCMAKE_ARGS=%s\nwheel_dir=%s\n' "$key" "$CMAKE_ARGS" "$dir"
  exit 0
fi

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
  echo "llama-wheel: building llama-cpp-python $version (cpu: 7-9 min on 2 cores; cuda, one architecture: ~5 min" \
    "on 16 cores) with CMAKE_ARGS=$CMAKE_ARGS" >&2
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
