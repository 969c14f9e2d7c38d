"""Shared fixtures: guests built once per run, hosts over the fake engine, and a probe-guest driver.

Building a guest (~20 s) and compiling it (~15-25 s) are the slow steps, so both are cached in one directory
per test run (or in $LLMHOST_TEST_CACHE_DIR, to share them across runs: the caches are keyed by content, so
reuse is always safe). The fixtures work for any `HostConfig`: tests/e2e uses them with the real engine.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from js_version_sources import write_sources as write_js_version_sources
from llmhost import App, FakeEngineConfig, Host, HostConfig, build_component
from probe_driver import ProbeOutcome, run_probe

REPO = Path(__file__).resolve().parents[1]
# Tests compile guests the way CI should: "fast" (Winch, ~2 s against ~15-25 s for Cranelift, and no background
# compile competing with the tests; Cranelift code a warm cache has is used). Dozens of guests are compiled in a clean
# run, and none of them runs long. test_compile_reaped.py, test_components.py and test_devloop.py test the other
# strategies. Set in the environment so that `llmhost` processes the tests start inherit it.
os.environ.setdefault("LLMHOST_COMPILE_STRATEGY", "fast")
GUEST_SOURCES = {
    "probe": REPO / "tests" / "guests" / "probe",
    "hello": REPO / "guest-examples" / "hello",
    "continuous": REPO / "guest-examples" / "continuous",
    "classify": REPO / "guest-examples" / "classify",
    "beam-search": REPO / "guest-examples" / "beam-search",
    "sdk_probe": REPO / "tests" / "guests" / "sdk_probe",  # the guest SDK (llmhost_guest) through a guest
    # The probe as it was at llmhost:llm@0.1.0, built against that WIT: 0.1.0 components must keep running.
    "probe_0_1_0": REPO / "tests" / "guests" / "probe_0_1_0",
    # Today's probe built against llmhost:llm@0.2.0: 0.2.0 components keep running on 0.2.1 hosts.
    "probe_0_2_0": REPO / "tests" / "guests" / "probe",
    # JavaScript guests (componentize-js): the behaviour probe and the command example.
    "js_probe": REPO / "tests" / "guests" / "js_probe",
    "hello-js": REPO / "guest-examples" / "hello-js",
}
# Guests of their own world (wit/ beside app.py), served as MCP tools by `llmhost mcp`.
TOOL_GUEST_SOURCES = {
    "mcp_probe": REPO / "tests" / "guests" / "mcp_probe",
    "mcp-tools": REPO / "guest-examples" / "mcp-tools",
}
# Guests built against another WIT directory than the current one.
GUEST_WIT = {"probe_0_1_0": REPO / "wit" / "0.1.0", "probe_0_2_0": REPO / "wit" / "0.2.0"}


# Guests of the `http-app` world (llmhost serve), built like the others.
HTTP_GUEST_SOURCES = {
    "http_probe": REPO / "tests" / "guests" / "http_probe",
    "chat-http": REPO / "guest-examples" / "chat-http",
    "openai-compat": REPO / "guest-examples" / "openai-compat",
}


@pytest.fixture(scope="session")
def llmhost_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    shared = os.environ.get("LLMHOST_TEST_CACHE_DIR")
    return Path(shared) if shared else tmp_path_factory.mktemp("llmhost-cache")


def prebuild_jobs(generated: Iterable[Path] = ()) -> list[tuple[Path, str | None, Path | None]]:
    """(source, world, wit) of every guest the session fixtures build, the other builds of a repository guest against
    another WIT, then every other guest directory of the repository as it is (each test that copies one builds the
    same sources): the test guests (integration, kv) first, then the examples and the `generated` sources of tests
    (e2e), the order `make test` runs the tests in."""
    jobs: list[tuple[Path, str | None, Path | None]] = [
        *((source, None, GUEST_WIT.get(name)) for name, source in GUEST_SOURCES.items()),
        *((source, "http-app", None) for source in HTTP_GUEST_SOURCES.values()),
        *((source, None, None) for source in TOOL_GUEST_SOURCES.values()),
    ]
    jobs.append((REPO / "tests" / "guests" / "outbound_probe", None, REPO / "wit" / "0.2.3"))  # test_transfers.py
    listed = {source for source, _, _ in jobs}
    for root in (REPO / "tests" / "guests", REPO / "guest-examples"):
        for source in sorted(root.iterdir()):
            if source not in listed and ((source / "app.py").is_file() or (source / "app.js").is_file()):
                jobs.append((source, None, None))
    return [*jobs, *((source, None, None) for source in generated)]


@pytest.fixture(scope="session", autouse=True)
def prebuilt_guests(llmhost_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """With $LLMHOST_TEST_PREBUILD (`make test` sets it): every guest of the repository, and the sources
    test_js_versions.py writes, are built in the background while the tests run (tests/prebuild.py), at idle CPU
    priority, into the shared build cache. A clean run's ~60 builds take ~11 s of CPU each, and the tests leave a
    core idle a quarter of the time (waiting on servers, clients and subprocesses). A test that needs a guest not
    built yet builds it (or waits for the build under way: the cache's per-entry lock). With a warm cache this is a
    lookup per guest. Stopped at the end of the session."""
    if not os.environ.get("LLMHOST_TEST_PREBUILD"):
        yield
        return
    generated = write_js_version_sources(tmp_path_factory.mktemp("prebuilt-sources"))  # as test_js_versions.py does
    jobs = [[str(source), world, wit and str(wit)] for source, world, wit in prebuild_jobs(generated.values())]
    out = tmp_path_factory.mktemp("prebuilt")
    command = [sys.executable, str(REPO / "tests" / "prebuild.py"), str(llmhost_cache_dir), str(out)]
    # Its own process: a build's Python work never holds the tests' GIL. Its own process group (SIGTERM reaches its
    # builds), in the tests' session (see prebuild.py).
    process = subprocess.Popen(command, stdin=subprocess.PIPE, text=True, process_group=0)
    assert process.stdin is not None
    process.stdin.write(json.dumps(jobs))
    process.stdin.close()
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture(scope="session")
def guest_wasm(llmhost_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every test guest, built once (in parallel: componentize-py is single-threaded) through llmhost.toolchains."""
    out = tmp_path_factory.mktemp("guests")
    with ThreadPoolExecutor(max_workers=2) as pool:  # two cores
        futures = {
            name: pool.submit(
                build_component, source, out / f"{name}.wasm", cache_dir=llmhost_cache_dir, wit=GUEST_WIT.get(name)
            )
            for name, source in GUEST_SOURCES.items()
        }
        return {name: future.result() for name, future in futures.items()}


@pytest.fixture(scope="session")
def http_wasm(llmhost_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every `http-app` guest, built once per run (in parallel)."""
    out = tmp_path_factory.mktemp("http-guests")
    with ThreadPoolExecutor(max_workers=2) as pool:  # two cores
        futures = {
            name: pool.submit(build_component, source, out / f"{name}.wasm", "http-app", cache_dir=llmhost_cache_dir)
            for name, source in HTTP_GUEST_SOURCES.items()
        }
        return {name: future.result() for name, future in futures.items()}


@pytest.fixture(scope="session")
def tool_wasm(llmhost_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every tool guest (`llmhost mcp`), built once per run (in parallel)."""
    out = tmp_path_factory.mktemp("tool-guests")
    with ThreadPoolExecutor(max_workers=2) as pool:  # two cores
        futures = {
            name: pool.submit(build_component, source, out / f"{name}.wasm", cache_dir=llmhost_cache_dir)
            for name, source in TOOL_GUEST_SOURCES.items()
        }
        return {name: future.result() for name, future in futures.items()}


@pytest.fixture(scope="session")
def probe_wasm(guest_wasm: dict[str, Path]) -> Path:
    return guest_wasm["probe"]


@pytest.fixture(scope="session")
def probe_0_1_0_wasm(guest_wasm: dict[str, Path]) -> Path:
    return guest_wasm["probe_0_1_0"]


@pytest.fixture(scope="session")
def probe_0_2_0_wasm(guest_wasm: dict[str, Path]) -> Path:
    return guest_wasm["probe_0_2_0"]


@pytest.fixture(scope="session")
def hello_wasm(guest_wasm: dict[str, Path]) -> Path:
    return guest_wasm["hello"]


@pytest.fixture(scope="session")
def fake_config(llmhost_cache_dir: Path) -> HostConfig:
    return HostConfig(engine=FakeEngineConfig(), cache_dir=llmhost_cache_dir)


@pytest.fixture(scope="session")
def compile_notes(fake_config: HostConfig, guest_wasm: dict[str, Path]) -> list[str]:
    """Compile every guest once per run (the first load may compile); the notes it printed, for cache tests."""
    notes: list[str] = []
    with Host(fake_config, note=notes.append) as host:
        for wasm in guest_wasm.values():
            host.load(wasm)
    return notes


@pytest.fixture(scope="session")
def fake_host(fake_config: HostConfig, compile_notes: list[str]) -> Iterator[Host]:
    with Host(fake_config) as host:
        yield host


@pytest.fixture(scope="session")
def probe_app(fake_host: Host, probe_wasm: Path) -> App:
    return fake_host.load(probe_wasm)


@pytest.fixture
def make_host(compile_notes: list[str]) -> Iterator[Callable[..., Host]]:
    """`make_host(config, **host_kwargs)`: a Host closed after the test (guests are already compiled)."""
    hosts: list[Host] = []

    def make(config: HostConfig, **kwargs: Any) -> Host:
        host = Host(config, **kwargs)
        hosts.append(host)
        return host

    yield make
    for host in hosts:
        host.close()


@pytest.fixture
def probe(probe_app: App) -> Callable[..., ProbeOutcome]:
    """`probe(*args)`: run the probe guest on the fake-engine host."""
    return lambda *args: run_probe(probe_app, *args)


@pytest.fixture(name="run_probe")
def run_probe_fixture() -> Callable[..., ProbeOutcome]:
    """`run_probe(app, *args)`, for probe apps loaded by other hosts (sandbox configs, the real engine)."""
    return run_probe
