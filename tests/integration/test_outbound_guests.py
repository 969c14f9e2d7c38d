"""Outbound HTTP and config values through real guests (componentize-py, the guest SDK's `http` and `config`): the
Python API (`Host.load(..., allowed_outbound_hosts=...)`), `llmhost run` and `llmhost serve`, against real servers
on loopback (tests/outbound_servers.py). A guest with no grants is denied everything; granted, it fetches; each
bad input and fault of the issue is its own error, and the host goes on serving. A config value taken from the
environment reaches the guest and never any output or log (debug level included)."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from llmhost import App, FakeEngineConfig, Host, HostConfig, build_component
from llmhost.config import EnvValue, SandboxConfig
from outbound_servers import TestServer, self_signed_certificate, serving, tls_server_context, wait_for
from probe_driver import ProbeOutcome, run_probe
from serve_driver import Server
from serve_driver import serving as serving_llmhost

pytestmark = pytest.mark.wasm

REPO = Path(__file__).resolve().parents[2]
GUESTS = {"outbound_probe": "command", "outbound_app": "http-app"}
GENEROUS_S = 20.0  # an upper bound on something that must stop: never a speed assertion
FIFTY_MB = 50 * 1024 * 1024
SECRET = "s3cret-value-7d1f0c2b"  # what the environment holds: must reach the guest, and nothing else


@pytest.fixture(scope="module")
def wasm(llmhost_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("outbound-guests")
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            name: pool.submit(
                build_component, REPO / "tests" / "guests" / name, out / f"{name}.wasm", world,
                cache_dir=llmhost_cache_dir,
            )
            for name, world in GUESTS.items()
        }  # fmt: skip
        return {name: future.result() for name, future in futures.items()}


@pytest.fixture(scope="module")
def server() -> Iterator[TestServer]:
    with serving() as running:
        yield running


@pytest.fixture(scope="module")
def host(llmhost_cache_dir: Path) -> Iterator[Host]:
    with Host(HostConfig(engine=FakeEngineConfig(), cache_dir=llmhost_cache_dir)) as running:
        yield running


@pytest.fixture(scope="module")
def granted(host: Host, wasm: dict[str, Path], server: TestServer) -> App:
    return host.load(
        wasm["outbound_probe"],
        allowed_outbound_hosts=[f"http://127.0.0.1:{server.port}"],
        config={"API_BASE": server.url("/"), "MODE": "test"},
    )


Fetch = Callable[..., ProbeOutcome]


def fetcher(app: App) -> Fetch:
    """`fetch(url, **spec)`: the guest's `http.request` of `url`."""
    return lambda url, **spec: run_probe(app, "fetch", json.dumps({"url": url, **spec}))


@pytest.fixture
def fetch(granted: App) -> Fetch:
    return fetcher(granted)


def error_kind(outcome: ProbeOutcome) -> str:
    assert outcome.error is not None, (outcome.value, outcome.stderr)
    return outcome.error["kind"]


def test_a_guest_with_no_grants_is_denied_everything(host: Host, wasm: dict[str, Path], server: TestServer) -> None:
    bare = fetcher(host.load(wasm["outbound_probe"]))
    before = len(server.hits)
    for url in (server.url("/hello"), server.url("/hello", "localhost"), "https://example.com/", "not a url",
                "http://169.254.169.254/latest/meta-data/"):  # fmt: skip
        outcome = bare(url)
        assert error_kind(outcome) == "denied", outcome.error
    assert "allowed-outbound-hosts" in outcome.error["message"]  # type: ignore[index]
    assert len(server.hits) == before


def test_granted_it_fetches_from_a_local_server(fetch: Fetch, server: TestServer) -> None:
    hello = fetch(server.url("/hello"))
    assert hello.value["status"] == 200 and hello.value["text"] == "hello"
    assert hello.value["headers"]["x-test"] == "Value"
    posted = fetch(server.url("/echo"), method="POST", body={"q": "weather"}, headers={"x-key": "k"})
    echoed = json.loads(posted.value["text"])
    assert (echoed["method"], json.loads(echoed["body"])) == ("POST", {"q": "weather"})
    assert ["content-type", "application/json"] in echoed["headers"] and ["x-key", "k"] in echoed["headers"]
    missing = fetch(server.url("/status/404"))
    assert (missing.exit_code, missing.value["status"], missing.value["text"]) == (0, 404, "status 404")


