"""The guest developer's loop (part of `make bench`), through the real `llmhost` command.

- Edit-run loop: from a changed `app.py` to the guest's first output with `llmhost run DIR` (build + fast compile
  + model load + generation), and the same with nothing changed; for each built-in model (the `command`
  template's guest with its MODEL set to it), the models interleaved.
- First run of a new component, build excluded: `llmhost run APP.wasm` with a cold compile cache, fast-first
  (Winch, Cranelift in the background) against optimized (waiting for Cranelift).
- Guest CPU speed: a Python-heavy loop in a guest compiled by Winch ÷ the same compiled by Cranelift.
- A rebuild of a guest with PyPI dependencies after an edit (the install cached) beside the same app without them.
The last three make no LLM call: they do not depend on the model.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from wasmtime.component import Component

from llmhost import Host, HostConfig
from llmhost.domain.limits import DEFAULT_MODEL, GENERATIVE_MODELS
from llmhost.runtime.components import create_wasmtime_engine
from llmhost.toolchains.python import build_component

LLMHOST = str(Path(sys.executable).with_name("llmhost"))
LOOP_GUEST = """\
import json
import time

from wit_world import WitWorld

# {unique}


class WitWorld(WitWorld):
    def run(self, args):
        n = int(args[0]) if args else 300000
        started = time.perf_counter()
        words = {{}}
        for i in range(n):
            key = str(i % 997)
            words[key] = words.get(key, 0) + i * i % 13
        text = json.dumps(words)
        print(json.dumps({{"seconds": time.perf_counter() - started, "size": len(text)}}))
        return 0
