"""GPU-speed simulation: how much of a generation's wall time is decoding when a decode step takes what it takes
on a GPU (1 to 3 ms for the built-in models)? At that speed whatever the host does serially around each step sets
the throughput, and a CPU-only machine cannot show it: its real steps are ten to a hundred times longer.

So only the `llama_decode` C call is replaced, by a wait of a step time with the GIL released; everything else
(scheduler, compute thread, samplers reading real logits, detokenization, wasm guests, `llmhost serve`) runs for
real. Efficiency = simulated decode time (the measured time inside the fake calls) ÷ wall time: 1.0 would be a
host that costs nothing.

`python bench/gpu_speed.py [--backend-sampling] [ROUNDS]` prints the table for both built-in models, each in fresh
processes (threads from LLMHOST_BENCH_THREADS, default 2; the models configured as on a GPU, `n-gpu-layers = -1`,
with `backend-sampling` at its default, off: `--backend-sampling` simulates it on).
`python bench/gpu_speed.py --gpu [--backend-sampling] [ROUNDS]`: no simulation, the same paths and table on the real
decode of the configured models, offloaded, timed by the GPU timing method (bench/gpu_timing.py: `llama_synchronize`
right after `llama_decode`, inside the timed region). Runs on a CPU-only build too (at CPU speed). `--guest WASM` and
`--http-guest WASM`: prebuilt bench/guest and guest-examples/openai-compat, where componentize-py is not installed.
`python bench/gpu_speed.py --serve-simulated|--serve-gpu CLOCK_FILE serve ...` is the HTTP measure's server:
`llmhost` with simulated (or synchronized, timed) decoding, publishing its decode clock in CLOCK_FILE.
"""

from __future__ import annotations

import http.client
import json
import mmap
import multiprocessing
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, NamedTuple

from gpu_timing import configured, describe, synchronized_lib
from host_time import concurrent_streams
from serve import launch

from llmhost import Host, HostConfig, InferencingParams, StreamChunk
from llmhost.config import ModelConfig
from llmhost.domain.limits import GENERATIVE_MODELS

ROOT = Path(__file__).resolve().parents[1]
TOKENS = 128
PROMPT = "Once upon a time, there was a dragon who"
CHAT_PROMPT = "Tell me a story about a dragon."
SUBJECTS = ["dragon", "cat", "king", "robot", "wizard", "fox", "ship", "tree"]
# The real logits every simulated step reads: one real decode of this text's first 32 tokens, all with logits.
# Greedy argmax of none of its rows is end-of-generation in either built-in model (checked at every priming).
PRIMING_TEXT = (
    "The old lighthouse keeper climbed the spiral stairs every evening to light the lamp, and from the top he "
    "watched the fishing boats return across the grey and restless sea. He never missed a single night."
)
PRIMING_ROWS = 32
# Batch size of every simulated model: a batch index >= PRIMING_ROWS has no real logits row, and with llama.cpp's
# default of 512 a step of 31 decode rows followed by a 15-token prompt would ask for logits at index 45. At 32 no
# index can; prompts longer than that are evaluated in 32-token chunks, the last one holding the logits.
BATCH = PRIMING_ROWS
GREEDY = InferencingParams(max_tokens=TOKENS, temperature=0.0, repeat_penalty=1.0, top_k=0, top_p=1.0)
# The simulated models are configured as on a GPU: the scheduler's CPU-only policy (model.py `cpu_bound`) would
# hold each step back for its readers, which a sleeping decode does not need.
GPU_LAYERS = -1
# Efficiency targets (simulated decode ÷ wall) per path.
TARGETS = {"api": 0.90, "infer": 0.90, "stream": 0.85, "streams32": 0.85}


