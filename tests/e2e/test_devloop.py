"""The guest developer's loop: `llmhost new`, world detection, one-paragraph build errors, `llmhost run DIR`
(rebuilds exactly when the sources change), fast first compiles, and `llmhost bindings`. Real commands, real model."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import readme_output as readme
from llmhost import Host, HostConfig, InferencingParams
from llmhost.toolchains.world import declared_world, defined_world, detect_world, own_world
from serve_driver import serving

from .conftest import MODEL
from .test_examples import check_hello_output

pytestmark = [pytest.mark.model, pytest.mark.wasm]
REPO = Path(__file__).resolve().parents[2]
LLMHOST = str(Path(sys.executable).with_name("llmhost"))
EXAMPLES = sorted(p for p in (REPO / "guest-examples").iterdir() if (p / "app.py").is_file())


def llmhost(
    *args: str, cache_dir: Path, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if k != "LLMHOST_CONFIG"}
    full_env.update({"LLMHOST_CACHE_DIR": str(cache_dir), **(env or {})})
    return subprocess.run([LLMHOST, *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_the_world_of_every_example_is_detected(example: Path) -> None:
    if own_world(example) is not None:  # a tool guest's world is its own WIT's (wit/world.wit)
        assert detect_world(example) == own_world(example) == "tools"
        return
    # Declared in its pyproject.toml, and the same as what app.py defines (so either way finds it).
    assert declared_world(example) == defined_world(example) == detect_world(example)


def test_test_guests_without_pyproject_are_detected_from_app_py() -> None:
    assert detect_world(REPO / "tests" / "guests" / "probe") == "command"
    assert detect_world(REPO / "tests" / "guests" / "http_probe") == "http-app"


BROKEN = {
    "syntax": (
        "from wit_world import WitWorld\nclass WitWorld(WitWorld):\n    def run(self, args)\n        return 0\n",
        r"app\.py:3:\d+: syntax error: expected ':'",
    ),
    "import": (
        "import nothere\nfrom wit_world import WitWorld\nclass WitWorld(WitWorld):\n    def run(self, a):\n"
        "        return 0\n",
        r"guest: the guest imports modules it cannot have: nothere \(app\.py:1\): not installed in the guest "
        r"\(add its package to \[project\] dependencies",
    ),
    "world": (
        "from wit_world import exports\nclass WitWorld:\n    def run(self, a):\n        return 0\n",
        r"ImportError: cannot import name 'exports'.*built for `command`.*world = \"http-app\"",
    ),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_guest_gets_one_paragraph_naming_file_line_and_fix(
    tmp_path: Path, llmhost_cache_dir: Path, case: str
) -> None:
    source, pattern = BROKEN[case]
    guest = tmp_path / "guest"
    guest.mkdir()
    (guest / "app.py").write_text(source)
    done = llmhost("build", str(guest), "-o", str(tmp_path / "g.wasm"), cache_dir=llmhost_cache_dir, cwd=tmp_path)
    assert done.returncode == 2
    # (a build's progress lines, `[  0.1s] building …`, show in a log too: toolchains/progress.py)
    lines = [line for line in done.stderr.strip().splitlines() if not re.match(r"\[ *\d+\.\ds\] ", line)]
    assert len(lines) == 1 and lines[0].startswith("llmhost: error: "), done.stderr
    assert re.search(pattern, lines[0]), lines[0]
    assert "Traceback" not in done.stderr and "backtrace" not in done.stderr


def test_the_command_template_builds_and_runs_as_its_readme_says(
    tmp_path: Path, llmhost_cache_dir: Path, real_host: Host
) -> None:
    assert llmhost("new", "mybot", "--template", "command", cache_dir=llmhost_cache_dir, cwd=tmp_path).returncode == 0
    assert {p.name for p in (tmp_path / "mybot").iterdir()} == {"app.py", "README.md", "pyproject.toml"}
    commands, expected = readme.readme_blocks(tmp_path / "mybot" / "README.md")
    results = [llmhost(*shlex.split(c)[1:], cache_dir=llmhost_cache_dir, cwd=tmp_path) for c in commands]
    assert all(r.returncode == 0 for r in results), [r.stderr for r in results]
    check_hello_output(real_host, results[-1].stdout, expected, shlex.split(commands[-1])[-1])
    assert results[-1].stderr == ""  # progress notes are quiet without a terminal


@pytest.mark.parametrize(
    ("template", "path", "body"),
    [
        ("http-app", "/?prompt=The%20capital%20of%20France%20is", None),
        ("openai-compat", "/v1/models", None),
        ("chat", "/", None),
    ],
)
def test_http_templates_serve_from_their_directory(
    tmp_path: Path, llmhost_cache_dir: Path, real_host: Host, template: str, path: str, body: bytes | None
) -> None:
    assert llmhost("new", "svc", "--template", template, cache_dir=llmhost_cache_dir, cwd=tmp_path).returncode == 0
    with serving([str(tmp_path / "svc")], llmhost_cache_dir, cwd=tmp_path) as server:
        status, answer = server.request("GET", path)
        assert status == 200, answer
    if template == "http-app":
        _, expected = readme.readme_blocks(tmp_path / "svc" / "README.md")
        check_http_hello_answer(real_host, answer.decode(), expected, "The capital of France is")


def test_run_dir_rebuilds_exactly_when_the_sources_change(tmp_path: Path, llmhost_cache_dir: Path) -> None:
    assert llmhost("new", "loop", "--template", "command", cache_dir=llmhost_cache_dir, cwd=tmp_path).returncode == 0
    app = tmp_path / "loop" / "app.py"
    app.write_text(app.read_text().replace("max_tokens=32", "max_tokens=3"))  # built by an earlier run, or now
    from llmhost.toolchains.python import cached_build, wit_dir

    def run() -> tuple[bool, str]:
        """(whether this run built the sources, the guest's output)"""
        build = cached_build(tmp_path / "loop", wit_dir(), "command", cache_dir=llmhost_cache_dir)
        existed = build.is_file()
        done = llmhost("run", "loop", "--", "The capital of France is", cache_dir=llmhost_cache_dir, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        return not existed and build.is_file(), done.stdout

    _, first = run()
    assert run() == (False, first)  # unchanged: no build
    # An edit no earlier run made (the build cache is shared across test runs): one build, one cold build a run.
    app.write_text(app.read_text().replace("max_tokens=3", "max_tokens=4") + f"# {time.time_ns()}\n")
    built, second = run()
    assert built and second != first


def test_a_fast_first_compile_is_replaced_by_the_optimized_one(tmp_path: Path, llmhost_cache_dir: Path) -> None:
    from llmhost.toolchains.python import build_component

    guest = tmp_path / "fresh"
    guest.mkdir()
    (guest / "app.py").write_text(
        "from wit_world import WitWorld\n\n\nclass WitWorld(WitWorld):\n"
        "    def run(self, args):\n        print('fresh')\n        return 0\n"
    )
    wasm = build_component(guest, tmp_path / "fresh.wasm", cache_dir=llmhost_cache_dir)  # cached across runs
    # A compile cache of its own, so that the first load must compile (a unique build cost a cold build each run).
    config = HostConfig(cache_dir=tmp_path / "cache", compile_strategy="fast-first")
    with Host(config, note=lambda _: None) as host:
        app = host.load(wasm)
        assert app.strategy == "winch" and app.cache_file.name.endswith(".winch.cwasm")
        check_background_compile(str(tmp_path / "cache"))
        assert app.run_captured([]).exit_code == 0
    optimized = app.cache_file.with_name(app.cache_file.name.replace(".winch.cwasm", ".cwasm"))
    deadline = time.monotonic() + 240
    while not optimized.is_file() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert optimized.is_file(), "the background Cranelift compile never finished"
    with Host(config, note=lambda _: None) as host:
        again = host.load(wasm)
        assert again.strategy == "cranelift" and again.cache_file == optimized and not again.compiled


def check_background_compile(marker: str) -> None:
    """The background Cranelift compile of a cache under `marker` runs at idle priority, in this session (Linux
    shares the CPU between sessions before priorities count: one of its own took half the cores from llama.cpp), in a
    process group of its own (the terminal's Ctrl-C for this process does not reach it)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for proc in Path("/proc").iterdir():
            try:
                command = (proc / "cmdline").read_bytes().split(b"\0")
                if b"llmhost.runtime.optimize" not in command or not any(marker.encode() in a for a in command):
                    continue
                pid = int(proc.name)
                where = (os.getsid(pid), os.getpgid(pid))
                if os.sched_getscheduler(pid) != os.SCHED_IDLE:
                    continue  # not yet: the child lowers its own priority as it starts
            except (OSError, ValueError):
                continue  # not a process, or gone
            assert where == (os.getsid(0), pid), (where, os.getsid(0))
            return
        time.sleep(0.02)
    raise AssertionError("no background compile at idle priority was seen")


def test_bindings_are_written_for_editors(tmp_path: Path, llmhost_cache_dir: Path) -> None:
    done = llmhost(
        "bindings",
        str(REPO / "guest-examples" / "http-hello"),
        "-o",
        str(tmp_path / "b"),
        cache_dir=llmhost_cache_dir,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    package = tmp_path / "b" / "wit_world"
    assert "class Handler" in (package / "exports" / "__init__.py").read_text()
    assert "def infer(" in (package / "imports" / "llm.py").read_text()


def check_http_hello_answer(host: Host, answer: str, expected: str, prompt: str) -> None:
    """http-hello's answer has the README's shape, and is what the engine gives on this machine for the same
    request (the guest's params: greedy, at most 16 tokens, cut at the first newline)."""
    readme.assert_shape(answer, expected, [r'\{"text": "[^\n]*", "finish_reason": "(length|stop)"\}'])
    params = InferencingParams(max_tokens=16, stop=("\n",), temperature=0.0, repeat_penalty=1.1)
    want = host.infer(MODEL, prompt, params)
    assert json.loads(answer) == {"text": want.text, "finish_reason": want.finish_reason.value}


def test_http_hello_readme(tmp_path: Path, llmhost_cache_dir: Path, real_host: Host) -> None:
    commands, expected = readme.readme_blocks(REPO / "guest-examples" / "http-hello" / "README.md")
    serve_args = shlex.split(commands[0].rstrip("&"))[2:]
    serve_args = [a for i, a in enumerate(serve_args) if a != "--listen" and serve_args[i - 1] != "--listen"]
    with serving([str(REPO / serve_args[0])], llmhost_cache_dir, cwd=REPO) as server:
        url = shlex.split(commands[1])[-1].replace("http://127.0.0.1:8080", server.url)
        try:
            with urllib.request.urlopen(url, timeout=60) as response:  # noqa: S310 (loopback)
                answer = response.read().decode()
        except urllib.error.HTTPError as error:  # the guest's own error body and the server's log say why
            raise AssertionError(f"{error.code}: {error.read()[:500]!r}; log: {server.lines[-20:]}") from None
        check_http_hello_answer(real_host, answer, expected, "The capital of France is")
