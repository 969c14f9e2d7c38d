"""`make install-cuda` builds llama-cpp-python for the GPU that is there (issue 51): the compute capability
nvidia-smi reports ("9.0" -> 90), else `native`, or CUDA_ARCHITECTURES for another machine's GPU; and the wheel
cache key (scripts/llama-wheel.sh) changes with it, so a wheel built for one GPU is never installed for another.
Checked through `make -n` (prints the commands, runs none) and the script's dry run, with a stand-in nvidia-smi on
PATH: nothing is built."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "llama-wheel.sh"


def environment(tmp_path: Path, compute_caps: list[str] | None, **extra: str) -> dict[str, str]:
    """This process's environment without make's and the build's variables; `compute_caps`: what a stand-in
    nvidia-smi prints, one GPU a line (None: it fails, as where no driver is installed)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    if compute_caps is None:
        smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    else:
        expected = "--query-gpu=compute_cap --format=csv,noheader"
        lines = "".join(f"{cap}\\n" for cap in compute_caps)
        smi.write_text(f'#!/bin/sh\n[ "$*" = "{expected}" ] || exit 2\nprintf "{lines}"\n')
    smi.chmod(0o755)
    drop = {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "CUDA_ARCHITECTURES", "CMAKE_ARGS", "LLAMA_VARIANT"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return env | {"PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"} | extra


def make_dry_run(tmp_path: Path, env: dict[str, str], *args: str) -> list[str]:
    """`make -n install-cuda ARGS` against a venv that does not exist yet: the command lines it would run."""
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", "-C", str(REPO), "install-cuda", f"VENV={tmp_path / 'venv'}", *args],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout.splitlines()


def wheel_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if "scripts/llama-wheel.sh" in line and "--cuda-architectures" not in line]


def wheel_key(tmp_path: Path, env: dict[str, str]) -> dict[str, str]:
    """scripts/llama-wheel.sh's dry run for the cuda variant: its cache key and CMAKE_ARGS, nothing built."""
    done = subprocess.run(
        ["bash", str(SCRIPT), sys.executable, "cuda"],
        env=env | {"LLAMA_WHEEL_DRY_RUN": "1", "LLMHOST_WHEEL_CACHE": str(tmp_path / "wheels")},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return dict(line.split("=", 1) for line in done.stdout.splitlines())


def test_install_cuda_builds_for_the_gpu_nvidia_smi_reports(tmp_path: Path) -> None:
    lines = wheel_lines(make_dry_run(tmp_path, environment(tmp_path, ["9.0"])))
    assert lines == [f"CUDA_ARCHITECTURES='90' bash scripts/llama-wheel.sh {tmp_path / 'venv'}/bin/python cuda"]


def test_several_gpus_give_their_distinct_architectures(tmp_path: Path) -> None:
    lines = wheel_lines(make_dry_run(tmp_path, environment(tmp_path, ["9.0", "8.6", "9.0"])))
    assert len(lines) == 1 and lines[0].startswith("CUDA_ARCHITECTURES='86;90' bash scripts/llama-wheel.sh ")


def test_without_a_gpu_the_build_targets_native(tmp_path: Path) -> None:
    lines = wheel_lines(make_dry_run(tmp_path, environment(tmp_path, None)))
    assert len(lines) == 1 and lines[0].startswith("CUDA_ARCHITECTURES='native' bash scripts/llama-wheel.sh ")


def test_cuda_architectures_overrides_the_gpu_that_is_there(tmp_path: Path) -> None:
    on_the_command_line = make_dry_run(tmp_path, environment(tmp_path, ["9.0"]), "CUDA_ARCHITECTURES=86")
    in_the_environment = make_dry_run(tmp_path, environment(tmp_path, ["9.0"], CUDA_ARCHITECTURES="86"))
    for lines in (on_the_command_line, in_the_environment):
        found = wheel_lines(lines)
        assert len(found) == 1 and found[0].startswith("CUDA_ARCHITECTURES='86' bash scripts/llama-wheel.sh ")


def test_the_wheel_cache_key_changes_with_the_architectures(tmp_path: Path) -> None:
    detected = wheel_key(tmp_path, environment(tmp_path, ["9.0"]))
    given_90 = wheel_key(tmp_path, environment(tmp_path, None, CUDA_ARCHITECTURES="90"))
    given_86 = wheel_key(tmp_path, environment(tmp_path, ["9.0"], CUDA_ARCHITECTURES="86"))
    assert detected["CMAKE_ARGS"].endswith(" -DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90")
    assert given_86["CMAKE_ARGS"].endswith(" -DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=86")
    assert detected == given_90  # the same flags, the same cached wheel, however they were chosen
    assert given_86["key"] != detected["key"] and given_86["wheel_dir"] != detected["wheel_dir"]
    assert not (tmp_path / "wheels").exists()  # a dry run builds nothing


def test_a_bad_architecture_list_is_refused_naming_the_variable(tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", str(SCRIPT), sys.executable, "cuda"],
        env=environment(tmp_path, ["9.0"], CUDA_ARCHITECTURES="9.0", LLAMA_WHEEL_DRY_RUN="1"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "CUDA_ARCHITECTURES='9.0' is not a CUDA architecture list" in done.stderr
    assert "90 for compute capability 9.0" in done.stderr