def step_seconds(n_tokens: int) -> float:
    """A GPU decode step of the built-in models holding n tokens: 1 ms up to 8, 3 ms at 32, linear in between,
    and beyond 32 (prefill) proportional to the tokens."""
    if n_tokens <= 8:
        ms = 1.0
    elif n_tokens <= 32:
        ms = 1.0 + 2.0 * (n_tokens - 8) / 24
    else:
        ms = 3.0 * n_tokens / 32
    return ms / 1e3


class Reading(NamedTuple):
    """A `SimClock` at one instant; `after - before` is what happened in between."""

    seconds: float
    calls: int
    tokens: int

    def __sub__(self, other: tuple[Any, ...]) -> Reading:
        return Reading(self.seconds - other[0], self.calls - other[1], self.tokens - other[2])


_MIRROR = struct.Struct("dqq")


class SimClock:
    """Time spent in the simulated `llama_decode` calls (sleep overshoot included), their count and tokens.
    Only the compute thread adds to it. `mirror`: also keep it in a shared file (mmap, no syscall per step), so
    another process can read a server's clock."""

    def __init__(self, mirror: Path | None = None) -> None:
        self.seconds, self.calls, self.tokens = 0.0, 0, 0
        self._map: mmap.mmap | None = None
        if mirror is not None:
            fd = os.open(mirror, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                os.ftruncate(fd, _MIRROR.size)
                self._map = mmap.mmap(fd, _MIRROR.size)
            finally:
                os.close(fd)

    def add(self, seconds: float, tokens: int) -> None:
        self.seconds += seconds
        self.calls += 1
        self.tokens += tokens
        if self._map is not None:
            _MIRROR.pack_into(self._map, 0, self.seconds, self.calls, self.tokens)

    def read(self) -> Reading:
        return Reading(self.seconds, self.calls, self.tokens)

    @staticmethod
    def read_mirror(path: Path) -> Reading:
        """Another process's clock (read while it is idle between requests, so never torn)."""
        data = path.read_bytes()
        return Reading(*_MIRROR.unpack(data)) if len(data) == _MIRROR.size else Reading(0.0, 0, 0)


def _prime(decoder: Any) -> list[int]:
    """One real decode of PRIMING_ROWS tokens, logits at every row, then drop its cells: the context's output
    buffer keeps PRIMING_ROWS real rows of the real vocabulary for the simulated steps to read. Returns each row's
    greedy token (what the graph's sampler finds in it, with backend sampling)."""
    import numpy as np

    tokens = decoder.tokenize(PRIMING_TEXT)[:PRIMING_ROWS]
    assert len(tokens) == PRIMING_ROWS and decoder.n_batch >= PRIMING_ROWS, (len(tokens), decoder.n_batch)
    decoder.decode([(0, 0, tokens)], set(range(PRIMING_ROWS)))
    decoder.seq_rm(0, 0)
    greedy = [int(np.argmax(decoder.logits(i))) for i in range(PRIMING_ROWS)]
    ends = [i for i, token in enumerate(greedy) if decoder.is_eog(token)]
    if ends:  # a greedy run reading one of these rows would stop early
        raise RuntimeError(f"{decoder.name}: priming rows {ends} end the generation; change PRIMING_TEXT")
    return greedy


def _simulated_lib(real: Any, clock: SimClock, step: Callable[[int], float], greedy: list[int]) -> Any:
    """The llama_cpp module with `llama_decode` replaced by a wait. A module copy, not a `__getattr__` proxy: the
    other calls are looked up as fast as on the real module, so the proxy adds no host time of its own.

    Backend sampling (engine/local/backend_greedy.py) is simulated with it: the graph's greedy sampler is part of
    the decode, so `llama_get_sampled_token_ith` gives the greedy token of the primed row an output reads, for
    outputs of sequences with a sampler attached (attaching runs for real as well), and -1 for the others."""
    bound: set[int] = set()
    last: list[Any] = [None]  # the last decode's batch

    def llama_set_sampler(ctx: Any, seq: int, sampler: Any) -> bool:
        attached = bool(real.llama_set_sampler(ctx, seq, sampler))
        if sampler is not None and attached:
            bound.add(seq)
        else:
            bound.discard(seq)
        return attached

    def llama_get_sampled_token_ith(ctx: Any, i: int) -> int:
        batch = last[0]
        return greedy[i] if batch is not None and batch.seq_id[i][0] in bound else -1

    def llama_decode(ctx: Any, batch: Any) -> int:
        last[0] = batch
        n = int(batch.n_tokens)
        if n > PRIMING_ROWS:  # prefill: waits like one, but its logits rows must exist
            beyond = [i for i in range(PRIMING_ROWS, n) if batch.logits[i]]
            if beyond:
                raise RuntimeError(f"simulated decode: logits wanted at batch index {beyond} >= {PRIMING_ROWS}")
        started = time.perf_counter()
        time.sleep(step(n))  # releases the GIL, as the real call does
        clock.add(time.perf_counter() - started, n)
        return 0

    proxy = types.ModuleType(real.__name__)
    proxy.__dict__.update(vars(real))
    proxy.llama_decode = llama_decode  # type: ignore[attr-defined]
    proxy.llama_set_sampler = llama_set_sampler  # type: ignore[attr-defined]
    proxy.llama_get_sampled_token_ith = llama_get_sampled_token_ith  # type: ignore[attr-defined]
    return proxy


def simulate(step: Callable[[int], float] = step_seconds, mirror: Path | None = None) -> SimClock:
    """From now on every `LlamaDecoder` of this process is primed with real logits and decodes by waiting
    `step(n_tokens)` seconds. Returns the clock of those waits."""
    from llmhost.engine.local.llama_decoder import LlamaDecoder

    clock = SimClock(mirror)
    original = LlamaDecoder.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.lib = _simulated_lib(self.lib, clock, step, _prime(self))

    LlamaDecoder.__init__ = __init__  # type: ignore[method-assign]
    return clock


def synchronized(mirror: Path | None = None) -> SimClock:
    """`--gpu`: from now on every `LlamaDecoder` of this process decodes for real, timed with `llama_synchronize`
    inside the timed region (bench/gpu_timing.py). Returns the clock of those calls."""
    from llmhost.engine.local.llama_decoder import LlamaDecoder

    clock = SimClock(mirror)
    original = LlamaDecoder.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.lib = synchronized_lib(self.lib, clock.add)

    LlamaDecoder.__init__ = __init__  # type: ignore[method-assign]
    return clock


@dataclass(frozen=True)
class Mode:
    """What runs: the simulation (default) or, `gpu`, the real decode with the GPU timing method; and
    `backend_sampling` (None: the key unset, its default, off; True: on)."""

    gpu: bool = False
    backend_sampling: bool | None = None
    models: dict[str, ModelConfig] = field(default_factory=dict)  # --gpu: the configured models (path, ...)
    # Prebuilt guests ("bench": bench/guest, "openai-compat"), where componentize-py is not installed (a GPU machine).
    guests: dict[str, Path] = field(default_factory=dict)

    def start(self, mirror: Path | None = None) -> SimClock:
        return synchronized(mirror) if self.gpu else simulate(mirror=mirror)


# --- measures ------------------------------------------------------------------------------------------------


@dataclass
class Sample:
    """One measured run: efficiency, tokens/s, host ms per token (one stream) or per decode call (several),
    tokens per decode call, simulated ms per call; chats add time to first content and the gap between chunks."""

    efficiency: float
    tokens_per_s: float
    host_ms: float
    rows: float
    step_ms: float
    first_ms: float = float("nan")
    gap_ms: float = float("nan")


def sample(
    wall: float, generated: int, sim: Reading, per_call: bool = False, chunks: tuple[float, float] | None = None
) -> Sample:
    """`chunks`: (ms to the first content chunk, median ms between chunks) of a streamed chat."""
    nan = float("nan")
    return Sample(
        efficiency=sim.seconds / wall,
        tokens_per_s=generated / wall,
        host_ms=(wall - sim.seconds) / (sim.calls if per_call else generated) * 1e3,
        rows=sim.tokens / sim.calls,
        step_ms=sim.seconds / sim.calls * 1e3,
        first_ms=chunks[0] if chunks else nan,
        gap_ms=chunks[1] if chunks else nan,
    )


def greedy(tokens: int) -> InferencingParams:
    return GREEDY.model_copy(update={"max_tokens": tokens})


# Every simulated run generates exactly its budget (no primed row is end-of-generation). `--gpu` clears it: the GPU
# kit's random-weight models may end a generation early, and the figures are per generated token anyway.
EXACT_COUNTS = True


def check(generated: int, expected: int = TOKENS) -> int:
    if EXACT_COUNTS:
        assert generated == expected, f"generated {generated} tokens, expected {expected}"
    assert generated > 0, "a run generated no tokens"
    return generated


def api_one(host: Host, model: str, clock: SimClock) -> Sample:
    """One greedy `Host.infer`."""
    before = clock.read()
    started = time.perf_counter()
    generated = check(host.infer(model, PROMPT, GREEDY).usage.generated_token_count)
    wall = time.perf_counter() - started
    return sample(wall, generated, clock.read() - before)


def guest_one(app: Any, command: str, model: str, clock: SimClock) -> Sample:
    """The same through the bench guest (`infer` or `stream`), timed inside the guest."""
    before = clock.read()
    done = app.run_captured([command, model, str(TOKENS), PROMPT])
    sim = clock.read() - before
    report = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return sample(float(report["seconds"]), check(int(report["generated"])), sim)


def chat_one(host: Host, model: str, clock: SimClock) -> Sample:
    """The HTTP measure's chat through the Python API (the host's chat service, no guest, no HTTP): what the
    HTTP path adds is the difference."""
    from llmhost.chat.service import ChatService
    from llmhost.domain.types import ChatMessage, ChatParams, ChatRole

    service = ChatService(lambda: host.engine)
    messages = [ChatMessage(role=ChatRole.USER, content=CHAT_PROMPT)]
    before = clock.read()
    started = time.perf_counter()
    arrivals: list[float] = []
    generated = 0
    for event in service.chat_stream(model, messages, ChatParams(inferencing=GREEDY)):
        if isinstance(event, StreamChunk):
            if event.text:
                arrivals.append(time.perf_counter())
        else:
            generated = event.usage.generated_token_count
    wall = time.perf_counter() - started
    return sample(wall, check(generated), clock.read() - before, chunks=chunk_times(started, arrivals))


def chunk_times(started: float, arrivals: list[float]) -> tuple[float, float]:
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]
    return (arrivals[0] - started) * 1e3, statistics.median(gaps) * 1e3