def test_localhost_granted_by_name(host: Host, wasm: dict[str, Path], server: TestServer) -> None:
    by_name = fetcher(host.load(wasm["outbound_probe"], allowed_outbound_hosts=["http://localhost:*"]))
    assert by_name(server.url("/hello", "localhost")).value["text"] == "hello"
    assert error_kind(by_name(server.url("/hello"))) == "denied"  # 127.0.0.1 is not `localhost` by name


def test_a_wildcard_grant_still_refuses_loopback(host: Host, wasm: dict[str, Path], server: TestServer) -> None:
    everything = fetcher(host.load(wasm["outbound_probe"], allowed_outbound_hosts=["*://*:*"]))
    for url in (server.url("/hello"), server.url("/hello", "localhost"), f"http://[::1]:{server.port}/"):
        outcome = everything(url)
        assert error_kind(outcome) == "denied" and "loopback address" in outcome.error["message"]  # type: ignore[index]


@pytest.mark.parametrize(
    ("spec", "kind"),
    [
        ({"url": "http://localhost:{port}/hello"}, "denied"),  # a host that is not granted
        ({"url": "http://127.0.0.1:{port}/a b"}, "invalid-request"),  # malformed URL
        ({"url": "ftp://127.0.0.1:{port}/"}, "invalid-request"),
        ({"url": "http://127.0.0.1:{port}/echo", "headers": {"x-a": "1\r\nx-injected: 1"}}, "invalid-request"),
        ({"url": "http://127.0.0.1:{port}/echo", "method": "GET /echo HTTP/1.1"}, "invalid-request"),
        ({"url": "http://127.0.0.1:{port}/loop"}, "too-large"),  # a redirect loop
        ({"url": "http://127.0.0.1:{port}/redirect?to=http://localhost:{port}/hello"}, "denied"),
        ({"url": "http://127.0.0.1:{port}/redirect?to=http://169.254.169.254/"}, "denied"),
        ({"url": "http://127.0.0.1:{port}/big?bytes=" + str(FIFTY_MB)}, "too-large"),
        ({"url": "http://127.0.0.1:{port}/never", "timeout_s": 1}, "timeout"),
        ({"url": "http://127.0.0.1:{port}/trickle?ms=20", "timeout_s": 1}, "timeout"),
    ],
)
def test_bad_input_and_faults_are_specific_errors_and_the_host_goes_on(
    fetch: Fetch, server: TestServer, spec: dict[str, Any], kind: str
) -> None:
    url = spec.pop("url").format(port=server.port)
    before = len(server.hits)
    started = time.monotonic()
    outcome = fetch(url, **spec)
    assert error_kind(outcome) == kind, outcome.error
    assert time.monotonic() - started < GENEROUS_S
    if kind in ("denied", "invalid-request") and "redirect" not in url:
        assert len(server.hits) == before, "nothing may be sent"
    assert fetch(server.url("/hello")).value["text"] == "hello"


def test_a_50_mb_response_leaves_host_memory_flat(fetch: Fetch, server: TestServer) -> None:
    fetch(server.url("/hello"))  # warm
    Path("/proc/self/clear_refs").write_text("5")  # reset this process's peak (VmHWM): the host runs in it
    before = _status_kb("VmRSS")
    for _ in range(3):
        assert error_kind(fetch(server.url(f"/big?bytes={FIFTY_MB}&length=0"))) == "too-large"
    growth = _status_kb("VmHWM") - before
    assert growth < 40 * 1024, f"host memory peaked {growth} kB above where it was"


def _status_kb(field: str) -> int:
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith(field + ":"))
    return int(line.split()[1])


