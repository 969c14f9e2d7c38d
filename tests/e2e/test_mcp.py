"""`llmhost mcp`: a component's exported functions as MCP tools, driven by real clients — the official `mcp` SDK's
client over stdio and over Streamable HTTP, and the MCP Inspector's command-line mode — against the real model.

The tool guest (tests/guests/mcp_probe) has its own WIT world: `generate` (greedy `infer`, a structured answer),
`echo` (records, enums, variants, options, lists), `fail` (an error, a trap, a runaway loop, a memory hog) and
`extra.echo` (an interface export whose name clashes with the world's `echo`).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

import readme_output as readme
from llmhost import Host, InferencingParams
from serve_driver import LLMHOST, METRICS_LINE, Samples, Server, delta, scrape, serving

from .conftest import MODEL

pytestmark = pytest.mark.model

PROMPT = "The capital of France is"
GREEDY = InferencingParams(temperature=0.0, top_k=0, top_p=1.0, repeat_penalty=1.0, repeat_penalty_last_n_token_count=0)
LONG_TOKENS = 400  # a generation the cancellation test stops long before its end
INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"
# The server's models: no prefix cache, as the in-process host the answers are compared with (see real_config); a
# deadline that a loaded CI machine never reaches (the `limited` component has its own).
MODELS_TOML = f'[limits]\ndeadline-s = 300.0\n\n[models."{MODEL}"]\nprefix-cache = false\n'


def _env(cache_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LLMHOST_CONFIG", "LLMHOST_LISTEN")}
    env["LLMHOST_CACHE_DIR"] = str(cache_dir)
    return env


@pytest.fixture(scope="module")
def probe(tool_wasm: dict[str, Path]) -> Path:
    return tool_wasm["mcp_probe"]


@pytest.fixture(scope="module")
def models_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("mcp") / "models.toml"
    path.write_text('metrics-listen = "127.0.0.1:0"\n' + MODELS_TOML)
    return path


def _expected(host: Host, max_tokens: int) -> tuple[str, int]:
    result = host.infer(MODEL, PROMPT, GREEDY.model_copy(update={"max_tokens": max_tokens}))
    return result.text, result.usage.generated_token_count


def _text(result: Any) -> str:
    return "".join(block.text for block in result.content)


async def _generate_with_progress(session: ClientSession, tool: str, seen: dict[str, Any]) -> None:
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    arguments = {"prompt": PROMPT, "max-tokens": 24}
    seen["generate"] = await session.call_tool(tool, arguments, progress_callback=on_progress)
    seen["progress"] = list(progress)


CANCELLED_LINE = re.compile(r"generate: cancelled by the client after (\d+) tokens")


async def _cancel_a_long_call(session: ClientSession, tool: str, seen: dict[str, Any], log: Callable[[], str]) -> None:
    """Stop a long generation once it has made progress (the SDK sends `notifications/cancelled`), and wait for the
    server to log that the call ended (its tokens are counted then)."""
    started = anyio.Event()
    tokens: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        tokens.append(value)
        if value >= 3:
            started.set()

    async def long_call() -> None:
        arguments = {"prompt": PROMPT, "max-tokens": LONG_TOKENS}
        await session.call_tool(tool, arguments, progress_callback=on_progress)
        seen["long-finished"] = True

    async with anyio.create_task_group() as group:
        group.start_soon(long_call)
        with anyio.fail_after(120):
            await started.wait()
        group.cancel_scope.cancel()
    seen["tokens-at-cancel"] = tokens[-1]
    with anyio.fail_after(60):
        while CANCELLED_LINE.search(log()) is None:
            await anyio.sleep(0.1)


async def _eight_at_once(
    session: ClientSession, tool: str, samples: Callable[[], Samples], seen: dict[str, Any]
) -> None:
    results: list[Any] = [None] * 8

    async def call(i: int) -> None:
        results[i] = await session.call_tool(tool, {"prompt": PROMPT, "max-tokens": 16})

    before = samples()
    async with anyio.create_task_group() as group:
        for i in range(8):
            group.start_soon(call, i)
    after = samples()
    seen["concurrent"] = results
    seen["batch-steps"] = delta(before, after, "llmhost_decode_steps_total", model=MODEL)
    seen["batch-tokens"] = delta(before, after, "llmhost_generated_tokens_total", model=MODEL)


def _check_progress_cancel_and_batching(seen: dict[str, Any], log: str, expected_tokens: int) -> None:
    assert seen["progress"], "a call with a progress token got no progress notification"
    assert seen["progress"] == sorted(seen["progress"]) and seen["progress"][-1] <= expected_tokens
    assert "long-finished" not in seen
    cancelled = CANCELLED_LINE.search(log)
    assert cancelled is not None, log[-2000:]
    # Stopped soon after the client's cancel (tokens in flight while the notification travelled), not at its end.
    assert int(cancelled.group(1)) < min(LONG_TOKENS, seen["tokens-at-cancel"] + 40)
    for result in seen["concurrent"]:
        # Decoded in one batch, a row's greedy text may differ from a lone one's at near-ties: compare what
        # rounding cannot change.
        assert not result.is_error, _text(result)
        assert result.structured_content["generated"] == 16 and result.structured_content["finish"] == "length"
    # The 8 calls' generations shared decode steps: 128 tokens (plus 8 prefills) in far fewer steps.
    assert seen["batch-tokens"] == 8 * 16
    assert 0 < seen["batch-steps"] < 8 * 16 - 24, f"{seen['batch-steps']} steps for 128 tokens: not batched"


# --- stdio: one server process for the whole conversation ------------------------------------------------------


def test_stdio_tools_calls_errors_progress_and_cancellation(
    probe: Path, models_config: Path, llmhost_cache_dir: Path, real_host: Host, tmp_path: Path
) -> None:
    expected_text, expected_tokens = _expected(real_host, 24)
    errlog_path = tmp_path / "server.log"
    params = StdioServerParameters(
        command=LLMHOST, args=["mcp", str(probe), "-c", str(models_config)], env=_env(llmhost_cache_dir)
    )
    seen: dict[str, Any] = {}

    async def conversation() -> None:
        with errlog_path.open("w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                seen["tools"] = {tool.name: tool for tool in (await session.list_tools()).tools}

                await _generate_with_progress(session, "generate", seen)
                seen["err"] = await session.call_tool("fail", {"how": "err"})
                seen["trap"] = await session.call_tool("fail", {"how": "trap"})
                seen["bad-enum"] = await session.call_tool(
                    "echo", {"options": {"tone": "loud", "target": {"tag": "whole"}, "tags": []}, "count": 1}
                )
                seen["bad-range"] = await session.call_tool(
                    "echo", {"options": {"tone": "plain", "target": {"tag": "whole"}, "tags": []}, "count": 200}
                )
                seen["missing"] = await session.call_tool(
                    "echo", {"options": {"tone": "plain", "target": {"tag": "whole"}}, "count": 1}
                )
                seen["echo"] = await session.call_tool(
                    "echo",
                    {
                        "options": {"tone": "formal", "target": {"tag": "words", "val": 7}, "tags": ["a", "b"]},
                        "count": 2,
                    },
                )
                seen["extra"] = await session.call_tool("extra_echo", {"text": "unchanged"})

                await _cancel_a_long_call(session, "generate", seen, errlog_path.read_text)
                seen["after-cancel"] = await session.call_tool("extra_echo", {"text": "still serving"})
                address = METRICS_LINE.search(errlog_path.read_text())
                assert address is not None
                host, port = address.group(1), int(address.group(2))
                await _eight_at_once(session, "generate", lambda: scrape(host, port), seen)

    anyio.run(conversation)
    log = errlog_path.read_text()

    tools = seen["tools"]
    assert set(tools) == {"generate", "echo", "fail", "extra_echo"}  # `run`/`init` hooks are not tools
    assert tools["generate"].description == "Greedy completion of `prompt`, at most `max-tokens` tokens."
    assert tools["extra_echo"].description.startswith("Same name as the world's `echo`")
    generate_schema = tools["generate"].input_schema
    assert generate_schema["required"] == ["prompt", "max-tokens"]
    assert generate_schema["properties"]["max-tokens"] == {"type": "integer", "minimum": 0, "maximum": 2**32 - 1}
    assert tools["generate"].output_schema["required"] == ["generated", "text", "finish"]
    echo_schema = tools["echo"].input_schema
    assert echo_schema["properties"]["count"] == {"type": "integer", "minimum": -128, "maximum": 127}
    options = echo_schema["properties"]["options"]
    assert options["required"] == ["tone", "target", "tags"]  # `note` is an option<string>: optional
    assert options["properties"]["tone"] == {"type": "string", "enum": ["plain", "formal"]}
    assert options["properties"]["tags"] == {"type": "array", "items": {"type": "string"}}
    assert [case["properties"]["tag"]["const"] for case in options["properties"]["target"]["oneOf"]] == [
        "words",
        "sentences",
        "whole",
    ]
    assert tools["extra_echo"].output_schema is None  # a string answer is text only

    generated = seen["generate"]
    assert not generated.is_error, _text(generated)
    # The same text and count as the Python API with the same params: guest -> host -> llama.cpp, over MCP.
    assert generated.structured_content == {"generated": expected_tokens, "text": expected_text, "finish": "length"}
    assert json.loads(_text(generated)) == generated.structured_content
    _check_progress_cancel_and_batching(seen, log, expected_tokens)

    assert seen["err"].is_error and _text(seen["err"]) == "failed on purpose"
    assert seen["trap"].is_error and "ValueError: trapped on purpose" in _text(seen["trap"])
    assert seen["bad-enum"].is_error and "options.tone" in _text(seen["bad-enum"])
    assert "count" in _text(seen["bad-range"]) and "-128 to 127" in _text(seen["bad-range"])
    assert "options.tags: missing" in _text(seen["missing"])
    assert seen["echo"].structured_content == {
        "tone": "formal",
        "target": {"tag": "words", "val": 7},
        "tags": ["a", "b", "a", "b"],
        "note": None,
    }
    assert _text(seen["extra"]) == "unchanged" and seen["extra"].structured_content is None

    assert _text(seen["after-cancel"]) == "still serving"


# --- Streamable HTTP: several components, limits, concurrency ---------------------------------------------------


@pytest.fixture(scope="module")
def http_server(probe: Path, llmhost_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("mcp-http")
    config = folder / "mcp.toml"
    config.write_text(
        'max-concurrency = 8\nmetrics-listen = "127.0.0.1:0"\n'
        + MODELS_TOML
        + f"""