def streams(host: Host, model: str, clock: SimClock, n: int, tag: str, tokens: int = TOKENS) -> Sample:
    """n concurrent greedy `Host.infer_stream` readers on threads, distinct short prompts; per decode call."""
    readings: list[Reading] = []
    wall, counts = concurrent_streams(host, model, n, tag, greedy(tokens), lambda: readings.append(clock.read()))
    before = readings[0]
    assert len(counts) == n, f"{n - len(counts)} of {n} streams failed"
    for count in counts:
        check(count, tokens)
    return sample(wall, sum(counts), clock.read() - before, per_call=True)


def model_config(
    threads: int, n_gpu_layers: int, backend_sampling: bool | None = None, base: ModelConfig | None = None
) -> ModelConfig:
    """The measured model's config: `base` (a configured model: its path and other keys; else a built-in's
    defaults) with this benchmark's slots, batch and cache; `backend_sampling` None leaves the key unset (its
    default, off on a GPU too: issue 51)."""
    update: dict[str, Any] = {
        "threads": threads,
        "n_gpu_layers": n_gpu_layers,
        "slots": 32,
        "context_length": 1024,
        "batch_size": BATCH,
        "prefix_cache": False,
    }
    if backend_sampling is not None:
        update["backend_sampling"] = backend_sampling
    return (base or ModelConfig()).model_copy(update=update)


