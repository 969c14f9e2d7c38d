"""Embeddings sharing a model with a generation (part of `make bench`): a streamed completion of TOKENS tokens on
Gemma through the Python API, alone and while CLIENTS clients loop Gemma embeddings calls (TEXTS texts of ~490
tokens each: one decode call, a batch, per text); its time to first token and total time, median of ROUNDS. The
target: the first token waits for at most the embeddings batch under way, however many calls are queued.

Standalone: `python bench/embedding_fairness.py [--baseline DIR]` prints the section and replaces it in
docs/benchmarks.md. `--baseline DIR`: a copy of older code (`git archive COMMIT | tar -x -C DIR`), measured in the
same run, in a process of its own before this code's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from embeddings import replace_section  # bench/embeddings.py: one way to rewrite one section

from llmhost import Host, HostConfig, InferencingParams
from llmhost.config import ModelConfig
from llmhost.domain.limits import DEFAULT_MODEL
from llmhost.domain.types import StreamChunk, StreamDone

ROOT = Path(__file__).resolve().parents[1]
HEADING = "## Embeddings sharing a model with a generation (bench/embedding_fairness.py)"
MODEL = DEFAULT_MODEL
CLIENTS = 4
TEXTS = 4
TOKENS = 32
ROUNDS = 5
PROMPT = "Once upon a time, there was a dragon who"
LONG_TEXT = " ".join(f"Line {i}: the river rose again after the storm." for i in range(38))  # ~490 Gemma tokens


def _stream(host: Host, params: InferencingParams) -> tuple[float, float, int]:
    """(time to the first chunk, time to the end, tokens generated) of one streamed completion."""
    started = time.perf_counter()
    first, generated = 0.0, 0
    for event in host.infer_stream(MODEL, PROMPT, params):
        if isinstance(event, StreamChunk) and not first:
            first = time.perf_counter() - started
        elif isinstance(event, StreamDone):
            generated = event.usage.generated_token_count
    return first, time.perf_counter() - started, generated


def measure(cache_dir: Path, threads: int) -> dict[str, Any]:
    """Streams alone, then while the embeddings clients loop; and one embeddings batch's time alone. Uses only
    what older code has too (for `--baseline`)."""
    config = ModelConfig(threads=threads, prefix_cache=False)
    params = InferencingParams(max_tokens=TOKENS, temperature=0.0, repeat_penalty=1.0)
    with Host(HostConfig(models={MODEL: config}, cache_dir=cache_dir)) as host:
        _stream(host, params)  # load and warm up
        host.embeddings(MODEL, [LONG_TEXT])
        started = time.perf_counter()
        host.embeddings(MODEL, [LONG_TEXT] * TEXTS)
        batch_s = (time.perf_counter() - started) / TEXTS
        alone = [_stream(host, params) for _ in range(ROUNDS)]
        model = host.engine.model(MODEL)  # type: ignore[attr-defined]
        stop = threading.Event()
        calls: list[float] = []

        def client() -> None:
            while not stop.is_set():
                host.embeddings(MODEL, [LONG_TEXT] * TEXTS)
                calls.append(time.perf_counter())

        clients = [threading.Thread(target=client) for _ in range(CLIENTS)]
        for thread in clients:
            thread.start()
        shared = []
        try:
            for round_index in range(ROUNDS):
                deadline = time.monotonic() + 600
                # One call runs, the others wait for the embedding context (read without the model lock: taking it
                # would start the stream between two batches, its best case).
                while model.admission.waiting < CLIENTS - 1 and time.monotonic() < deadline:
                    time.sleep(0.01)
                time.sleep(batch_s * (round_index + 0.5) / ROUNDS)  # arrive at points spread over a batch
                shared.append(_stream(host, params))
        finally:
            stop.set()
            for thread in clients:
                thread.join()
    return {"alone": alone, "shared": shared, "batch_s": batch_s, "calls": len(calls)}


def _rows(label: str, figures: dict[str, Any]) -> list[str]:
    rows = []
    for condition, runs in (("alone", figures["alone"]), (f"with {CLIENTS} embeddings clients", figures["shared"])):
        first = statistics.median(r[0] for r in runs)
        total = statistics.median(r[1] for r in runs)
        tokens = statistics.median(r[2] for r in runs)
        rows.append(f"| {label} | {condition} | {first:.2f} s | {total:.2f} s | {tokens:.0f} |")
    return rows


def _target(figures: dict[str, Any]) -> str:
    alone = statistics.median(r[0] for r in figures["alone"])
    shared = statistics.median(r[0] for r in figures["shared"])
    met = shared <= alone + figures["batch_s"]
    return (
        f"Target: time to first token with the clients ≤ alone + one embeddings batch ({figures['batch_s']:.2f} s "
        f"here, a ~490-token text alone): **{shared:.2f} s** vs {alone:.2f} s + {figures['batch_s']:.2f} s "
        f"({'met' if met else 'NOT met'})."
    )


def run(cache_dir: Path, threads: int, baseline: dict[str, Any] | None = None, baseline_label: str = "") -> list[str]:
    figures = measure(cache_dir, threads)
    lines = [
        HEADING,
        "",
        f"A streamed {TOKENS}-token completion on {MODEL} (Python API, greedy), alone and while {CLIENTS} clients "
        f"loop embeddings calls of {TEXTS} texts of ~490 tokens each on the same model (one decode call, a batch, "
        f"per text; one call at a time holds the embedding context, the others wait in the admission queue), "
        f"{threads} threads; median of {ROUNDS}.",
        "",
        "| code | condition | time to first token | total time | tokens |",
        "| --- | --- | ---: | ---: | ---: |",
        *_rows("this run's", figures),
        *(_rows(baseline_label, baseline) if baseline is not None else []),
        "",
        _target(figures),
        "",
    ]
    if baseline is not None:
        lines[-1:-1] = [
            f"{baseline_label}: older code, measured in the same run in a process of its own "
            "(`python bench/embedding_fairness.py --baseline DIR`).",
            "",
        ]
    return lines


def _baseline(directory: Path, cache_dir: Path, threads: int) -> dict[str, Any]:
    """`measure` run on the code under `directory` (its host/), in a process of its own."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(directory / "host"), str(ROOT / "bench")]))
    code = (
        "import json, sys; from pathlib import Path; import embedding_fairness as b; "
        "print(json.dumps(b.measure(Path(sys.argv[1]), int(sys.argv[2]))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(cache_dir), str(threads)], env=env, capture_output=True, text=True, check=True
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


if __name__ == "__main__":
    from llmhost.config import default_cache_dir

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, help="a copy of older code to measure beside this one")
    parser.add_argument("--label", default="baseline", help="the baseline's name in the table")
    parser.add_argument("--threads", type=int, default=int(os.environ.get("LLMHOST_BENCH_THREADS", "2")))
    args = parser.parse_args()
    cache = default_cache_dir()
    before = _baseline(args.baseline, cache, args.threads) if args.baseline else None
    section = run(cache, args.threads, before, args.label)
    print("\n".join(section))
    replace_section(ROOT / "docs" / "benchmarks.md", section, HEADING)
    sys.exit(0)