[components.probe]
source = "{probe}"

[components.limited]
source = "{probe}"
allowed-models = ["smollm2-135m"]
limits = {{ deadline-s = 3.0, max-memory-mb = 64 }}

[components.budget]
source = "{probe}"
limits = {{ max-tokens = 5 }}
"""
    )
    with serving(["-c", str(config)], llmhost_cache_dir, command="mcp") as server:
        yield server


def _http_session(server: Server) -> Any:
    return streamable_http_client(f"http://{server.host}:{server.port}/mcp")


def test_http_names_limits_progress_cancellation_and_batching(http_server: Server, real_host: Host) -> None:
    _, expected_tokens = _expected(real_host, 24)
    seen: dict[str, Any] = {}

    def samples() -> Samples:
        host, port = http_server.wait_for_line(METRICS_LINE.pattern, 10).groups()
        return scrape(host, int(port))

    async def conversation() -> None:
        async with _http_session(http_server) as (read, write, *_), ClientSession(read, write) as session:
            await session.initialize()
            seen["names"] = sorted(tool.name for tool in (await session.list_tools()).tools)
            before = samples()
            seen["spin"] = await session.call_tool("limited_fail", {"how": "spin"})
            seen["hog"] = await session.call_tool("limited_fail", {"how": "hog"})
            seen["err"] = await session.call_tool("probe_fail", {"how": "err"})
            seen["not-allowed"] = await session.call_tool("limited_generate", {"prompt": PROMPT, "max-tokens": 4})
            seen["budget"] = await session.call_tool("budget_generate", {"prompt": PROMPT, "max-tokens": 16})
            await _generate_with_progress(session, "probe_generate", seen)
            await _cancel_a_long_call(session, "probe_generate", seen, lambda: "\n".join(http_server.lines))
            await _eight_at_once(session, "probe_generate", samples, seen)
            seen["alive"] = await session.call_tool("limited_extra_echo", {"text": "alive"})
            seen["counts"] = (before, samples())

    anyio.run(conversation)
    # Two components export the same functions: each tool is qualified by its component (and interface).
    functions = ("generate", "echo", "fail", "extra_echo")
    components = ("probe", "limited", "budget")
    assert seen["names"] == sorted(f"{component}_{name}" for component in components for name in functions)
    assert seen["spin"].is_error and "ran past its deadline of 3.0 s" in _text(seen["spin"])
    assert seen["hog"].is_error and "ran out of memory" in _text(seen["hog"])
    assert seen["err"].is_error and _text(seen["err"]) == "failed on purpose"
    # Each call has its component's grants and budget: `allowed-models` and `max-tokens`.
    assert seen["not-allowed"].is_error and "ModelNotSupported" in _text(seen["not-allowed"])
    assert seen["budget"].structured_content["generated"] == 5, _text(seen["budget"])
    assert not seen["generate"].is_error and seen["generate"].structured_content["generated"] == expected_tokens
    _check_progress_cancel_and_batching(seen, "\n".join(http_server.lines), expected_tokens)
    assert _text(seen["alive"]) == "alive"
    # Tool calls count as serve's requests do (499: cancelled), and the guests' failures by kind.
    before, after = seen["counts"]
    assert delta(before, after, "llmhost_requests_total", component="probe", status="200") == 1 + 1 + 8
    assert delta(before, after, "llmhost_requests_total", component="probe", status="499") == 1
    assert delta(before, after, "llmhost_requests_total", component="limited", status="504") == 1
    assert delta(before, after, "llmhost_guest_failures_total", component="limited", kind="deadline") == 1
    assert delta(before, after, "llmhost_guest_failures_total", component="limited", kind="memory") == 1


def test_http_api_keys(probe: Path, llmhost_cache_dir: Path, tmp_path: Path) -> None:
    import httpx

    keys = tmp_path / "keys"
    keys.write_text("secret-key\n")
    config = tmp_path / "mcp.toml"
    config.write_text(f'api-keys-file = "{keys}"\n[components.probe]\nsource = "{probe}"\n')
    with serving(["-c", str(config)], llmhost_cache_dir, command="mcp") as server:
        url = f"http://{server.host}:{server.port}/mcp"
        body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        refused = httpx.post(url, json=body, headers={"accept": "application/json, text/event-stream"})
        assert refused.status_code == 401 and "API key" in refused.json()["error"]["message"]

        async def listed() -> list[str]:
            client = httpx.AsyncClient(headers={"authorization": "Bearer secret-key"})
            async with (
                client,
                streamable_http_client(url, http_client=client) as (read, write, *_),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                return [tool.name for tool in (await session.list_tools()).tools]

        assert "generate" in anyio.run(listed)


# --- the MCP Inspector's command-line mode ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def inspector(llmhost_cache_dir: Path) -> list[str]:
    """The Inspector's CLI, installed with npm into the test cache once (node and npm are on every machine)."""
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        pytest.fail("Node.js 20 and npm are needed for the MCP Inspector test (install nodejs and npm)")
    prefix = llmhost_cache_dir / "node" / INSPECTOR.replace("/", "+").replace("@", "")
    binary = prefix / "node_modules" / ".bin" / "mcp-inspector"
    if not binary.is_file():
        with tempfile.TemporaryDirectory(dir=llmhost_cache_dir) as staging:
            subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", "--ignore-scripts", "--prefix", staging, INSPECTOR],
                check=True,
                capture_output=True,
                timeout=600,
            )
            prefix.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(prefix, ignore_errors=True)
            os.replace(staging, prefix)
    # The Inspector starts its server with a few variables only (PATH, HOME...): the test cache and the tests' compile
    # strategy are passed on, or `llmhost mcp` would use ~/.cache/llmhost and compile with Cranelift in the background.
    settings = {"LLMHOST_CACHE_DIR": str(llmhost_cache_dir)}
    settings["LLMHOST_COMPILE_STRATEGY"] = os.environ["LLMHOST_COMPILE_STRATEGY"]
    return [str(binary), "--cli", *(f for k, v in settings.items() for f in ("-e", f"{k}={v}")), LLMHOST, "mcp"]