def medians(runs: dict[str, list[Sample]]) -> dict[str, Sample]:
    return {
        path: Sample(**{f.name: statistics.median(getattr(s, f.name) for s in samples) for f in fields(Sample)})
        for path, samples in runs.items()
    }


def measure(
    model: str, threads: int, n_gpu_layers: int, cache_dir: Path, rounds: int, mode: Mode = Mode()
) -> dict[str, Sample]:
    """Medians over `rounds` of the in-process measures of one model (run in a fresh process)."""
    from llmhost.toolchains.python import build_component

    global EXACT_COUNTS
    EXACT_COUNTS = not mode.gpu
    clock = mode.start()
    wasm = mode.guests.get("bench") or build_component(
        ROOT / "bench" / "guest", cache_dir / "bench" / "bench-guest.wasm"
    )
    config = HostConfig(
        models={model: model_config(threads, n_gpu_layers, mode.backend_sampling, mode.models.get(model))},
        cache_dir=cache_dir,
        compile_strategy="optimized",
    )
    runs: dict[str, list[Sample]] = {}
    with Host(config) as host:
        app = host.load(wasm)
        host.infer(model, "warm up", greedy(4))
        app.run_captured(["stream", model, "4", "warm up"])
        chat_one(host, model, clock)
        streams(host, model, clock, 32, "Warm", tokens=8)
        for r in range(rounds):
            runs.setdefault("api", []).append(api_one(host, model, clock))
            runs.setdefault("infer", []).append(guest_one(app, "infer", model, clock))
            runs.setdefault("stream", []).append(guest_one(app, "stream", model, clock))
            runs.setdefault("chat", []).append(chat_one(host, model, clock))
            runs.setdefault("streams8", []).append(streams(host, model, clock, 8, f"Round {r}"))
            runs.setdefault("streams32", []).append(streams(host, model, clock, 32, f"Round {r}"))
    return medians(runs)


