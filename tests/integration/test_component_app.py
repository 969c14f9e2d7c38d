"""`llmhost.asgi.component_app` (issue 58): serve's ASGI app for one component, mounted under a path in a Starlette
app under uvicorn, on the fake engine: the guest sees the path below the mount, and serve's semantics hold there
(API keys, the body limit, the deadline, a disconnect cancelling the guest, the metrics); and `AsyncHost` on the fake
engine (whose generations are read on the pool: only a local model's are polled)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from llmhost import AsyncHost, FakeEngineConfig, Host, HostConfig, HostError, InferencingParams, InvalidInput, LoadError
from llmhost import component_app as make_app
from llmhost.asgi import ComponentApp
from llmhost.serve.app import ServeApp
from llmhost.shell.metrics import ServeMetrics

pytestmark = pytest.mark.wasm
MODEL = "gemma-3-270m"


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory, llmhost_cache_dir: Path) -> Iterator[Host]:
    config = HostConfig(engine=FakeEngineConfig(script="Hello from the fake engine."), cache_dir=llmhost_cache_dir)
    with Host(config) as running:
        yield running


@contextlib.asynccontextmanager
async def served(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            yield client
    finally:
        server.should_exit = True
        await task


def mounted(component: ComponentApp) -> Starlette:
    async def native(request: Any) -> PlainTextResponse:
        return PlainTextResponse("native")

    return Starlette(routes=[Route("/native", native), Mount("/probe", app=component)])


def test_mounted_component_sees_the_path_below_the_mount(host: Host, http_wasm: dict[str, Path]) -> None:
    metrics = ServeMetrics(["http_probe"], [MODEL])
    component = make_app(host, http_wasm["http_probe"], api_keys=["sk-1"], metrics=metrics)
    auth = {"authorization": "Bearer sk-1"}

    async def run() -> None:
        async with served(mounted(component)) as client:
            assert (await client.get("/native")).text == "native"
            echo = await client.get("/probe/echo?x=1", headers=auth)
            assert echo.status_code == 200 and json.loads(echo.text)["path"] == "/echo?x=1"
            assert (await client.get("/probe/echo")).status_code == 401  # the API key, as serve's
            assert (await client.get("/probe/nothing", headers=auth)).status_code == 404  # the guest's own 404
            inferred = await client.get(
                "/probe/infer", params={"model": MODEL, "prompt": "Hi", "max_tokens": 5}, headers=auth
            )
            expected = host.infer(MODEL, "Hi", InferencingParams(max_tokens=5)).text
            assert json.loads(inferred.text)["ok"]["text"] == expected

    asyncio.run(run())
    component.close()
    sample = metrics.registry.get_sample_value
    assert sample("llmhost_requests_total", {"component": "http_probe", "status": "200"}) == 2
    assert sample("llmhost_requests_total", {"component": "http_probe", "status": "401"}) == 1
    assert sample("llmhost_requests_total", {"component": "http_probe", "status": "404"}) == 1


def test_limits_apply_under_the_mount(host: Host, http_wasm: dict[str, Path]) -> None:
    limits = {"max_body_bytes": 16, "deadline_s": 1.0}
    component = make_app(host, http_wasm["http_probe"], limits=limits, max_concurrency=2)

    async def run() -> None:
        async with served(mounted(component)) as client:
            big = await client.post("/probe/echo", content=b"x" * 17)
            assert big.status_code == 413 and "`limits.max-body-bytes` in component_app()" in big.text
            late = await client.get("/probe/loop")
            assert late.status_code == 504 and "deadline of 1.0 s" in late.text
            assert (await client.post("/probe/echo", content=b"x" * 16)).status_code == 200

    asyncio.run(run())
    component.close()


def test_bad_options_are_host_errors_naming_them(host: Host, http_wasm: dict[str, Path]) -> None:
    with pytest.raises(HostError, match="deadline_s"):
        make_app(host, http_wasm["http_probe"], limits={"deadline_s": 0})
    with pytest.raises(HostError, match="max_concurrency"):
        make_app(host, http_wasm["http_probe"], max_concurrency=0)
    with pytest.raises(HostError, match="allowed-outbound-hosts|allowed_outbound_hosts"):
        make_app(host, http_wasm["http_probe"], allowed_outbound_hosts=["not a url"])


def test_async_host_on_a_pooled_engine_gives_the_sync_results(host: Host) -> None:
    async def run() -> None:
        async with AsyncHost(host, max_threads=2) as aio:
            assert await aio.infer(MODEL, "Hi") == host.infer(MODEL, "Hi")
            messages = [{"role": "user", "content": "Hi"}]
            assert await aio.chat(MODEL, messages) == host.chat(MODEL, messages)
            assert await aio.apply_chat_template(MODEL, messages) == host.apply_chat_template(MODEL, messages)
            assert await aio.tokenize(MODEL, "Hi") == host.tokenize(MODEL, "Hi")
            with pytest.raises(InvalidInput):  # input errors come with the await that starts it
                await aio.infer_stream(MODEL, "\ud800")
            stream = await aio.infer_stream(MODEL, "Hi")
            first = await stream.__anext__()
            await stream.aclose()
            assert first.text and [e async for e in stream] == []

    asyncio.run(run())


ENCODED_PREFIXES = ("/%74ools/echo", "/tools%2fecho", "/%74ools%2Fecho", "/tools%2Fecho?x=1")


def test_an_encoded_mount_prefix_is_refused_as_serve_refuses_it(host: Host, http_wasm: dict[str, Path]) -> None:
    """Issue 66: `/%74ools/x` and `/tools%2fx` reached the `/tools` mount (Starlette matches the decoded path) and the
    guest saw the raw path. serve routes the raw path and sends neither to `/tools`; the mount now answers both with
    serve's 404, while the plain prefix, and an encoding below it, still reach the guest."""
    component = make_app(host, http_wasm["http_probe"])
    tools = Starlette(routes=[Mount("/tools", app=component)])
    serve = ServeApp(dict(component.components), {"/tools": component.component.name}, component._executor)

    async def statuses(client: httpx.AsyncClient) -> dict[str, tuple[int, str]]:
        got: dict[str, tuple[int, str]] = {}
        for path in (*ENCODED_PREFIXES, "/tools/echo", "/tools/%65cho"):
            reply = await client.get(httpx.URL(f"{client.base_url}{path}"))
            text = json.loads(reply.text)["path"] if reply.status_code == 200 else reply.text.strip()
            got[path] = (reply.status_code, text)
        return got

    async def run() -> tuple[dict[str, tuple[int, str]], dict[str, tuple[int, str]]]:
        async with served(tools) as client:
            mounted = await statuses(client)
        async with served(serve) as client:
            routed = await statuses(client)
        return mounted, routed

    mounted, routed = asyncio.run(run())
    component.close()
    for path in ENCODED_PREFIXES:  # the request reached the server with its encoding (serve's message quotes it)
        assert routed[path] == (404, f"no route for {path.split('?')[0]}"), routed
        assert mounted[path] == routed[path], (path, mounted)
    assert routed["/tools/echo"] == (200, "/tools/echo") and mounted["/tools/echo"] == (200, "/echo")
    assert routed["/tools/%65cho"][0] == mounted["/tools/%65cho"][0] == 404  # the guest's own: "/%65cho" is no echo
    assert "http-probe: no operation" in mounted["/tools/%65cho"][1]


