"""A real multi-node Ray cluster for the `backend = "ray"` and `llmhost.ray:app` tests: a head and two worker nodes
(one CPU each), as processes on this machine (`ray.cluster_utils.Cluster`), started once for this package and shut
down after it, so that its processes do not run beside the other suites."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

# As llmhost does before importing Ray (engine/ray/cluster.py): Ray's crash handler would take wasmtime's trap
# signals, and a guest's trap in this process would kill the test run.
os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")

import ray  # noqa: E402 (the `ray` extra: make install has it)
from ray import serve
from ray.cluster_utils import Cluster

from llmhost import HostConfig
from llmhost.engine.ray.cluster import init_ray
from redis_server import free_port

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# One proxy (on the head) stands for a proxy per node here: Serve's proxy sends each request to a replica on its own
# node while that one has room, so all would reach the head's ingress replica. Set before the cluster starts (its
# processes inherit it); it changes only the proxy's routing, not the handles' (the models' deployments).
os.environ.setdefault("RAY_SERVE_PROXY_PREFER_LOCAL_NODE_ROUTING", "0")

# Lost nodes are noticed within a few seconds (Ray's defaults take 30 s or more).
SYSTEM_CONFIG = {"health_check_period_ms": 1000, "health_check_failure_threshold": 3, "health_check_timeout_ms": 1000}
NODE_ARGS: dict[str, Any] = {"num_cpus": 1, "include_dashboard": False, "object_store_memory": 80 * 1024 * 1024}


@dataclass
class RayCluster:
    cluster: Any
    workers: list[Any]

    @property
    def address(self) -> str:
        return str(self.cluster.address)

    def add_worker(self) -> Any:
        node = self.cluster.add_node(**{k: v for k, v in NODE_ARGS.items() if k != "include_dashboard"})
        self.workers.append(node)
        self.cluster.wait_for_nodes()
        return node

    def remove(self, node: Any) -> None:
        self.workers.remove(node)
        self.cluster.remove_node(node, allow_graceful=False)

    def worker_of(self, replica: str) -> Any | None:
        """The worker node a Serve replica (by its id) runs on; None when it runs on the head."""
        for named in ray.util.list_named_actors(all_namespaces=True):
            if named["name"].endswith(f"#{replica}"):
                actor = ray.get_actor(named["name"], namespace=named["namespace"])
                node = ray.get(actor.__ray_call__.remote(lambda _: ray.get_runtime_context().get_node_id()))
                return next((w for w in self.workers if w.node_id == node), None)
        return None


@pytest.fixture(scope="package")
def ray_cluster() -> Iterator[RayCluster]:
    cluster = Cluster(initialize_head=True, head_node_args={**NODE_ARGS, "_system_config": SYSTEM_CONFIG})
    handle = RayCluster(cluster, [])
    for _ in range(2):
        handle.add_worker()
    init_ray(address=cluster.address, namespace="llmhost-tests", log_to_driver=False)
    # One HTTP proxy, on the head, on a free port: the nodes are processes of this one machine, so a proxy per node
    # (Serve's default) would have them all bind one port, and Serve's default port (8000) may be taken.
    serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": free_port()})
    try:
        yield handle
    finally:
        serve.shutdown()
        ray.shutdown()
        cluster.shutdown()


@pytest.fixture
def ray_host_config(ray_cluster: RayCluster, tmp_path: Any) -> Callable[..., HostConfig]:
    """A host config with `models` on the test cluster (engine: the fake decoder unless given); the models'
    deployments are deleted after the test."""
    made: list[str] = []

    def make(models: dict[str, dict[str, Any]], engine: dict[str, Any] | None = None, **cluster: Any) -> HostConfig:
        made.extend(models)
        return HostConfig.model_validate(
            {
                "engine": engine if engine is not None else {"kind": "fake-decoder"},
                "cluster": {"ray-address": ray_cluster.address, **cluster},
                "models": models,
                "cache-dir": str(tmp_path / "cache"),
                "data-dir": str(tmp_path / "data"),
            }
        )

    yield make
    for name in made:
        serve.delete(f"llmhost-model-{name}")


# --- llmhost.ray:app (test_ray_app.py): Serve's proxy, a Redis, the guests ------------------------------------------


@pytest.fixture(scope="package")
def serve_proxy(ray_cluster: RayCluster) -> str:
    """The base URL of Serve's HTTP proxy on the test cluster (started with it)."""
    from llmhost.serve_ray.build import proxy_url

    return proxy_url()


@pytest.fixture(scope="package")
def ray_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real redis-server (tests/redis_server.py) for the replicas' shared key-value state."""
    from redis_server import RedisServer

    server = RedisServer(tmp_path_factory.mktemp("ray-redis")).start()
    yield server
    server.stop()


@pytest.fixture(scope="package")
def ray_app_wasm(llmhost_cache_dir: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """kv_http and http_probe, built once through the build cache (the same builds as tests/kv's and http_wasm's)."""
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    from llmhost import build_component

    guests = Path(__file__).resolve().parents[1] / "guests"
    out = tmp_path_factory.mktemp("ray-app-guests")
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            name: pool.submit(
                build_component, guests / name, out / f"{name}.wasm", "http-app", cache_dir=llmhost_cache_dir
            )
            for name in ("kv_http", "http_probe")
        }
        return {name: future.result() for name, future in futures.items()}


# --- end of llmhost.ray:app's fixtures -----------------------------------------------------------------------------