# --- HTTP: a streamed chat through guest-examples/openai-compat under a simulated `llmhost serve` ---------------


def start_simulated_server(
    wasm: Path, cache_dir: Path, config: Path, clock: Path, gpu: bool = False
) -> tuple[subprocess.Popen[str], int]:
    """`llmhost serve` with simulated decoding (this file's `--serve-simulated`; `gpu`: the real decode, timed,
    `--serve-gpu`), on a free loopback port."""
    flag = "--serve-gpu" if gpu else "--serve-simulated"
    command = [sys.executable, str(Path(__file__).resolve()), flag, str(clock)]
    command += ["serve", str(wasm), "-c", str(config), "--listen", "127.0.0.1:0"]
    return launch(command, cache_dir)


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of each of a process's threads, summed by thread name (/proc/PID/task/*/schedstat: ns on CPU)."""
    totals: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            ns = int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError):  # a thread that just ended
            continue
        totals[name] = totals.get(name, 0.0) + ns / 1e9
    return totals


def http_chat(port: int, model: str, clock: Path, pid: int, tokens: int = TOKENS) -> tuple[Sample, dict[str, float]]:
    """One streamed greedy chat completion, read to `[DONE]` and timed from the client; the server's decode
    clock is read before and after. Also, where the time went: ms to the response headers, and CPU ms per token
    of the client and of each of the server's threads."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": CHAT_PROMPT}],
        "max_tokens": tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    before, cpu_before, client_before = SimClock.read_mirror(clock), thread_cpu(pid), time.process_time()
    started = time.perf_counter()
    connection.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    response = connection.getresponse()
    headers_ms = (time.perf_counter() - started) * 1e3
    if response.status != 200:
        raise RuntimeError(f"/v1/chat/completions answered {response.status}: {response.read()!r}")
    arrivals: list[float] = []
    generated = -1
    for line in response:
        if not line.startswith(b"data: "):
            continue
        now = time.perf_counter()
        payload = line[6:].strip()
        if payload == b"[DONE]":
            break
        event = json.loads(payload)
        if event.get("usage"):
            generated = int(event["usage"]["completion_tokens"])
        if any(choice["delta"].get("content") for choice in event.get("choices", ())):
            arrivals.append(now)
    wall = time.perf_counter() - started
    client_cpu = time.process_time() - client_before
    connection.close()
    sim, cpu_after = SimClock.read_mirror(clock) - before, thread_cpu(pid)
    check(generated, tokens)
    where = {"headers_ms": headers_ms, "cpu:client": client_cpu / generated * 1e3}
    for name, seconds in cpu_after.items():
        where[f"cpu:{name}"] = (seconds - cpu_before.get(name, 0.0)) / generated * 1e3
    return sample(wall, generated, sim, chunks=chunk_times(started, arrivals)), where


def serve_toml(model: str, config: ModelConfig) -> str:
    """`[models.MODEL]` for the HTTP measure's server: the keys `model_config` sets (and a configured path)."""
    lines = [f"[models.{model}]"]
    if config.path is not None:
        lines.append(f"path = {json.dumps(str(config.path))}")
    lines += [
        f"slots = {config.slots}",
        f"context-length = {config.context_length}",
        f"batch-size = {config.batch_size}",
        f"threads = {config.threads}",
        f"n-gpu-layers = {config.n_gpu_layers}",
        f"prefix-cache = {str(config.prefix_cache).lower()}",
    ]
    if config.backend_sampling is not None:
        lines.append(f"backend-sampling = {str(config.backend_sampling).lower()}")
    return "\n".join(lines) + f"\n\n[limits]\nmax-tokens = {TOKENS}\ndeadline-s = 600\n"


