"""Each guest example's README commands, run as written (from the repository root) against the real model."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from llmhost import Host, InferencingParams, StreamChunk

from .conftest import MODEL

pytestmark = [pytest.mark.model, pytest.mark.wasm]
REPO = Path(__file__).resolve().parents[2]


def readme_blocks(example: str) -> tuple[list[str], str]:
    """The README's `sh` block (commands) and the plain block right after it (expected output)."""
    text = (REPO / "guest-examples" / example / "README.md").read_text()
    commands = re.search(r"```sh\n(.*?)```", text, re.S)
    output = re.search(r"```sh\n.*?```.*?```\n(.*?)```", text, re.S)
    assert commands and output, f"{example}/README.md needs a ```sh block and an output block after it"
    return [line for line in commands.group(1).splitlines() if line.strip()], output.group(1)


def run_readme_commands(commands: list[str], workdir: Path, cache_dir: Path) -> list[subprocess.CompletedProcess[str]]:
    env = {k: v for k, v in os.environ.items() if k != "LLMHOST_CONFIG"}
    env["LLMHOST_CACHE_DIR"] = str(cache_dir)
    results = []
    for line in commands:
        argv = shlex.split(line)
        argv[0] = str(REPO / argv[0])  # `.venv/bin/llmhost`, relative to the repository root
        argv = [a if not a.startswith("guest-examples/") else str(REPO / a) for a in argv]
        results.append(subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True, timeout=600))
    return results


def test_hello_readme(tmp_path: Path, llmhost_cache_dir: Path, real_host: Host) -> None:
    commands, expected = readme_blocks("hello")
    assert [c.split()[:2] for c in commands] == [[".venv/bin/llmhost", "build"], [".venv/bin/llmhost", "run"]]
    build, run = run_readme_commands(commands, tmp_path, llmhost_cache_dir)
    assert build.returncode == 0, build.stderr
    assert (tmp_path / "hello.wasm").is_file()
    assert run.returncode == 0, run.stderr
    text, finish, usage = run.stdout.rstrip("\n").split("\n")
    # The README shows the real output, and the guest printed what the engine gives for the same request.
    assert run.stdout == expected
    prompt = shlex.split(commands[1])[-1]
    want = real_host.infer(
        MODEL, prompt, InferencingParams(max_tokens=32, stop=("\n",), temperature=0.0, repeat_penalty=1.1)
    )
    assert text == want.text
    assert finish == f"finish-reason: {want.finish_reason.value}"
    assert usage == f"usage: prompt={want.usage.prompt_token_count} generated={want.usage.generated_token_count}"


def test_continuous_readme(tmp_path: Path, llmhost_cache_dir: Path, real_host: Host) -> None:
    commands, expected = readme_blocks("continuous")
    build, run = run_readme_commands(commands, tmp_path, llmhost_cache_dir)
    assert build.returncode == 0, build.stderr
    assert run.returncode == 0, run.stderr
    assert run.stdout == expected
    # The same program through the Python API gives the same text, and the costs the guest reports.
    params = InferencingParams(max_tokens=24, stop=("\n",), temperature=0.0, repeat_penalty=1.1)
    seq = real_host.open_sequence(MODEL)
    try:
        seq.append("What are the most popular types of vehicles?\n")
        for i in range(5):
            seq.append(f"{i}, ")
            name = seq.generate(params).text
            seq.append(f" ({len(name.strip())} characters)\n")
        assert run.stdout.startswith(seq.text())
        assert f"tokens: {len(seq)}\nevaluated: {seq.evaluated_token_count()}\n" in run.stdout
        assert seq.evaluated_token_count() <= 1.05 * len(seq)
    finally:
        seq.close()


def test_classify_readme(tmp_path: Path, llmhost_cache_dir: Path) -> None:
    commands, expected = readme_blocks("classify")
    build, run = run_readme_commands(commands, tmp_path, llmhost_cache_dir)
    assert build.returncode == 0, build.stderr
    assert run.returncode == 0, run.stderr
    assert run.stdout == expected
    for line in run.stdout.splitlines():  # the chosen label is the argmax of the printed scores
        label, scores, _ = (part.strip() for part in line.split("|"))
        values = {name: float(value) for name, value in (s.split("=") for s in scores.split())}
        assert label == max(values, key=lambda name: values[name])


def test_beam_search_readme(tmp_path: Path, llmhost_cache_dir: Path) -> None:
    commands, expected = readme_blocks("beam-search")
    build, run = run_readme_commands(commands, tmp_path, llmhost_cache_dir)
    assert build.returncode == 0, build.stderr
    assert run.returncode == 0, run.stderr
    assert run.stdout == expected
    greedy, beam = (float(v) for v in re.findall(r"joint log-likelihood (-?[0-9.]+)", run.stdout))
    assert beam >= greedy


def test_stream_readme(tmp_path: Path, llmhost_cache_dir: Path, real_host: Host) -> None:
    commands, expected = readme_blocks("stream")
    build, run = run_readme_commands(commands, tmp_path, llmhost_cache_dir)
    assert build.returncode == 0, build.stderr
    assert run.returncode == 0, run.stderr
    assert run.stdout == expected
    prompt = shlex.split(commands[1])[-1]
    params = InferencingParams(max_tokens=40, stop=("\n",), temperature=0.0, repeat_penalty=1.1)
    chunks = [e for e in real_host.infer_stream(MODEL, prompt, params) if isinstance(e, StreamChunk)]
    want = real_host.infer(MODEL, prompt, params)
    text, finish, usage = run.stdout.rstrip("\n").split("\n")
    assert text == want.text == "".join(c.text for c in chunks)
    assert finish == f"finish-reason: {want.finish_reason.value}"
    assert usage == (
        f"usage: prompt={want.usage.prompt_token_count} generated={want.usage.generated_token_count} "
        f"chunks={len(chunks)}"
    )


def test_extract_readme(tmp_path: Path, llmhost_cache_dir: Path) -> None:
    import ast
    import json

    import jsonschema

    commands, expected = readme_blocks("extract")
    build, run = run_readme_commands(commands, tmp_path, llmhost_cache_dir)
    assert build.returncode == 0, build.stderr
    assert run.returncode == 0, run.stderr
    assert run.stdout == expected
    assert "finish-reason: stop" in run.stderr
    # The printed object validates against the schema the guest sent (read from its source, not restated here).
    source = (REPO / "guest-examples" / "extract" / "app.py").read_text()
    literal = source.split("SCHEMA = ", 1)[1].split("\nDEFAULT_TEXT", 1)[0]
    jsonschema.validate(json.loads(run.stdout), ast.literal_eval(literal))