def _inspect(inspector: list[str], args: list[str], env: dict[str, str], cwd: Path | None = None) -> Any:
    """Run the Inspector's CLI (`inspector` + `args`) and return the JSON it prints."""
    done = subprocess.run([*inspector, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_inspector_cli_lists_and_calls(inspector: list[str], probe: Path, llmhost_cache_dir: Path) -> None:
    env = _env(llmhost_cache_dir)
    names = [tool["name"] for tool in _inspect(inspector, [str(probe), "--method", "tools/list"], env)["tools"]]
    assert sorted(names) == ["echo", "extra_echo", "fail", "generate"]
    call = ["--method", "tools/call", "--tool-name", "extra_echo", "--tool-arg", "text=hi there"]
    answer = _inspect(inspector, [str(probe), *call], env)
    assert answer["content"][0]["text"] == "hi there" and not answer.get("isError")


def test_cli_without_an_app_says_what_to_give() -> None:
    done = subprocess.run([LLMHOST, "mcp"], capture_output=True, text=True)
    assert done.returncode != 0 and "APP.wasm" in done.stderr


# --- the example and the template -------------------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]
NPX_INSPECTOR = ["npx", "-y", INSPECTOR, "--cli"]


def test_mcp_tools_readme(inspector: list[str], llmhost_cache_dir: Path, real_host: Host, tmp_path: Path) -> None:
    """guest-examples/mcp-tools: the README's commands (build, then `summarize` through the Inspector) give the
    summary the Python API gives for the guest's prompt; `extract` answers JSON that matches the schema."""
    import jsonschema

    commands, expected = readme.readme_blocks(REPO / "guest-examples" / "mcp-tools" / "README.md")
    build, call = (shlex.split(line) for line in commands)
    assert build[:2] == [".venv/bin/llmhost", "build"] and call[: len(NPX_INSPECTOR)] == NPX_INSPECTOR
    env = _env(llmhost_cache_dir)
    built = subprocess.run(
        [str(REPO / build[0]), *build[1:2], str(REPO / build[2]), *build[3:]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr
    answer = _inspect(
        inspector[:-2], [str(REPO / call[len(NPX_INSPECTOR)]), *call[len(NPX_INSPECTOR) + 1 :]], env, tmp_path
    )
    shown = json.loads(expected)
    assert answer.keys() == shown.keys() and not answer.get("isError")
    pairs = [call[i + 1].split("=", 1) for i, a in enumerate(call) if a == "--tool-arg"]
    args = {k: v for k, v in pairs}
    words = int(args["max-words"])
    prompt = f"Summarize the text in at most {words} words.\nText: {args['text']}\nSummary:"
    params = GREEDY.model_copy(update={"max_tokens": 2 * words + 8, "stop": ("\n\n",)})
    want = " ".join(real_host.infer(MODEL, prompt, params).text.split()[:words])
    assert answer["content"][0]["text"] == want

    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 30}, "age": {"type": "integer", "minimum": 0}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    text = "text=Maria Lopez is 34 and lives in Porto."
    call = ["--method", "tools/call", "--tool-name", "extract", "--tool-arg", text, "--tool-arg"]
    # The Inspector parses a --tool-arg value as JSON where it can: the schema goes as a JSON string of its text.
    schema_arg = f"schema={json.dumps(json.dumps(schema))}"
    result = _inspect(inspector, ["mcp-tools.wasm", *call, schema_arg], env, tmp_path)
    assert not result.get("isError"), result
    jsonschema.validate(json.loads(result["content"][0]["text"]), schema)  # constrained by the host


def test_new_mcp_tool_template(llmhost_cache_dir: Path, tmp_path: Path) -> None:
    env = _env(llmhost_cache_dir)
    created = subprocess.run(
        [LLMHOST, "new", "text-tools", "--template", "mcp-tool"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert created.returncode == 0, created.stderr
    guest = tmp_path / "text-tools"
    assert (guest / "wit" / "world.wit").read_text().startswith("package example:text-tools@0.1.0;")
    params = StdioServerParameters(command=LLMHOST, args=["mcp", str(guest)], env=env)

    async def listed() -> dict[str, Any]:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return {tool.name: tool for tool in (await session.list_tools()).tools}

    tools = anyio.run(listed)  # `llmhost mcp DIR` builds the new guest first
    assert sorted(tools) == ["extract", "summarize"]
    assert tools["summarize"].input_schema["required"] == ["text", "max-words"]
    assert tools["summarize"].description.startswith("Summarize `text`")