def measure_http(
    model: str, threads: int, n_gpu_layers: int, cache_dir: Path, rounds: int, mode: Mode = Mode()
) -> tuple[Sample, dict[str, float]]:
    """Medians over `rounds` of `http_chat` against a fresh simulated server for `model`."""
    from llmhost.toolchains.python import build_component

    wasm = mode.guests.get("openai-compat") or build_component(
        ROOT / "guest-examples" / "openai-compat",
        cache_dir / "bench" / "openai-compat.wasm",
        world="http-app",
        cache_dir=cache_dir,
    )
    with tempfile.TemporaryDirectory(prefix="gpu-speed-") as work:
        config, clock = Path(work) / "serve.toml", Path(work) / "clock"
        base = mode.models.get(model)
        config.write_text(serve_toml(model, model_config(threads, n_gpu_layers, mode.backend_sampling, base)))
        process, port = start_simulated_server(wasm, cache_dir, config, clock, mode.gpu)
        try:
            http_chat(port, model, clock, process.pid, tokens=8)  # loads the model, compiles the first instance
            results = [http_chat(port, model, clock, process.pid) for _ in range(rounds)]
        finally:
            process.terminate()
            process.wait(timeout=30)
    keys = {key for _, where in results for key in where}
    where = {key: statistics.median(w.get(key, 0.0) for _, w in results) for key in keys}
    return medians({"http": [s for s, _ in results]})["http"], where


# --- the table -------------------------------------------------------------------------------------------------

PATHS = {
    "api": "1 stream, `Host.infer`",
    "infer": "1 stream, guest `infer`",
    "stream": "1 stream, guest `infer-stream`",
    "chat": "1 stream, chat, Python API (`chat_stream`)",
    "http": "1 stream, chat over HTTP (SSE, `llmhost serve` + openai-compat)",
    "streams8": "8 streams, `Host.infer_stream`",
    "streams32": "32 streams, `Host.infer_stream`",
}


