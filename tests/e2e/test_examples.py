"""Each guest example's README commands, run as written (from the repository root) against the real model."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

import readme_output as readme
from llmhost import Host, InferencingParams, StreamChunk
from llmhost.domain.types import Constraint

from .conftest import MODEL

pytestmark = [pytest.mark.model, pytest.mark.wasm]
REPO = Path(__file__).resolve().parents[2]
# How far a log-likelihood printed by a guest run (its own process) may be from the same computation in this one:
# the printed rounding (0.0005) plus the batch- and cell-dependent arithmetic of the README's batching section.
LOGPROB_NOISE = 0.01


def readme_blocks(example: str) -> tuple[list[str], str]:
    """The example README's `sh` block (commands) and the plain block right after it (its sample output)."""
    return readme.readme_blocks(REPO / "guest-examples" / example / "README.md")


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


HELLO_PARAMS = InferencingParams(max_tokens=32, stop=("\n",), temperature=0.0, repeat_penalty=1.1)


def check_hello_output(host: Host, output: str, expected: str, prompt: str) -> None:
    """hello's output (and the command template's) has the README's shape (the prompt has 6 tokens; 32 are
    generated unless a newline came first), and is what the engine gives on this machine for the same request."""
    usage = r"usage: prompt=6 generated=(\d+)"
    readme.assert_shape(output, expected, [r"[^\n]*", r"finish-reason: (length|stop)", usage])
    text, finish, usage = output.rstrip("\n").split("\n")
    want = host.infer(MODEL, prompt, HELLO_PARAMS)
    assert text == want.text
    assert finish == f"finish-reason: {want.finish_reason.value}"
    assert usage == f"usage: prompt={want.usage.prompt_token_count} generated={want.usage.generated_token_count}"
    assert want.finish_reason.value != "length" or want.usage.generated_token_count == 32


def test_hello_readme(tmp_path: Path, llmhost_cache_dir: Path, real_host: Host) -> None:
    commands, expected = readme_blocks("hello")
    assert [c.split()[:2] for c in commands] == [[".venv/bin/llmhost", "build"], [".venv/bin/llmhost", "run"]]
    build, run = run_readme_commands(commands, tmp_path, llmhost_cache_dir)
    assert build.returncode == 0, build.stderr
    assert (tmp_path / "hello.wasm").is_file()
    assert run.returncode == 0, run.stderr
    check_hello_output(real_host, run.stdout, expected, shlex.split(commands[1])[-1])


def test_hello_js_readme(tmp_path: Path, llmhost_cache_dir: Path, real_host: Host) -> None:
    # The JavaScript hello prints what the Python one prints (the same request).
    commands, expected = readme_blocks("hello-js")
    assert [c.split()[:2] for c in commands] == [[".venv/bin/llmhost", "build"], [".venv/bin/llmhost", "run"]]
    build, run = run_readme_commands(commands, tmp_path, llmhost_cache_dir)
    assert build.returncode == 0, build.stderr
    assert (tmp_path / "hello-js.wasm").is_file()
    assert run.returncode == 0, run.stderr
    check_hello_output(real_host, run.stdout, expected, shlex.split(commands[1])[-1])


def test_continuous_readme(tmp_path: Path, llmhost_cache_dir: Path, real_host: Host) -> None:
    commands, expected = readme_blocks("continuous")
    build, run = run_readme_commands(commands, tmp_path, llmhost_cache_dir)
    assert build.returncode == 0, build.stderr
    assert run.returncode == 0, run.stderr
    # The README's shape: the prompt, five numbered items with their measured lengths, then the counts.
    item = r"{}, [^\n]* \((\d+) characters\)"
    lines = [r"What are the most popular types of vehicles\?", *(item.format(i) for i in range(5))]
    readme.assert_shape(
        run.stdout, expected, [*lines, r"tokens: \d+", r"evaluated: \d+", r"log-likelihood: -\d+\.\d{3}"]
    )
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
        printed = float(run.stdout.rsplit("log-likelihood: ", 1)[1])
        assert abs(printed - seq.log_likelihood()) <= LOGPROB_NOISE
    finally:
        seq.close()


