"""OpenTelemetry traces' cost (issue 69): host time per generated token of `llmhost serve` with tracing on (the
official OTLP/HTTP exporter, sending to a receiver on loopback) against off, interleaved request by request.

One http-app guest (tests/guests/telemetry_app, `/stream`) streams a greedy generation through `llm.infer-stream`
and reads it chunk by chunk. On the fake decoder (`[engine] kind = "fake-decoder"`, the default here) a decode step
costs nothing, so all of a token's time is host time (scheduler, stream host calls, guest): the strictest
comparison. `--model` runs the built-in gemma-3-270m through llama.cpp instead. Each server is its own process; the
rounds alternate on/off so that drift on a shared machine falls on both alike. The goal: on within 5% of off.

`python bench/telemetry.py [--rounds N] [--tokens N] [--model]` prints a markdown table; `telemetry_section(...)`
returns it (for bench/run.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from llmhost.toolchains import build_component  # noqa: E402
from otlp_receiver import Receiver, receiving  # noqa: E402
from serve_driver import Server, serving  # noqa: E402

HEADING = "## OpenTelemetry traces: host time per token, on and off (bench/telemetry.py)"
ROUNDS = 12
TOKENS = 2048  # a request's CPU time is read in clock ticks (10 ms): long requests
GOAL = 0.05  # on within 5% of off


def _config(directory: Path, app: Path, endpoint: str | None, model: bool) -> Path:
    telemetry = f'[telemetry]\notlp-endpoint = "{endpoint}"\n' if endpoint else ""
    engine = "" if model else '[engine]\nkind = "fake-decoder"\ncontext-length = 4096\n'
    path = directory / ("on.toml" if endpoint else "off.toml")
    path.write_text(
        f'data-dir = "{directory / "data"}"\n{telemetry}{engine}'
        f'[limits]\nmax-tokens = 1000000\n[components.app]\nsource = "{app}"\n[routes]\n"/" = "app"\n'
    )
    return path


@contextmanager
def _servers(model: bool) -> Iterator[tuple[Server, Server, Receiver]]:
    cache = Path(os.environ.get("LLMHOST_CACHE_DIR") or Path.home() / ".cache" / "llmhost")
    with ExitStack() as stack:
        directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-telemetry-")))
        app = build_component(ROOT / "tests" / "guests" / "telemetry_app", directory / "app.wasm", "http-app")
        receiver = stack.enter_context(receiving())
        env = {name: "" for name in os.environ if name.startswith("OTEL_")}
        on = stack.enter_context(
            serving(["-c", str(_config(directory, app, receiver.endpoint, model))], cache, extra_env=env)
        )
        off = stack.enter_context(serving(["-c", str(_config(directory, app, None, model))], cache, extra_env=env))
        yield on, off, receiver


def _cpu_s(server: Server) -> float:
    """The server process's CPU time so far (user and system, every thread: the exporter's included)."""
    fields = Path(f"/proc/{server.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _generate(server: Server, tokens: int) -> tuple[float, float]:
    """One request: (its wall seconds, the server's CPU seconds for it)."""
    cpu, started = _cpu_s(server), time.perf_counter()
    status, body = server.request("GET", f"/stream?max_tokens={tokens}")
    elapsed = time.perf_counter() - started
    assert status == 200, body[:300]
    generated = json.loads(body)["generated"]
    assert generated == tokens, (generated, tokens)
    return elapsed, _cpu_s(server) - cpu


def measure(rounds: int = ROUNDS, tokens: int = TOKENS, model: bool = False) -> dict[str, float]:
    """Host CPU ms per token (the server's CPU time over all rounds) and the median wall ms per token, with tracing
    on and off, and the spans the receiver got. CPU time is what a busy shared machine distorts least."""
    with _servers(model) as (on, off, receiver):
        for server in (on, off):  # warm: compiled code, the model loaded, the connection pools
            _generate(server, tokens)
        wall: dict[str, list[float]] = {"on": [], "off": []}
        cpu = {"on": 0.0, "off": 0.0}
        for index in range(rounds):
            order = [("on", on), ("off", off)] if index % 2 == 0 else [("off", off), ("on", on)]
            for name, server in order:
                seconds, cpu_s = _generate(server, tokens)
                wall[name].append(seconds * 1000 / tokens)
                cpu[name] += cpu_s
        receiver.wait_for(lambda spans: sum(s.kind == "SERVER" for s in spans) >= rounds + 1, 30.0)
        names = {s.name for s in receiver.spans}
        assert {"llm.infer-stream", "llm.queue", "llm.prefill", "llm.decode"} <= names, names
        result = {f"cpu_{name}": cpu[name] * 1000 / (rounds * tokens) for name in cpu}
        result.update({f"wall_{name}": statistics.median(times) for name, times in wall.items()})
        return {**result, "spans": float(len(receiver.spans))}


def telemetry_section(rounds: int = ROUNDS, tokens: int = TOKENS, model: bool = False) -> str:
    """The markdown section: host ms per token, on and off, and the overhead."""
    result = measure(rounds, tokens, model)
    cpu = result["cpu_on"] / result["cpu_off"] - 1
    wall = result["wall_on"] / result["wall_off"] - 1
    engine = "gemma-3-270m (llama.cpp, CPU)" if model else "the fake decoder (every ms is host time)"
    verdict = "within" if cpu <= GOAL else "over"
    return "\n".join(
        [
            HEADING,
            "",
            f"One guest streaming {tokens} greedy tokens through `llm.infer-stream` on {engine}; {rounds} requests "
            "each, on and off interleaved; on exports to an OTLP/HTTP receiver on loopback "
            f"({int(result['spans'])} spans received). Host CPU: the server process's CPU time (every thread, the "
            "exporter's included) per token; wall: the median request's time per token.",
            "",
            "| tracing | host CPU ms per token | wall ms per token |",
            "|---|---|---|",
            f"| off | {result['cpu_off']:.4f} | {result['wall_off']:.4f} |",
            f"| on (OTLP/HTTP) | {result['cpu_on']:.4f} ({cpu:+.1%}, {verdict} the {GOAL:.0%} goal) | "
            f"{result['wall_on']:.4f} ({wall:+.1%}) |",
            "",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--tokens", type=int, default=TOKENS)
    parser.add_argument("--model", action="store_true", help="the built-in model through llama.cpp")
    args = parser.parse_args()
    print(telemetry_section(args.rounds, args.tokens, args.model))


if __name__ == "__main__":
    main()