"""


def _time_to_first_output(command: list[str], env: dict[str, str], cwd: Path) -> float:
    """Seconds from starting `command` to its first byte on stdout (then it runs to its end)."""
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert process.stdout is not None
    process.stdout.read(1)
    first = time.perf_counter() - started
    process.stdout.read()
    if process.wait() != 0:
        raise RuntimeError(f"{command} failed")
    return first


def _wait_for_background_compiles(cache_dir: Path, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while any((cache_dir / "components").glob("*.compiling")) and time.monotonic() < deadline:
        time.sleep(0.5)


def run(cache_dir: Path) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "LLMHOST_CONFIG"}
    env.update(LLMHOST_CACHE_DIR=str(cache_dir), LLMHOST_COMPILE_STRATEGY="fast-first")
    with tempfile.TemporaryDirectory(prefix="llmhost-devloop-") as tmp:
        work = Path(tmp)
        # One guest per model: the `command` template (guest-examples/hello), its MODEL set to that model.
        apps: dict[str, tuple[str, str]] = {}  # model -> (guest directory, original app.py)
        for index, model in enumerate(GENERATIVE_MODELS):
            name = "loopapp" if model == DEFAULT_MODEL else f"loopapp{index}"
            subprocess.run([LLMHOST, "new", name, "--template", "command"], cwd=work, env=env, check=True)
            text = (work / name / "app.py").read_text()
            if model != DEFAULT_MODEL:
                assert f'MODEL = "{DEFAULT_MODEL}"' in text, "the command template names its model in MODEL"
                text = text.replace(f'MODEL = "{DEFAULT_MODEL}"', f'MODEL = "{model}"')
            apps[model] = (name, text)
        edited: dict[str, list[float]] = {model: [] for model in apps}
        unchanged: dict[str, list[float]] = {model: [] for model in apps}
        for i in range(3):
            for model, (name, original) in apps.items():  # the models interleaved, round by round
                command = [LLMHOST, "run", name, "--", "The capital of France is"]
                _wait_for_background_compiles(cache_dir)  # measure each edit alone
                (work / name / "app.py").write_text(original + f"# edit {time.time_ns()} {i}\n")
                edited[model].append(_time_to_first_output(command, env, work))
                unchanged[model].append(_time_to_first_output(command, env, work))
        _wait_for_background_compiles(cache_dir)
        # First run of a new component, build excluded, cold compile cache: fast-first vs optimized.
        first: dict[str, list[float]] = {"fast-first": [], "optimized": []}
        for i in range(2):
            for strategy in first:
                guest = work / f"new-{strategy}-{i}"
                guest.mkdir()
                (guest / "app.py").write_text(LOOP_GUEST.format(unique=time.time_ns()))
                wasm = build_component(guest, work / f"{guest.name}.wasm", cache_dir=cache_dir)
                run_env = dict(env, LLMHOST_COMPILE_STRATEGY=strategy)
                first[strategy].append(_time_to_first_output([LLMHOST, "run", str(wasm), "--", "1000"], run_env, work))
                _wait_for_background_compiles(cache_dir)
        cpu = _guest_cpu_ratio(work, cache_dir)
        deps_s, plain_s = _rebuild_with_dependencies(work, cache_dir)
    rows = [
        "Through the `llmhost` command (a fresh process each time, fast-first compiles); times from the command's "
        "start to the guest's first output byte, median of 3 (edits) or 2 (new components). The edit-run rows run "
        "the `command` template's guest once per model (the models interleaved); the last three rows run a guest "
        "that makes no LLM call (no model is loaded), so they do not depend on the model.",
        "",
        "| model | measure | value | target |",
        "| --- | --- | ---: | ---: |",
    ]
    for model in apps:
        rows += [
            f"| {model} | edit-run loop: `app.py` changed → first output of `llmhost run DIR` (build, Winch compile, "
            f"model load, 32 tokens) | **{statistics.median(edited[model]):.1f} s** | ≤ 25 s |",
            f"| {model} | the same with nothing changed (no build, compiled code cached) | "
            f"**{statistics.median(unchanged[model]):.2f} s** | ≤ 1 s |",
        ]
    return rows + [
        f"| none | first run of a new component, build excluded: fast-first (Winch now, Cranelift in the background) "
        f"| **{statistics.median(first['fast-first']):.1f} s** | ≤ 6 s |",
        f"| none | the same, optimized only (waits for Cranelift) | {statistics.median(first['optimized']):.1f} s | |",
        f"| none | guest CPU speed, a Python-heavy loop (dict updates, json.dumps): Winch-compiled time ÷ "
        f"Cranelift-compiled time ({cpu[0] * 1000:.0f} ms ÷ {cpu[1] * 1000:.0f} ms) | {cpu[0] / cpu[1]:.2f}× | |",
        f"| none | `llmhost build` after an edit, PyPI dependencies unchanged (tests/guests/deps_probe: jinja2, "
        f"python-dateutil, pyyaml, humanize, a local package; installed once, then no pip and no network): "
        f"{deps_s:.1f} s, against {plain_s:.1f} s for the same app without dependencies | "
        f"**+{deps_s - plain_s:.1f} s** | ≤ +5 s |",
    ]


def _rebuild_with_dependencies(work: Path, cache_dir: Path) -> tuple[float, float]:
    """Median build time of an edited guest whose dependencies' install is cached, and of the same app with its
    dependencies installed as plain files in its own directory (no install step), 3 edits each, interleaved."""
    import shutil

    repo = Path(__file__).resolve().parents[1]
    with_deps, without = work / "guests" / "deps_probe", work / "plain" / "deps_probe"
    shutil.copytree(repo / "tests" / "guests" / "deps_probe", with_deps)
    shutil.copytree(repo / "tests" / "guests" / "deps_shared", work / "guests" / "deps_shared")
    original = (with_deps / "app.py").read_text()
    build_component(with_deps, work / "deps.wasm", cache_dir=cache_dir)  # the install, once
    from llmhost.toolchains import deps

    declared = deps.declared(with_deps)
    assert declared is not None
    installed = cache_dir / "guest-deps" / declared.key()
    shutil.copytree(installed, without, ignore=shutil.ignore_patterns("*.dist-info", deps.STRIPPED_FILE))
    shutil.copyfile(with_deps / "app.py", without / "app.py")
    times: dict[Path, list[float]] = {with_deps: [], without: []}
    for i in range(3):
        for guest in times:
            (guest / "app.py").write_text(original + f"# edit {time.time_ns()} {i}\n")
            started = time.perf_counter()
            build_component(guest, work / "edited.wasm", cache_dir=cache_dir)
            times[guest].append(time.perf_counter() - started)
    return statistics.median(times[with_deps]), statistics.median(times[without])


def _guest_cpu_ratio(work: Path, cache_dir: Path) -> tuple[float, float]:
    """(Winch seconds, Cranelift seconds) of the loop guest, timed inside the guest, best of 3 each."""
    guest = work / "cpu"
    guest.mkdir()
    (guest / "app.py").write_text(LOOP_GUEST.format(unique="cpu"))
    wasm = build_component(guest, work / "cpu.wasm", cache_dir=cache_dir)
    times = []
    for strategy in ("winch", "cranelift"):
        engine = create_wasmtime_engine(strategy)
        component = Component(engine, wasm.read_bytes())
        with Host(HostConfig(cache_dir=cache_dir, compile_strategy="optimized"), note=lambda _: None) as host:
            host.load(wasm)  # a linker for this component's imports
            best = []
            for _ in range(3):
                best.append(_run_loop(host, engine, component, wasm))
            times.append(min(best))
    return times[0], times[1]


def _run_loop(host: Host, engine: object, component: Component, wasm: Path) -> float:
    from llmhost.api import App
    from llmhost.interfaces.linker import build_linker
    from llmhost.runtime.components import LoadedComponent

    linker = build_linker(engine, component, host._llm, host.limits)  # type: ignore[arg-type]
    app = App(host, wasm, LoadedComponent(component, wasm, False, engine), linker, engine)  # type: ignore[arg-type]
    done = app.run_captured(["300000"])
    return float(json.loads(done.stdout.decode().strip().splitlines()[-1])["seconds"])