def test_a_mount_point_a_client_must_encode_is_stripped(host: Host, http_wasm: dict[str, Path]) -> None:
    component = make_app(host, http_wasm["http_probe"])
    app = Starlette(routes=[Mount("/my tools/é", app=component)])

    async def run() -> httpx.Response:
        async with served(app) as client:
            return await client.get("/my%20tools/%C3%A9/echo?x=1")

    reply = asyncio.run(run())
    component.close()
    assert reply.status_code == 200 and json.loads(reply.text)["path"] == "/echo?x=1"


def test_a_guest_directory_is_built_through_the_cache_as_the_cli_builds_it(
    host: Host, http_wasm: dict[str, Path], hello_wasm: Path, tmp_path: Path
) -> None:
    """`component_app(host, DIR)` and `Host.load(DIR)` take a guest directory, as `serve DIR` and `run DIR` do:
    copies of guests the session built already, so the content-keyed build cache serves them. A directory of the
    other world is a `LoadError` naming the command for it."""
    repo = Path(__file__).resolve().parents[2]
    skip = shutil.ignore_patterns("__pycache__")
    http_dir = shutil.copytree(repo / "tests" / "guests" / "http_probe", tmp_path / "my-probe", ignore=skip)
    hello_dir = shutil.copytree(repo / "guest-examples" / "hello", tmp_path / "hello", ignore=skip)
    component = make_app(host, http_dir)
    assert component.name == "my-probe"  # the directory's name, as serve names a DIR's component

    async def run() -> httpx.Response:
        async with served(mounted(component)) as client:
            return await client.get("/probe/echo?x=1")

    reply = asyncio.run(run())
    component.close()
    assert reply.status_code == 200 and json.loads(reply.text)["path"] == "/echo?x=1"
    args = ["The capital of France is"]
    assert host.load(hello_dir).run_captured(args) == host.load(hello_wasm).run_captured(args)
    with pytest.raises(LoadError, match="is a guest of the `http-app` world; use `llmhost serve`"):
        host.load(http_dir)
    with pytest.raises(LoadError, match="is a guest of the `command` world; use `llmhost run`"):
        make_app(host, hello_dir)
