"""Host memory for byte lists handed into guests (issue 54, defect 3): a body read through 0.2.4's `send-streamed`
costs one chunk at a time; 0.2.3's whole-body `send` reserves its full cost in the host-wide `transfer-memory-mb`
budget, waits for it, and is refused with `too-large` naming the key when it cannot fit. Real guests (the SDK over
each version's bindings), a real server on loopback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from llmhost import FakeEngineConfig, Host, HostConfig, build_component
from llmhost.domain.limits import MAX_BODY_READ_BYTES, TRANSFER_MEMORY_KEY
from llmhost.grants.transfers import lowered_cost
from outbound_servers import TestServer, serving
from probe_driver import ProbeOutcome, run_probe

pytestmark = pytest.mark.wasm

REPO = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024
# The outbound probe built against today's WIT (its SDK reads bodies in chunks) and against 0.2.3 (whole bodies).
BUILDS = {"current": None, "0.2.3": REPO / "wit" / "0.2.3"}


@pytest.fixture(scope="module")
def wasm(llmhost_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("transfer-guests")
    source = REPO / "tests" / "guests" / "outbound_probe"
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            name: pool.submit(build_component, source, out / f"{name}.wasm", cache_dir=llmhost_cache_dir, wit=wit)
            for name, wit in BUILDS.items()
        }
        return {name: future.result() for name, future in futures.items()}


@pytest.fixture(scope="module")
def server() -> Iterator[TestServer]:
    with serving() as running:
        yield running


def host(cache_dir: Path, budget_mb: int) -> Host:
    return Host(HostConfig(engine=FakeEngineConfig(), cache_dir=cache_dir, transfer_memory_mb=budget_mb))


def fetch(app: object, server: TestServer, size: int) -> ProbeOutcome:
    spec = {"url": server.url(f"/big?bytes={size}&length=1")}
    return run_probe(app, "fetch", json.dumps(spec))  # type: ignore[arg-type]


def test_a_streamed_body_costs_one_chunk_at_a_time(
    llmhost_cache_dir: Path, wasm: dict[str, Path], server: TestServer
) -> None:
    # A budget that one whole 10 MiB body (~800 MB) could never fit: read in 1 MiB chunks it fits, every byte arrives.
    with host(llmhost_cache_dir, 100) as running:
        app = running.load(wasm["current"], allowed_outbound_hosts=[f"http://127.0.0.1:{server.port}"])
        outcome = fetch(app, server, 10 * MIB)
        assert outcome.error is None, outcome.error
        assert outcome.value["len"] == 10 * MIB and outcome.value["status"] == 200
        transfers = running.grant_services.transfers
        assert transfers.peak == lowered_cost(MAX_BODY_READ_BYTES)
        assert transfers.used == 0  # every chunk's reservation released by the end of the run


def test_a_whole_body_reserves_its_cost_and_is_refused_past_the_budget(
    llmhost_cache_dir: Path, wasm: dict[str, Path], server: TestServer
) -> None:
    with host(llmhost_cache_dir, 100) as running:
        app = running.load(wasm["0.2.3"], allowed_outbound_hosts=[f"http://127.0.0.1:{server.port}"])
        small = fetch(app, server, 1 * MIB)  # 80 MB: fits
        assert small.error is None and small.value["len"] == MIB, small.error
        assert running.grant_services.transfers.peak == lowered_cost(MIB)
        big = fetch(app, server, 10 * MIB)  # 800 MB: more than the whole budget
        assert big.error is not None and big.error["kind"] == "too-large", (big.value, big.stderr)
        assert f"`{TRANSFER_MEMORY_KEY}`" in big.error["message"] and "send-streamed" in big.error["message"]
        assert running.grant_services.transfers.used == 0
        again = fetch(app, server, 1 * MIB)  # and the host goes on
        assert again.error is None and again.value["len"] == MIB


def test_concurrent_whole_bodies_wait_for_each_other_within_the_budget(
    llmhost_cache_dir: Path, wasm: dict[str, Path], server: TestServer
) -> None:
    # Four 2 MiB bodies at once (160 MB each) under a 350 MB budget: two at a time at most, none refused.
    with host(llmhost_cache_dir, 350) as running:
        app = running.load(wasm["0.2.3"], allowed_outbound_hosts=[f"http://127.0.0.1:{server.port}"])
        with ThreadPoolExecutor(max_workers=4) as pool:
            outcomes = list(pool.map(lambda _: fetch(app, server, 2 * MIB), range(4)))
        assert all(o.error is None and o.value["len"] == 2 * MIB for o in outcomes), [o.error for o in outcomes]
        transfers = running.grant_services.transfers
        assert lowered_cost(2 * MIB) <= transfers.peak <= 350 * MIB
        assert transfers.used == 0
