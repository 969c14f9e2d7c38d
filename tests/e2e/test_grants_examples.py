"""The examples of grants (issue 50), through the user's path: guest-examples/agent (a chat whose tools are HTTP
APIs on the allow-list), guest-examples/counter (an http-app counting visits with `increment`) and
`llmhost new --template agent`. Their README commands run as written, from a copy of the example in a temporary
"repository root" (so that paths relative to a config file resolve there), with the data directory in it too.

The agent's calls are checked against the log of the API it called, and its answer against the same conversation
through the probe guest on this machine; the counter's counts are exact (no model), under concurrency and across a
`kill -9` of the server.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jsonschema
import pytest

import readme_output as readme
from llmhost import Host, build_component
from probe_driver import ProbeOutcome
from serve_driver import LISTENING, LLMHOST, Server, serving

from .conftest import SMOL
from .test_serve_examples import free_port

pytestmark = [pytest.mark.model, pytest.mark.wasm]
REPO = Path(__file__).resolve().parents[2]
AGENT = REPO / "guest-examples" / "agent"
API_LINE = re.compile(r"weather-api: GET (\S+) -> (\d{3})")
CALL = r"call: (get_weather|get_population)\((\{.*\})\) -> (\d{3}) (\{.*\})"


def constants(example: str, *names: str) -> list[Any]:
    """Constants of an example's app.py, evaluated from its source (not restated here): its plain assignments, in
    order, so that one may use another (`TOOLS` uses `CITY`)."""
    tree = ast.parse((REPO / "guest-examples" / example / "app.py").read_text())
    namespace: dict[str, Any] = {}
    for node in tree.body:
        plain = isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets)
        if plain and not any(isinstance(n, ast.Call) for n in ast.walk(node)):
            exec(compile(ast.Module([node], []), "app.py", "exec"), namespace)  # noqa: S102 (our own source)
    return [namespace[name] for name in names]


def mirror(example: str, root: Path) -> Path:
    """The example copied to ROOT/guest-examples/NAME, unchanged (so its build is the checkout's, cached)."""
    target = root / "guest-examples" / example
    shutil.copytree(REPO / "guest-examples" / example, target, ignore=shutil.ignore_patterns("__pycache__", "*.wasm"))
    return target


def config_with(config: Path, target: Path, replace: dict[str, str]) -> Path:
    """A copy of a guest's config, outside the guest's directory (every file there is part of its build's key),
    with `replace` applied (its ports)."""
    text = config.read_text()
    for old, new in replace.items():
        text = text.replace(old, new)
    target.write_text(text)
    return target


def readme_commands(readme_path: Path) -> tuple[list[str], str]:
    """The README's first `sh` block and the plain block after it (for READMEs without model output too)."""
    text = readme_path.read_text()
    found = re.search(r"```sh\n(.*?)```.*?```\n(.*?)```", text, re.S)
    assert found, readme_path
    return [line for line in found.group(1).splitlines() if line.strip()], found.group(2)


def environment(cache_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LLMHOST_CONFIG", "LLMHOST_LISTEN")}
    env["LLMHOST_CACHE_DIR"] = str(cache_dir)
    return env


def run_commands(
    commands: list[str], root: Path, cache_dir: Path, replace: dict[str, str], stack: ExitStack
) -> tuple[list[subprocess.CompletedProcess[str]], list[Server]]:
    """Run README commands in `root` as a shell would: `... &` in the background (its log read until it says it is
    listening; stopped when `stack` closes), the others in order, each of which must succeed. `.venv/bin/llmhost`
    is this checkout's; `python3` this interpreter."""
    done, background = [], []
    for line in commands:
        for old, new in replace.items():
            line = line.replace(old, new)
        argv = shlex.split(line.removesuffix("&").strip())
        argv[0] = {".venv/bin/llmhost": LLMHOST, "python3": sys.executable}.get(argv[0], argv[0])
        if line.rstrip().endswith("&"):
            process = subprocess.Popen(argv, cwd=root, env=environment(cache_dir), stderr=subprocess.PIPE, text=True)
            server = Server(process)
            stack.callback(server.stop)
            match = server.wait_for_line(LISTENING.pattern, 240)
            server.host, server.port = match.group(1), int(match.group(2))
            background.append(server)
            continue
        result = subprocess.run(argv, cwd=root, env=environment(cache_dir), capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, (line, result.stderr)
        done.append(result)
    return done, background


# -- guest-examples/counter ----------------------------------------------------------------------------------------


def test_counter_readme_concurrent_visits_and_a_restart(
    tmp_path: Path, llmhost_cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLMHOST_DATA_DIR", str(tmp_path / "data"))  # a fresh store, for every process below
    root = tmp_path / "root"
    example = mirror("counter", root)
    commands, expected = readme_commands(example / "README.md")
    port = f"127.0.0.1:{free_port()}"
    with ExitStack() as stack:
        results, [server] = run_commands(commands, root, llmhost_cache_dir, {"127.0.0.1:8080": port}, stack)
        # The README's output, exactly: the counts do not depend on the model or the machine.
        assert "".join(r.stdout for r in results[1:]) == expected
        # 16 clients at once, 4 visits each: every count from 1 to 64 answered exactly once (no lost update).
        with ThreadPoolExecutor(max_workers=16) as pool:
            answers = list(pool.map(lambda _: server.request("GET", "/together"), range(64)))
        assert all(status == 200 for status, _ in answers), answers[:3]
        assert sorted(json.loads(body)["visits"] for _, body in answers) == list(range(1, 65))
        # kill -9: every count that was answered is in the store when the server comes back.
        server.process.send_signal(signal.SIGKILL)
        server.process.wait(timeout=30)
    config = example / "llmhost.toml"
    with serving(["-c", str(config)], llmhost_cache_dir, cwd=root) as again:
        assert again.get_json("/") == {"path": "/", "visits": 3}
        assert again.get_json("/together") == {"path": "/together", "visits": 65}
        assert again.get_json("/hello") == {"path": "/hello", "visits": 2}
    # Without the grant: 503 naming the refusal, and the count untouched.
    config.write_text(config.read_text().replace('key-value-stores = ["default"]', ""))
    with serving(["-c", str(config)], llmhost_cache_dir, cwd=root) as refused:
        status, body = refused.request("GET", "/")
        assert status == 503 and json.loads(body)["error"].startswith("access-denied: "), body


# -- guest-examples/agent ------------------------------------------------------------------------------------------


@contextmanager
def weather_api(script: Path) -> Iterator[Server]:
    """The example's API (its own script), on a free port of 127.0.0.1."""
    process = subprocess.Popen([sys.executable, str(script), "0"], stderr=subprocess.PIPE, text=True)
    server = Server(process)
    try:
        match = server.wait_for_line(LISTENING.pattern, 30)
        server.host, server.port = match.group(1), int(match.group(2))
        yield server
    finally:
        server.stop()


def api_calls(server: Server) -> list[tuple[str, int]]:
    """(path with query, status) of every request the API logged."""
    return [(m.group(1), int(m.group(2))) for m in map(API_LINE.search, server.lines) if m]


def check_calls(output: str, api: Server) -> list[dict[str, Any]]:
    """The calls the agent printed: each a valid call of one of its tools, sent to the API (which logged exactly
    these requests, in order), and printed with the API's own answer. Returns them as chat tool calls."""
    city_schema, paths = constants("agent", "CITY", "PATHS")
    printed = [re.fullmatch(CALL, line) for line in output.splitlines() if line.startswith("call: ")]
    assert printed and all(printed), output
    calls = []
    for i, match in enumerate(printed):
        assert match is not None
        name, arguments, status, body = match.groups()
        jsonschema.validate(json.loads(arguments), city_schema)  # the host constrained the call to the schema
        path = f"{paths[name]}?city={quote(json.loads(arguments)['city'])}"
        api.wait_for_line(rf"GET {re.escape(path)} -> ", 10)  # the API logs a request once it has answered
        call = {"id": f"call_{i}", "name": name, "arguments": arguments, "path": path, "status": int(status)}
        calls.append({**call, "result": body})
    assert api_calls(api) == [(c["path"], c["status"]) for c in calls]  # these requests, and no other
    for call in calls:  # what the agent printed is what the API answers
        with urllib.request.urlopen(f"http://{api.host}:{api.port}{call['path']}") as answer:
            assert answer.read().decode() == call["result"]
    return calls


def test_agent_readme(tmp_path: Path, llmhost_cache_dir: Path) -> None:
    port = str(free_port())
    root = tmp_path / "root"
    example = mirror("agent", root)
    commands, expected = readme.readme_blocks(example / "README.md")
    config = config_with(example / "llmhost.toml", tmp_path / "agent.toml", {"8081": port})
    with ExitStack() as stack:
        replace = {"8081": port, "guest-examples/agent/llmhost.toml": str(config)}
        (_, run), [api] = run_commands(commands, root, llmhost_cache_dir, replace, stack)
        (prose,) = constants("agent", "PROSE")
        # The README's shape: one call (the JSON call format has one call per reply), then the answer: one sentence,
        # as the constraint allows (the last character may be missing if the sentence ran past max-tokens).
        answer = rf"answer: {prose.removesuffix('[.!?]')}[.!?]?"
        readme.assert_shape(run.stdout, expected, [CALL, answer])
        check_calls(run.stdout, api)


@pytest.fixture(scope="module")
def agent_wasm(llmhost_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_component(AGENT, tmp_path_factory.mktemp("agent") / "agent.wasm", cache_dir=llmhost_cache_dir)


def test_agent_answers_from_the_tool_result(
    agent_wasm: Path, real_host: Host, real_probe: Callable[..., ProbeOutcome]
) -> None:
    """The agent's two chats are the model's on this machine: the probe guest, given the same conversation, makes
    the same call, and after the API's result gives the same answer."""
    question, tools, params, final, prose, model = constants(
        "agent", "QUESTION", "TOOLS", "PARAMS", "FINAL", "PROSE", "MODEL"
    )
    assert model == SMOL  # the agent chats with the built-in instruct model
    with weather_api(AGENT / "weather_api.py") as api:
        base = f"http://{api.host}:{api.port}"
        done = real_host.load(agent_wasm, config={"weather-api": base}, allowed_outbound_hosts=[base]).run_captured([])
        assert done.exit_code == 0, done.stderr
        output = done.stdout.decode()
        calls = check_calls(output, api)
    inferencing = {"max-tokens": params["max_tokens"], "temperature": params["temperature"]}
    wit_tools = [{**tool, "parameters": json.dumps(tool["parameters"])} for tool in tools]
    asked = [{"role": "user", "content": question}]
    first = real_probe(
        "chat",
        model,
        json.dumps(asked),
        json.dumps({"inferencing": inferencing, "tools": wit_tools, "tool-choice": "required"}),
    )
    assert first.exit_code == 0, first.error
    made = first.value["message"]["tool-calls"]
    assert [(c["name"], c["arguments"]) for c in made] == [(c["name"], c["arguments"]) for c in calls]
    history = [
        *asked,
        {"role": "assistant", "tool-calls": [{k: c[k] for k in ("id", "name", "arguments")} for c in calls]},
        *({"role": "tool", "tool-call-id": c["id"], "content": c["result"]} for c in calls),
        {"role": "user", "content": final},
    ]
    second = real_probe(
        "chat", model, json.dumps(history), json.dumps({"inferencing": {**inferencing, "constraint": {"regex": prose}}})
    )
    assert second.exit_code == 0, second.error
    assert output.splitlines()[-1] == f"answer: {second.value['message']['content'].strip()}"


def test_agent_without_the_grant_is_denied_and_sends_nothing(agent_wasm: Path, real_host: Host) -> None:
    with weather_api(AGENT / "weather_api.py") as api:
        base = f"http://{api.host}:{api.port}"
        done = real_host.load(agent_wasm, config={"weather-api": base}).run_captured([])  # no allowed hosts
        assert done.exit_code == 0, done.stderr
        calls = [line for line in done.stdout.decode().splitlines() if line.startswith("call: ")]
        assert calls and all(" -> denied {" in line for line in calls), done.stdout
        assert api_calls(api) == []
        # And without its config value, it stops before asking the model.
        missing = real_host.load(agent_wasm, allowed_outbound_hosts=[base]).run_captured([])
        assert missing.exit_code == 1 and b"no config value `weather-api`" in missing.stderr


# -- llmhost new --template agent ----------------------------------------------------------------------------------


def test_the_agent_template_builds_and_calls_its_api(tmp_path: Path, llmhost_cache_dir: Path) -> None:
    env = environment(llmhost_cache_dir)
    made = subprocess.run(
        [LLMHOST, "new", "myagent", "--template", "agent"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    guest = tmp_path / "myagent"
    files = {"app.py", "weather_api.py", "README.md", "pyproject.toml", "llmhost.toml"}
    assert {p.name for p in guest.iterdir()} == files
    text = (guest / "README.md").read_text()
    assert text.startswith("# myagent\n") and "llmhost -c myagent/llmhost.toml run myagent.wasm" in text
    assert "guest-examples" not in text and 'name = "myagent"' in (guest / "pyproject.toml").read_text()
    # Its README's commands, from the directory above it: the API, the build, the run.
    port = str(free_port())
    config = config_with(guest / "llmhost.toml", tmp_path / "myagent.toml", {"8081": port})
    commands, _ = readme.readme_blocks(guest / "README.md")
    commands = [c.replace("llmhost ", ".venv/bin/llmhost ", 1) if c.startswith("llmhost ") else c for c in commands]
    with ExitStack() as stack:
        replace = {"8081": port, "myagent/llmhost.toml": str(config)}
        (built, run), [api] = run_commands(commands, tmp_path, llmhost_cache_dir, replace, stack)
        assert (tmp_path / "myagent.wasm").is_file()
        check_calls(run.stdout, api)