def _source_constant(example: str, name: str) -> object:
    """A constant of an example's app.py, read from its source (not restated here)."""
    import ast

    tree = ast.parse((REPO / "guest-examples" / example / "app.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{example}/app.py has no constant {name}")


def test_classify_readme(tmp_path: Path, llmhost_cache_dir: Path, real_host: Host) -> None:
    commands, expected = readme_blocks("classify")
    build, run = run_readme_commands(commands, tmp_path, llmhost_cache_dir)
    assert build.returncode == 0, build.stderr
    assert run.returncode == 0, run.stderr
    reviews = _source_constant("classify", "REVIEWS")
    labels = _source_constant("classify", "LABELS")
    shots = _source_constant("classify", "SHOTS")
    assert isinstance(reviews, list) and isinstance(labels, list) and isinstance(shots, str)
    score = r"-?\d+\.\d\d"
    line = r"(positive|negative|neutral) +\| positive=({0}) negative=({0}) neutral=({0}) \| {1}"
    matches = readme.assert_shape(run.stdout, expected, [line.format(score, re.escape(r)) for r in reviews])
    for review, match in zip(reviews, matches, strict=True):
        label, printed = match.group(1), [float(v) for v in match.groups()[1:]]
        assert label == ["positive", "negative", "neutral"][printed.index(max(printed))]  # argmax of the scores
        # The same scores through the Python API on this machine.
        seq = real_host.open_sequence(MODEL)
        try:
            seq.append(f"{shots}Review: {review}\nSentiment:")
            want = seq.score(labels)
        finally:
            seq.close()
        assert all(abs(a - b) <= LOGPROB_NOISE for a, b in zip(printed, want, strict=True)), (printed, want)


def _search(host: Host, prompt: str, width: int) -> tuple[str, float]:
    """beam-search's program (guest-examples/beam-search/app.py) through the Python API: its text and score."""
    from llmhost.domain.types import BeamParams

    steps, max_tokens = _source_constant("beam-search", "STEPS"), _source_constant("beam-search", "MAX_TOKENS")
    assert isinstance(steps, list) and isinstance(max_tokens, int)
    first = host.open_sequence(MODEL)
    first.append(prompt)
    candidates = [(first, 0.0)]
    for step in steps:
        pool = []
        for seq, total in candidates:
            seq.append(step)
            start = len(seq.text())
            params = BeamParams(width=width, max_tokens=max_tokens, stop=("\n",))
            for child, value in seq.beam_search(params):
                if child.text()[start:].strip():
                    pool.append((child, total + value))
                else:
                    child.close()
            seq.close()
        pool.sort(key=lambda pair: -pair[1])
        for seq, _ in pool[width:]:
            seq.close()
        candidates = pool[:width]
    text, total = candidates[0][0].text(), candidates[0][1]
    for seq, _ in candidates:
        seq.close()
    return text, total


def test_beam_search_readme(tmp_path: Path, llmhost_cache_dir: Path, real_host: Host) -> None:
    commands, expected = readme_blocks("beam-search")
    build, run = run_readme_commands(commands, tmp_path, llmhost_cache_dir)
    assert build.returncode == 0, build.stderr
    assert run.returncode == 0, run.stderr
    prompt = _source_constant("beam-search", "PROMPT")
    width = _source_constant("beam-search", "WIDTH")
    assert isinstance(prompt, str) and isinstance(width, int)
    program = [re.escape(prompt.rstrip("\n")), r"1\.[^\n]*", r"2\.[^\n]*", r"3\.[^\n]*"]
    header = r"== {}: joint log-likelihood (-\d+\.\d{{3}})"
    lines = [header.format("greedy"), *program, header.format(f"beam width {width}"), *program]
    readme.assert_shape(run.stdout, expected, lines)
    # Which of the two scores higher is not fixed: a beam may prune the greedy path, and the scores move with the
    # CPU's rounding (on an AVX2 machine the greedy program scored higher). What holds on any machine: the same
    # search through the Python API on this machine writes the same programs with the same scores.
    printed = run.stdout.split("== ")[1:]
    for section, size in zip(printed, (1, width), strict=True):
        text, total = _search(real_host, prompt, size)
        header_line, body = section.split("\n", 1)
        assert body == text + "\n"
        assert abs(float(header_line.rsplit(" ", 1)[1]) - total) <= LOGPROB_NOISE


def test_stream_readme(tmp_path: Path, llmhost_cache_dir: Path, real_host: Host) -> None:
    commands, expected = readme_blocks("stream")
    build, run = run_readme_commands(commands, tmp_path, llmhost_cache_dir)
    assert build.returncode == 0, build.stderr
    assert run.returncode == 0, run.stderr
    # The README's shape (an 11-token prompt; 40 tokens unless a newline came first, in at most as many chunks).
    usage = r"usage: prompt=11 generated=(\d+) chunks=(\d+)"
    readme.assert_shape(run.stdout, expected, [r"[^\n]*", r"finish-reason: (length|stop)", usage])
    prompt = shlex.split(commands[1])[-1]
    params = InferencingParams(max_tokens=40, stop=("\n",), temperature=0.0, repeat_penalty=1.1)
    chunks = [e for e in real_host.infer_stream(MODEL, prompt, params) if isinstance(e, StreamChunk)]
    want = real_host.infer(MODEL, prompt, params)
    text, finish, usage = run.stdout.rstrip("\n").split("\n")
    assert text == want.text == "".join(c.text for c in chunks)
    assert finish == f"finish-reason: {want.finish_reason.value}"
    # A chunk holds all the text ready when the guest asks (one token's, or a burst's): how many depends on timing.
    prefix = f"usage: prompt={want.usage.prompt_token_count} generated={want.usage.generated_token_count} chunks="
    assert usage.startswith(prefix) and 1 <= int(usage.removeprefix(prefix)) <= want.usage.generated_token_count
    assert want.finish_reason.value != "length" or want.usage.generated_token_count == 40


def test_extract_readme(tmp_path: Path, llmhost_cache_dir: Path, real_host: Host) -> None:
    import json

    import jsonschema

    commands, expected = readme_blocks("extract")
    build, run = run_readme_commands(commands, tmp_path, llmhost_cache_dir)
    assert build.returncode == 0, build.stderr
    assert run.returncode == 0, run.stderr
    # The README's shape: one object with the schema's four fields, each on its line, complete.
    fields = [r'  "name": "[^"]*",', r'  "age": \d+,', r'  "city": "[^"]*",', r'  "occupation": "[^"]*"']
    readme.assert_shape(run.stdout, expected, ["{", *fields, "}"])
    assert "finish-reason: stop" in run.stderr
    # The printed object validates against the schema the guest sent (read from its source, not restated here).
    schema = _source_constant("extract", "SCHEMA")
    jsonschema.validate(json.loads(run.stdout), schema)
    # The same request through the Python API on this machine gives the same object.
    text = shlex.split(commands[1])[-1]
    prompt = (
        "Extract the person described in the text as JSON with the fields name, age, city, occupation.\n"
        f"Text: {text}\nJSON: "
    )
    params = InferencingParams(
        max_tokens=80,
        repeat_penalty=1.0,
        repeat_penalty_last_n_token_count=0,
        temperature=0.0,
        top_k=0,
        top_p=1.0,
        constraint=Constraint.json_schema(json.dumps(schema)),
    )
    want = real_host.infer(MODEL, prompt, params)
    assert want.finish_reason.value == "stop"
    assert json.loads(run.stdout) == json.loads(want.text)


def _greedy_with(host: Host, expert: Any, amateur: Any | None, contrastive: dict[str, Any]) -> str:
    """The contrastive example's decoding loop through the Python API (same reads, same rule, same stop)."""
    import math

    top, weak_top, alpha = contrastive["TOP"], contrastive["AMATEUR_TOP"], contrastive["ALPHA"]
    seen = len(expert)
    data = b""
    for _ in range(contrastive["MAX_TOKENS"]):
        candidates = [(c.token_id, c.logprob, c.bytes) for c in expert.next_token_logprobs(top)]
        if amateur is not None:
            ids = expert.token_ids()
            amateur.append_tokens(ids[seen:])
            seen = len(ids)
            weak = {c.token_id: c.logprob for c in amateur.next_token_logprobs(weak_top)}
            floor = min(weak.values())
            plausible = candidates[0][1] + math.log(alpha)
            candidates = [(t, lp - weak.get(t, floor), p) for t, lp, p in candidates if lp >= plausible]
        token, _, piece = max(candidates, key=lambda c: c[1])
        if not piece:
            break
        expert.append_tokens([token])
        data += piece
        text = data.decode("utf-8", "ignore")
        if "\n" in text:
            return text[: text.index("\n")]
    return data.decode("utf-8", "ignore")


def test_contrastive_readme(tmp_path: Path, llmhost_cache_dir: Path, real_host: Host) -> None:
    commands, expected = readme_blocks("contrastive")
    build, run = run_readme_commands(commands, tmp_path, llmhost_cache_dir)
    assert build.returncode == 0, build.stderr
    assert run.returncode == 0, run.stderr
    prompt = _source_constant("contrastive", "PROMPT")
    assert isinstance(prompt, str)
    lines = [re.escape(line) for line in prompt.split("\n")]
    matches = readme.assert_shape(
        run.stdout, expected, [*lines, r"greedy \(expert alone\):(.*)", r"contrastive \(expert - amateur '(.*)'\):(.*)"]
    )
    constants = {name: _source_constant("contrastive", name) for name in ("TOP", "AMATEUR_TOP", "ALPHA", "MAX_TOKENS")}
    amateur_prompt = prompt.rsplit("\n", 1)[-1]
    assert matches[-1].group(1) == amateur_prompt
    # The same decoding through the Python API on this machine writes the same two texts.
    texts = []
    for contrastive in (False, True):
        expert = real_host.open_sequence(MODEL)
        amateur = real_host.open_sequence(MODEL) if contrastive else None
        try:
            expert.append(prompt)
            if amateur is not None:
                amateur.append(amateur_prompt)
            texts.append(_greedy_with(real_host, expert, amateur, constants))
        finally:
            expert.close()
            if amateur is not None:
                amateur.close()
    assert matches[-2].group(1) == texts[0]
    assert matches[-1].group(2) == texts[1]
    assert texts[0] != texts[1]  # the contrast changed the choice somewhere


def test_rag_readme(tmp_path: Path, llmhost_cache_dir: Path, real_host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    """rag: the passages it used are the nearest ones by the Python API's embeddings (all-minilm-l6-v2), with
    their cosines; its answer is `infer` of the same prompt on this machine. The first run indexes the corpus into
    the key-value store `default` (in the data directory), the second reuses that index and prints the same."""
    monkeypatch.setenv("LLMHOST_DATA_DIR", str(tmp_path / "data"))  # a fresh store: the first run indexes
    commands, expected = readme_blocks("rag")
    assert [c.split()[1:4] for c in commands] == [["build", "guest-examples/rag", "-o"]] + [
        ["-c", "guest-examples/rag/llmhost.toml", "run"]
    ] * 2
    build, *runs = run_readme_commands(commands, tmp_path, llmhost_cache_dir)
    assert build.returncode == 0, build.stderr
    assert all(run.returncode == 0 for run in runs), [run.stderr for run in runs]
    assert (tmp_path / "data" / "kv" / "default.db").is_file()  # SQLite in the data directory
    corpus, question = _source_constant("rag", "CORPUS"), _source_constant("rag", "QUESTION")
    top_k, prompt, params = (_source_constant("rag", name) for name in ("TOP_K", "PROMPT", "PARAMS"))
    assert isinstance(corpus, list) and isinstance(question, str) and isinstance(top_k, int)
    assert isinstance(prompt, str) and isinstance(params, dict)
    used = r"used \[(\d+)\] (-?\d\.\d{3}) (.*)"
    built = rf"index: built and stored in key-value store 'default' \({len(corpus)} passages\)"
    reused = rf"index: reused from key-value store 'default' \({len(corpus)} passages\)"
    shape = [built, *[used] * top_k, r"answer:.*", reused, *[used] * top_k, r"answer:.*"]
    matches = readme.assert_shape(runs[0].stdout + runs[1].stdout, expected, shape)
    first, second = runs[0].stdout.split("\n", 1)[1], runs[1].stdout.split("\n", 1)[1]
    assert second == first  # the reused index gives the same passages, scores and answer
    matches = matches[1 : 2 + top_k]
    passages = real_host.embeddings("all-minilm-l6-v2", corpus).embeddings
    query = real_host.embeddings("all-minilm-l6-v2", [question]).embeddings[0]
    scores = [sum(a * b for a, b in zip(query, p, strict=True)) for p in passages]
    best = sorted(range(len(corpus)), key=lambda i: -scores[i])[:top_k]
    assert [int(m.group(1)) for m in matches[:top_k]] == best
    for match in matches[:top_k]:
        index = int(match.group(1))
        assert match.group(3) == corpus[index] and abs(float(match.group(2)) - scores[index]) <= 0.002
    context = "\n".join(f"- {corpus[i]}" for i in best)
    want = real_host.infer(
        MODEL,
        prompt.format(context=context, question=question),
        InferencingParams(max_tokens=params["max_tokens"], temperature=0.0, stop=tuple(params["stop"])),
    )
    assert matches[-1].group(0) == f"answer:{want.text}"