def isolated(fn: Callable[..., Any], *args: Any) -> Any:
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(fn, args)


def run(cache_dir: Path, threads: int, rounds: int = 3, mode: Mode = Mode()) -> list[str]:
    global EXACT_COUNTS
    EXACT_COUNTS = not mode.gpu
    n_gpu_layers = GPU_LAYERS
    steps = ", ".join(f"{n}: {step_seconds(n) * 1e3:.2f}" for n in (1, 8, 16, 24, 32, 64))
    sampling = (
        "`backend-sampling` on (greedy tokens chosen in the graph)"
        if mode.backend_sampling
        else "`backend-sampling` unset (its default: off, on a GPU too)"
    )
    if mode.gpu:
        intro = (
            "GPU timing method (bench/gpu_timing.py): the real `llama_decode`, with `llama_synchronize(ctx)` right "
            f"after it inside the timed region ({os.cpu_count()} cores, {threads} llama.cpp threads). "
            + describe(cache_dir)
        )
        decode = "decode"
    else:
        intro = (
            "GPU-speed simulation: `llama_decode` replaced by a sleep of the step time (ms by tokens in the call: "
            f"{steps}; 1 up to 8, linear to 3 at 32, 3·n/32 beyond), everything else real on this CPU "
            f"({os.cpu_count()} cores, {threads} llama.cpp threads)."
        )
        decode = "simulated"
    lines = [
        f"{intro} Greedy, {TOKENS} tokens, prompt {PROMPT!r}; slots 32, batch size {BATCH}, no prefix cache, "
        f"{sampling}. Efficiency = time inside the {decode} calls ÷ wall time. Host ms: (wall − time in them) "
        f"per token (1 stream) or per decode call (8 / 32 streams). Median of {rounds} rounds; each model in a "
        "fresh process, the HTTP server in another.",
        "",
        "The models run as a GPU deployment is configured (`n-gpu-layers = -1`; a CPU-only llama.cpp build ignores "
        "the offload): the engine's CPU-only policy (scheduler `READER_TURN_S`: the readers a step woke get the "
        "cores before the next decode) is for decodes that need every core, and a GPU's decode needs none.",
        "",
        "| model | path | efficiency | tokens/s | host ms per token / step | rows (tokens) per call "
        f"| {decode} ms per call |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    notes: list[str] = []
    models = list(mode.models) if mode.gpu else list(GENERATIVE_MODELS)
    for model in models:
        found: dict[str, Sample] = isolated(measure, model, threads, n_gpu_layers, cache_dir, rounds, mode)
        found["http"], where = measure_http(model, threads, n_gpu_layers, cache_dir, rounds, mode)
        for path, label in PATHS.items():
            s = found[path]
            target = TARGETS.get(path)
            efficiency = f"{s.efficiency:.3f}"
            if target is not None:
                efficiency += f" (≥ {target:.2f}: {'met' if s.efficiency >= target else 'NOT met'})"
            unit = "step" if path.startswith("streams") else "token"
            lines.append(
                f"| {model} | {label} | {efficiency} | {s.tokens_per_s:.0f} | {s.host_ms:.3f} / {unit} | "
                f"{s.rows:.2f} | {s.step_ms:.3f} |"
            )
        chat, http = found["chat"], found["http"]
        cpu = sorted(((k[4:], v) for k, v in where.items() if k.startswith("cpu:") and v >= 0.005), key=lambda x: -x[1])
        notes.append(
            f"- {model}, streamed chat: Python API first content chunk {chat.first_ms:.1f} ms, median gap between "
            f"chunks {chat.gap_ms:.2f} ms, whole {TOKENS / chat.tokens_per_s * 1e3:.0f} ms; over HTTP response "
            f"headers at {where['headers_ms']:.1f} ms, first content chunk {http.first_ms:.1f} ms, median gap "
            f"{http.gap_ms:.2f} ms, whole {TOKENS / http.tokens_per_s * 1e3:.0f} ms (HTTP adds "
            f"{(1 / http.tokens_per_s - 1 / chat.tokens_per_s) * TOKENS * 1e3:.0f} ms, "
            f"{http.host_ms - chat.host_ms:.3f} ms per token). CPU ms per token by thread: "
            + ", ".join(f"{name} {ms:.3f}" for name, ms in cpu)
            + "."
        )
    threads_line = (
        "CPU by thread (`/proc/PID/task/*/schedstat`, server threads named at the OS level): serve-loop = uvicorn's "
        "event loop (HTTP), llmhost-request = the guest (wasm), llmhost-MODEL = the scheduler's background thread, "
        f"llmhost-compute = the decode calls ({'the real decode' if mode.gpu else 'here the sleep'}), client = this "
        "benchmark's HTTP client."
    )
    return [*lines, "", *notes, "", threads_line]


def name_os_threads(main_name: str) -> None:
    """Give this process's threads their Python names at the OS level (Python 3.11 does not; 15 bytes kept), so
    `thread_cpu` can tell the server's threads apart: the main thread runs uvicorn's event loop (HTTP),
    llmhost-request the guests, llmhost-MODEL the scheduler, llmhost-compute the decode calls."""
    import ctypes

    prctl = ctypes.CDLL(None).prctl
    pr_set_name = 15
    prctl(pr_set_name, main_name.encode()[:15], 0, 0, 0)
    original = threading.Thread._bootstrap_inner  # type: ignore[attr-defined]

    def bootstrap_inner(self: threading.Thread) -> None:
        prctl(pr_set_name, self.name.encode()[:15], 0, 0, 0)
        original(self)

    threading.Thread._bootstrap_inner = bootstrap_inner  # type: ignore[attr-defined]


def serve_simulated(argv: list[str], gpu: bool = False) -> None:
    """`--serve-simulated CLOCK_FILE ARGS...`: `llmhost ARGS...` with every decoder simulated (`gpu`,
    `--serve-gpu`: decoding for real, timed by the GPU timing method)."""
    name_os_threads("serve-loop")
    Mode(gpu=gpu).start(Path(argv[0]))
    from llmhost.cli import main

    sys.argv = ["llmhost", *argv[1:]]
    main()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("--serve-simulated", "--serve-gpu"):
        serve_simulated(sys.argv[2:], gpu=sys.argv[1] == "--serve-gpu")
        sys.exit(0)

    import argparse

    from llmhost.config import default_cache_dir

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rounds", nargs="?", type=int, default=3, help="rounds (the median is reported)")
    parser.add_argument("--gpu", action="store_true", help="no simulation: the configured models' real decode, timed")
    parser.add_argument("--backend-sampling", action="store_true", help="`backend-sampling = true` (default: unset)")
    parser.add_argument("--guest", type=Path, help="a prebuilt bench/guest component")
    parser.add_argument("--http-guest", type=Path, help="a prebuilt guest-examples/openai-compat component")
    args = parser.parse_args()
    guests = {name: path for name, path in (("bench", args.guest), ("openai-compat", args.http_guest)) if path}
    for path in guests.values():
        if not path.is_file():
            parser.error(f"{path}: no such file (build it with `llmhost build DIR`)")
    threads = int(os.environ.get("LLMHOST_BENCH_THREADS", "2"))
    backend_sampling = True if args.backend_sampling else None
    cache_dir = default_cache_dir()
    mode = Mode(backend_sampling=backend_sampling, guests=guests)
    if args.gpu:
        host_config, models = configured(threads)
        cache_dir, mode = host_config.cache_dir, Mode(True, backend_sampling, models, guests)
    print("\n".join(run(cache_dir, threads, args.rounds, mode)))