def test_an_unverifiable_certificate_is_a_connection_error(host: Host, wasm: dict[str, Path], tmp_path: Path) -> None:
    with serving(tls_server_context(*self_signed_certificate(tmp_path))) as tls:
        app = fetcher(host.load(wasm["outbound_probe"], allowed_outbound_hosts=["https://localhost:*"]))
        outcome = app(tls.url("/hello", "localhost"))
        assert error_kind(outcome) == "connection" and "CERTIFICATE_VERIFY_FAILED" in outcome.error["message"]  # type: ignore[index]


def test_sdk_checks_strings_and_body_size_before_calling(granted: App, server: TestServer) -> None:
    surrogates = run_probe(granted, "surrogate", server.url("/echo"))
    assert surrogates.value == dict.fromkeys(("url", "header", "header-name", "body", "method"), "invalid-request")
    big = run_probe(granted, "bigbody", server.url("/echo"), str(2 * 1024 * 1024 + 1))
    assert error_kind(big) == "invalid-request" and "one request can carry" in big.error["message"]  # type: ignore[index]
    assert run_probe(granted, "bigbody", server.url("/echo"), str(2 * 1024 * 1024)).value["status"] == 200


def test_the_host_refuses_a_body_over_2_mib_whatever_the_guest(granted: App, server: TestServer) -> None:
    """Through the binding itself, past the SDK's check: refused by the host, nothing sent."""
    before = len(server.hits)
    big = run_probe(granted, "rawbody", server.url("/echo"), str(2 * 1024 * 1024 + 1))
    assert big.error is not None and big.error["kind"] == "InvalidRequest", (big.value, big.stderr)
    assert "over the 2097152 bytes one request can carry" in big.error["message"]
    assert len(server.hits) == before
    assert run_probe(granted, "rawbody", server.url("/echo"), str(2 * 1024 * 1024)).value["status"] == 200


def test_max_outbound_requests_per_run(llmhost_cache_dir: Path, wasm: dict[str, Path], server: TestServer) -> None:
    sandbox = SandboxConfig(allowed_outbound_hosts=(f"http://127.0.0.1:{server.port}",), max_outbound_requests=3)
    with Host(HostConfig(engine=FakeEngineConfig(), cache_dir=llmhost_cache_dir, sandbox=sandbox)) as capped:
        app = capped.load(wasm["outbound_probe"])
        assert run_probe(app, "many", server.url("/hello"), "5").value == [200, 200, 200, "denied", "denied"]
        assert run_probe(app, "many", server.url("/hello"), "1").value == [200]  # per run: a new run starts again


def test_the_runs_deadline_bounds_a_request(llmhost_cache_dir: Path, wasm: dict[str, Path], server: TestServer) -> None:
    """A server that never answers, no timeout from the guest: the request ends at the run's deadline as a
    `timeout` the guest can still report, before the run itself is stopped."""
    sandbox = SandboxConfig(allowed_outbound_hosts=(f"http://127.0.0.1:{server.port}",), timeout_s=4)
    with Host(HostConfig(engine=FakeEngineConfig(), cache_dir=llmhost_cache_dir, sandbox=sandbox)) as bounded:
        app = bounded.load(wasm["outbound_probe"])
        started = time.monotonic()
        outcome = fetcher(app)(server.url("/never"))
        assert error_kind(outcome) == "timeout" and "deadline" in outcome.error["message"]  # type: ignore[index]
        assert time.monotonic() - started < GENEROUS_S


def test_config_values_through_the_python_api(
    granted: App, host: Host, wasm: dict[str, Path], server: TestServer
) -> None:
    values = run_probe(granted, "config", "API_BASE", "MODE", "UNGRANTED").value
    expected = {"API_BASE": server.url("/"), "MODE": "test", "UNGRANTED": None}
    assert values == {"get": expected, "all": ["API_BASE", "MODE"]}
    bare = run_probe(host.load(wasm["outbound_probe"]), "config", "API_BASE").value
    assert bare == {"get": {"API_BASE": None}, "all": []}


