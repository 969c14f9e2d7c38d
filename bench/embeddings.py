"""Embeddings (part of `make bench`): llmhost beside llama-cpp-python, and retrieval accuracy per built-in model.

- Speed: 1,000 short texts embedded by `Host.embeddings` and by llama-cpp-python's `Llama.embed` (its own packed
  batches: `embedding=True`, `n_seq_max=64`, mean pooling, the same GGUF, threads and batch size), per model, in
  turn, median of ROUNDS. The target: llmhost's time at most Llama.embed's.
- Retrieval: top-1 accuracy on the project's question → passage set (bench/data/retrieval.json): each question's
  nearest passage by cosine must be its own.

Standalone: `python bench/embeddings.py` prints the section and replaces it in docs/benchmarks.md.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from llmhost import Host, HostConfig
from llmhost.config import ModelConfig
from llmhost.domain.limits import BUILTIN_MODELS, DEFAULT_MODEL, MINILM_MODEL
from llmhost.engine.local.models import resolve_model_path

ROOT = Path(__file__).resolve().parents[1]
HEADING = "## Embeddings (bench/embeddings.py)"
RETRIEVAL = ROOT / "bench" / "data" / "retrieval.json"
TEXTS = 1000
ROUNDS = 3
SPEED_MODELS = (DEFAULT_MODEL, MINILM_MODEL)
_TOPICS = ("the river", "a new bridge", "the old library", "winter storms", "the harvest", "a city council vote")


def short_texts(n: int = TEXTS) -> list[str]:
    """`n` distinct short texts (10-20 tokens each)."""
    topics = _TOPICS
    return [f"Note {i}: a short remark about {topics[i % len(topics)]}, written on day {i % 31 + 1}." for i in range(n)]


def retrieval_set() -> tuple[list[str], list[str]]:
    """(questions, passages): question i's answer is passage i."""
    pairs = json.loads(RETRIEVAL.read_text())
    return [p["question"] for p in pairs], [p["passage"] for p in pairs]


def top1(questions: list[list[float]], passages: list[list[float]]) -> int:
    """How many questions have their own passage (same index) as the nearest by cosine (vectors are unit length)."""
    import numpy as np

    scores = np.asarray(questions) @ np.asarray(passages).T
    return int((scores.argmax(axis=1) == np.arange(len(questions))).sum())


def _llama_embed(path: Path, threads: int, batch: int) -> Any:
    from llama_cpp import LLAMA_POOLING_TYPE_MEAN, Llama

    return Llama(
        str(path),
        embedding=True,
        n_seq_max=64,
        n_ctx=batch,
        n_batch=batch,
        n_ubatch=batch,
        n_threads=threads,
        n_threads_batch=threads,
        pooling_type=LLAMA_POOLING_TYPE_MEAN,
        verbose=False,
    )


def run(cache_dir: Path, threads: int) -> list[str]:
    config = ModelConfig(threads=threads, context_length=512)
    texts = short_texts()
    lines = [
        HEADING,
        "",
        f"Speed: {TEXTS} short texts (10-20 tokens) in one call; llmhost's `Host.embeddings` against "
        f"llama-cpp-python's `Llama.embed` (`embedding=True, n_seq_max=64`, mean pooling, same GGUF, "
        f"{threads} threads, batch 512), "
        f"in turn, median of {ROUNDS}. Target: llmhost ≤ Llama.embed.",
        "",
        "| model | llmhost | Llama.embed | llmhost ÷ Llama.embed |",
        "| --- | ---: | ---: | ---: |",
    ]
    models = {name: config for name in BUILTIN_MODELS}
    with Host(HostConfig(models=models, cache_dir=cache_dir)) as host:
        for model in SPEED_MODELS:
            path = resolve_model_path(model, config, cache_dir)
            baseline = _llama_embed(path, threads, 512)
            ours: list[float] = []
            theirs: list[float] = []
            host.embeddings(model, texts[:64])  # load and warm up both
            baseline.embed(texts[:64])
            for _ in range(ROUNDS):
                started = time.perf_counter()
                host.embeddings(model, texts)
                ours.append(time.perf_counter() - started)
                started = time.perf_counter()
                baseline.embed(texts)
                theirs.append(time.perf_counter() - started)
            del baseline
            a, b = statistics.median(ours), statistics.median(theirs)
            lines.append(f"| {model} | {a:.2f} s | {b:.2f} s | **{a / b:.2f}** |")
        load = os.getloadavg()[0]
        lines += ["", f"Load average at the end: {load:.1f} on {os.cpu_count()} cores (other work inflates the times)."]
        questions, passages = retrieval_set()
        lines += [
            "",
            f"Retrieval: top-1 accuracy on the project's {len(questions)} question → passage pairs "
            "(bench/data/retrieval.json; the nearest passage by cosine must be the question's own).",
            "",
            "| model | top-1 | dimensions |",
            "| --- | ---: | ---: |",
        ]
        for model in BUILTIN_MODELS:
            q = host.embeddings(model, questions).embeddings
            p = host.embeddings(model, passages).embeddings
            lines.append(f"| {model} | {top1(q, p)}/{len(questions)} | {len(q[0])} |")
    lines.append("")
    return lines


def replace_section(doc: Path, lines: list[str], heading: str = HEADING) -> None:
    """The section `heading` of `doc` replaced by `lines` (up to the next `## ` heading), or added at its end: a
    bench run on its own updates its section only."""
    text = doc.read_text() if doc.is_file() else ""
    section = "\n".join(lines)
    if heading in text:
        head, _, rest = text.partition(heading)
        tail = rest[rest.find("\n## ") :] if "\n## " in rest else ""
        doc.write_text(head + section + tail.removeprefix("\n"))
    else:
        doc.write_text(text.rstrip("\n") + "\n\n" + section + "\n")


if __name__ == "__main__":
    from llmhost.config import default_cache_dir

    section = run(default_cache_dir(), 2)
    print("\n".join(section))
    replace_section(ROOT / "docs" / "benchmarks.md", section)
    sys.exit(0)