def test_a_config_value_from_the_environment_via_the_python_api(
    host: Host, wasm: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLMHOST_TEST_TOKEN", SECRET)
    app = host.load(wasm["outbound_probe"], config={"TOKEN": EnvValue(env="LLMHOST_TEST_TOKEN")})
    outcome = run_probe(app, "config_hash", "TOKEN")
    assert outcome.value == {"sha256": hashlib.sha256(SECRET.encode()).hexdigest(), "in_all": True}
    assert SECRET not in repr(app) + repr(host.grants(config={"TOKEN": EnvValue(env="LLMHOST_TEST_TOKEN")}))


def test_a_value_from_the_environment_is_scrubbed_from_every_message_the_guest_gets(
    host: Host, wasm: dict[str, Path], server: TestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # README, "Config values": error messages from a grant's interface show such a value as `***`, even when the
    # guest built the URL from it (a traceback it prints would otherwise carry the secret).
    monkeypatch.setenv("LLMHOST_TEST_TOKEN", SECRET)
    app = host.load(
        wasm["outbound_probe"],
        config={"TOKEN": EnvValue(env="LLMHOST_TEST_TOKEN")},
        allowed_outbound_hosts=[f"http://127.0.0.1:{server.port}"],
    )
    # The last URL puts the secret across the 200 characters a message quotes of a URL: its first characters,
    # then the clip ("..."), must not show either.
    straddling = "http://x/\n" + "a" * 185 + "{config:TOKEN}"
    urls = ("http://{config:TOKEN}.example/", "http://127.0.0.1:1/{config:TOKEN}", "http://x/\n{config:TOKEN}")
    for url in (*urls, straddling):
        outcome = run_probe(app, "fetch", json.dumps({"url": url}))
        assert outcome.error is not None, outcome.value
        said = json.dumps(outcome.error) + outcome.stdout + outcome.stderr
        assert SECRET not in said and SECRET[:5] not in said, said
    denied = run_probe(app, "fetch", json.dumps({"url": "http://{config:TOKEN}.example/"}))
    assert denied.error is not None and "***" in denied.error["message"], denied.error


# -- the commands: `llmhost run` and `llmhost serve`, with a secret in the environment -------------------------


def llmhost_run(config: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k not in ("LLMHOST_CONFIG", "LLMHOST_CACHE_DIR")}
    environment["PYTHONPATH"] = os.pathsep.join([str(REPO / "host"), os.environ.get("PYTHONPATH", "")])
    command = [sys.executable, "-m", "llmhost.cli", "-c", str(config), "run", *args]
    return subprocess.run(command, capture_output=True, text=True, env={**environment, **env}, timeout=300)


def test_llmhost_run_reads_grants_and_never_shows_the_secret(
    wasm: dict[str, Path], server: TestServer, tmp_path: Path, llmhost_cache_dir: Path
) -> None:
    config = tmp_path / "llmhost.toml"
    config.write_text(
        f"""cache-dir = "{llmhost_cache_dir}"
[engine]
kind = "fake"
[sandbox]
allowed-outbound-hosts = ["http://127.0.0.1:{server.port}"]
config = {{ TOKEN = {{ env = "LLMHOST_TEST_TOKEN" }}, MODE = "cli" }}
"""
    )
    env = {"LLMHOST_TEST_TOKEN": SECRET}
    probe = str(wasm["outbound_probe"])
    read = llmhost_run(config, probe, "config_hash", "TOKEN", env=env)
    assert json.loads(read.stdout)["ok"]["sha256"] == hashlib.sha256(SECRET.encode()).hexdigest(), read.stderr
    spec = {"url": server.url("/echo?token={config:TOKEN}"), "headers": {"authorization": "Bearer {config:TOKEN}"}}
    used = llmhost_run(config, probe, "fetch", json.dumps(spec), env=env)
    assert any(SECRET in hit for hit in server.hits)  # the guest used it: the server got it
    denied = {**spec, "url": "http://localhost:1/?t={config:TOKEN}"}
    bad = llmhost_run(config, probe, "fetch", json.dumps(denied), env=env)
    assert json.loads(bad.stdout)["err"]["kind"] == "denied"
    plain = llmhost_run(config, probe, "config", "MODE", "TOKEN2", env=env)
    assert json.loads(plain.stdout)["ok"]["get"] == {"MODE": "cli", "TOKEN2": None}
    unset = llmhost_run(config, probe, "config", "MODE", env={})
    assert unset.returncode == 2 and "LLMHOST_TEST_TOKEN" in unset.stderr and "not set" in unset.stderr
    for result in (read, bad, plain, unset):
        assert SECRET not in result.stdout + result.stderr
    assert SECRET not in used.stderr  # (its stdout is the echo of what the server received, the secret included)


def write_serve_config(directory: Path, app: Path, server: TestServer) -> Path:
    config = directory / "serve.toml"
    config.write_text(
        f"""
[engine]
kind = "fake"

[limits]
deadline-s = 4

[components.granted]
source = "{app}"
allowed-outbound-hosts = ["http://127.0.0.1:{server.port}", "http://localhost:*"]
config = {{ TOKEN = {{ env = "LLMHOST_TEST_TOKEN" }}, MODE = "serve" }}

[components.bare]
source = "{app}"

[routes]
"/" = "granted"
"/bare" = "bare"
"""
    )
    return config


@pytest.fixture(scope="module")
def served(
    wasm: dict[str, Path], server: TestServer, tmp_path_factory: pytest.TempPathFactory, llmhost_cache_dir: Path
) -> Iterator[Server]:
    config = write_serve_config(tmp_path_factory.mktemp("serve"), wasm["outbound_app"], server)
    os.environ["LLMHOST_TEST_TOKEN"] = SECRET  # inherited by the server only
    try:
        with serving_llmhost(["-c", str(config), "--log-level", "debug"], llmhost_cache_dir) as running:
            yield running
            assert running.stop() == 0
            assert SECRET not in "\n".join(running.lines), "a secret reached the server's log"
    finally:
        del os.environ["LLMHOST_TEST_TOKEN"]


def serve_fetch(served: Server, prefix: str = "", **spec: Any) -> Any:
    return served.get_json(f"{prefix}/fetch?spec={quote(json.dumps(spec))}")


def test_serve_guests_fetch_read_config_and_are_denied_without_grants(served: Server, server: TestServer) -> None:
    assert serve_fetch(served, url=server.url("/hello"))["ok"]["text"] == "hello"
    assert serve_fetch(served, url=server.url("/hello", "localhost"))["ok"]["status"] == 200
    assert served.get_json("/config?name=MODE") == {"ok": {"value": "serve", "all": ["MODE", "TOKEN"]}}
    assert served.get_json("/config?name=NOPE")["ok"]["value"] is None
    digest = served.get_json("/config-hash?name=TOKEN")["ok"]["sha256"]
    assert digest == hashlib.sha256(SECRET.encode()).hexdigest()
    assert serve_fetch(served, "/bare", url=server.url("/hello"))["err"]["kind"] == "denied"
    assert served.get_json("/bare/config?name=TOKEN") == {"ok": {"value": None, "all": []}}


def test_serve_a_secret_used_in_a_url_never_reaches_the_log(served: Server, server: TestServer) -> None:
    echoed = serve_fetch(served, url=server.url("/echo?token={config:TOKEN}"), headers={"x-token": "{config:TOKEN}"})
    assert echoed["ok"]["status"] == 200
    assert any(SECRET in hit for hit in server.hits)
    denied = serve_fetch(served, url="http://10.0.0.1/?t={config:TOKEN}")
    assert denied["err"]["kind"] == "denied"
    assert SECRET not in "\n".join(served.lines)  # and again, at the end of the module


def test_serve_faults_are_specific_and_the_server_goes_on(served: Server, server: TestServer) -> None:
    assert serve_fetch(served, url=server.url("/loop"))["err"]["kind"] == "too-large"
    assert serve_fetch(served, url=server.url("/x\r\n"))["err"]["kind"] == "invalid-request"
    assert serve_fetch(served, url=server.url("/echo"), method="GE T")["err"]["kind"] == "invalid-request"
    assert serve_fetch(served, url=server.url("/trickle?ms=20"), timeout_s=1)["err"]["kind"] == "timeout"
    path = f"/fetch?spec={quote(json.dumps({'url': server.url(f'/big?bytes={FIFTY_MB}&length=0')}))}"
    served.request("GET", path)  # warm
    growth, body = served.peak_growth_kb(path)
    assert json.loads(body)["err"]["kind"] == "too-large"
    assert growth < 40 * 1024, f"the server's memory peaked {growth} kB above where it was"
    assert serve_fetch(served, url=server.url("/hello"))["ok"]["text"] == "hello"


def test_serve_a_request_that_never_answers_ends_by_the_deadline(served: Server, server: TestServer) -> None:
    """No guest timeout: the request's deadline (`limits.deadline-s` = 4) bounds the outbound request."""
    started = time.monotonic()
    status, body = served.request("GET", f"/fetch?spec={quote(json.dumps({'url': server.url('/never')}))}")
    assert time.monotonic() - started < GENEROUS_S
    assert status == 504 or json.loads(body)["err"]["kind"] == "timeout", (status, body[:300])
    assert serve_fetch(served, url=server.url("/hello"))["ok"]["text"] == "hello"


def test_serve_a_client_that_leaves_stops_its_guests_outbound_request(served: Server, server: TestServer) -> None:
    """The client disconnects while its guest waits on an upstream that never answers: the run is cancelled, and
    the upstream sees the request's connection closed at once, not at the request's deadline (4 s)."""
    before = len(server.hung_up)
    path = f"/fetch?spec={quote(json.dumps({'url': server.url('/hang')}))}"
    with socket.create_connection((served.host, served.port)) as client:
        client.sendall(f"GET {path} HTTP/1.1\r\nhost: llmhost\r\n\r\n".encode())
        assert wait_for(lambda: "GET /hang" in server.hits)
        left = time.monotonic()
    assert wait_for(lambda: len(server.hung_up) > before, GENEROUS_S)
    assert server.hung_up[-1] - left < 2.0, "the outbound request outlived its client"
    assert serve_fetch(served, url=server.url("/hello"))["ok"]["text"] == "hello"


def test_serve_keeps_no_cookie_and_no_connection_between_components(
    wasm: dict[str, Path], server: TestServer, tmp_path: Path, llmhost_cache_dir: Path
) -> None:
    # README, "Outbound HTTP": no cookies are kept, and each component has its own connections. Two components of
    # one server, both granted the upstream: what answers one with `set-cookie` reaches neither's later requests,
    # and a 304 that wrongly carries a body (garbage on its connection) breaks nothing for the other.
    config = tmp_path / "serve.toml"
    grant = f'allowed-outbound-hosts = ["http://127.0.0.1:{server.port}"]'
    config.write_text(
        f'[engine]\nkind = "fake"\n\n[components.a]\nsource = "{wasm["outbound_app"]}"\n{grant}\n\n'
        f'[components.b]\nsource = "{wasm["outbound_app"]}"\n{grant}\n\n[routes]\n"/a" = "a"\n"/b" = "b"\n'
    )
    with serving_llmhost(["-c", str(config)], llmhost_cache_dir) as running:
        assert serve_fetch(running, "/a", url=server.url("/set-cookie"))["ok"]["status"] == 200
        for prefix in ("/a", "/b"):
            echoed = json.loads(serve_fetch(running, prefix, url=server.url("/echo"))["ok"]["text"])
            assert "cookie" not in dict(echoed["headers"]), echoed
        assert serve_fetch(running, "/a", url=server.url("/hello"))["ok"]["status"] == 200  # a's connection, kept
        serve_fetch(running, "/a", url=server.url("/bad304"))  # leaves garbage on a's connection only
        assert serve_fetch(running, "/b", url=server.url("/hello"))["ok"]["text"] == "hello"
        assert running.stop() == 0
