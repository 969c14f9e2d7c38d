"""`backend = "ray"` on a real multi-node Ray cluster, with replicas running the local engine over the fake decoder:
a guest gets the answers the local engine gives; sequences stay on their replica and are rebuilt when it is lost;
shared prompt starts meet on one replica; a fleet with another config is refused; a lost node ends a stream within
15 s naming its replica (or not at all, when no token had reached the caller); load scales the model up and down."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from ray import serve

from llmhost import GuestTrap, Host, HostConfig
from llmhost.config import ConfigError
from llmhost.domain.errors import EngineError
from llmhost.domain.types import BeamParams, InferencingParams, StreamChunk
from llmhost.engine.base import collect
from llmhost.engine.ray.engine import RayEngine
from llmhost.engine.registry import create_registry
from probe_driver import run_probe

from .conftest import RayCluster
from .streams import merged_chunks

FLEET = {"backend": "ray", "replicas": 2, "replica-cpus": 0.25, "slots": 4, "deterministic": True}
GREEDY = InferencingParams(max_tokens=24, temperature=0.0, repeat_penalty=1.0)
LOST_STREAM_BOUND_S = 15.0


def local_twin(config: HostConfig, name: str) -> HostConfig:
    """The same models as `config`, on the local engine in this process."""
    model = config.models[name].model_copy(update={"backend": "llama-cpp"})
    return config.model_copy(update={"models": {name: model}})


@pytest.fixture(scope="module")
def fleet(ray_cluster: RayCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostConfig]:
    tmp = tmp_path_factory.mktemp("fleet")
    config = HostConfig.model_validate(
        {
            "engine": {"kind": "fake-decoder", "context-length": 1024},
            "cluster": {"ray-address": ray_cluster.address},
            "models": {"fd": FLEET},
            "cache-dir": str(tmp / "cache"),
            "data-dir": str(tmp / "data"),
        }
    )
    yield config
    serve.delete("llmhost-model-fd")


@pytest.fixture(scope="module")
def hosts(fleet: HostConfig, probe_wasm: Path) -> Iterator[tuple[Host, Host]]:
    with Host(fleet) as on_ray, Host(local_twin(fleet, "fd")) as local:
        yield on_ray, local


def ray_engine(host: Host) -> RayEngine:
    engine = host.engine.engine("fd")
    assert isinstance(engine, RayEngine)
    return engine


# -- the same answers -------------------------------------------------------------------------------------------


def test_a_guest_gets_the_same_answers_as_from_the_local_engine(hosts: tuple[Host, Host], probe_wasm: Path) -> None:
    on_ray, local = (host.load(probe_wasm) for host in hosts)
    greedy = {"temperature": 0.0, "repeat-penalty": 1.0, "max-tokens": 40}
    seq_script = [
        ["open", "s"],
        ["append", "s", "Once upon a time"],
        ["generate", "s", {**greedy, "max-tokens": 12}],
        ["evaluated", "s"],
        ["fork", "s", "t"],
        ["append", "t", " and then"],
        ["stream", "t", {**greedy, "max-tokens": 8}],
        ["truncate", "s", 5],
        ["generate", "s", {**greedy, "max-tokens": 6, "stop": ["e"]}],
        ["tokens", "s"],
        ["text", "t"],
        ["logprobs", "t"],
        ["len", "t"],
    ]
    cases = [
        ("infer", "fd", "The capital of France is", json.dumps(greedy)),
        ("infer", "fd", "A long story", json.dumps({**greedy, "max-tokens": 7})),  # a max-tokens cut
        ("infer", "fd", "Stops", json.dumps({**greedy, "stop": ["a", "b", "c"]})),
        ("infer", "fd", "Seeded", json.dumps({"max-tokens": 30, "temperature": 0.8, "seed": 7})),
        ("infer", "fd", "Logprobs", json.dumps({**greedy, "max-tokens": 5, "logprobs": 3})),
        ("stream", "fd", "Streamed", json.dumps(greedy)),
        ("seq", "fd", json.dumps(seq_script)),
        ("tokenize", "fd", "some text"),
        ("info", "fd"),
    ]
    for case in cases:
        ours, theirs = run_probe(on_ray, *case), run_probe(local, *case)
        assert ours.error is None and ours.exit_code == 0, (case, ours.stderr)
        assert merged_chunks(ours.value) == merged_chunks(theirs.value), case
    stream = run_probe(on_ray, "stream", "fd", "Streamed", json.dumps(greedy)).value
    assert stream["events"][-1]["done"]["finish-reason"] in ("length", "stop")
    assert run_probe(on_ray, "infer", "no-such-model", "x").error["kind"] == "model-not-supported"


TRAP_AFTER_RAY = """
import sys
from llmhost import GuestTrap, Host, HostConfig
config = HostConfig.model_validate_json(sys.argv[1])
with Host(config) as host:
    app = host.load(sys.argv[2])  # wasmtime's engine (and its signal handlers) first, as in `llmhost run`
    host.engine.engine("fd")  # then Ray joins: ray.init installs handlers of its own
    for _ in range(2):
        try:
            app.run_captured(["trap"])
        except GuestTrap:
            print("trap", flush=True)
"""


def as_given(config: HostConfig) -> dict[str, Any]:
    """The config as a file would give it (its defaults left out, the engine's kind kept)."""
    data = config.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    return data | {"engine": config.engine.model_dump(mode="json", by_alias=True)}


def test_a_guest_trap_on_a_host_with_ray_models_is_a_trap_not_a_crash(
    hosts: tuple[Host, Host], fleet: HostConfig, probe_wasm: Path
) -> None:
    """Wasmtime's traps are signals its handlers catch; Ray installs fatal-signal handlers too (faulthandler, its crash
    handler). A trap after Ray joined must still be a guest trap: in this process, and in a host process of its own."""
    with pytest.raises(GuestTrap):
        hosts[0].load(probe_wasm).run_captured(["trap"])
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            TRAP_AFTER_RAY,
            json.dumps(as_given(fleet)),
            str(probe_wasm),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.split() == ["trap", "trap"], done.stderr[-2000:]


def test_bad_params_are_the_local_engines_errors(hosts: tuple[Host, Host], probe_wasm: Path) -> None:
    on_ray, local = (host.load(probe_wasm) for host in hosts)
    case = ("infer", "fd", "x", json.dumps({"max-tokens": 10, "constraint": {"regex": "[a-z"}}))
    ours, theirs = run_probe(on_ray, *case), run_probe(local, *case)
    assert ours.error is not None and ours.error == theirs.error


def test_scores_beam_search_and_next_token_logprobs_are_the_local_engines(hosts: tuple[Host, Host]) -> None:
    on_ray, local = ray_engine(hosts[0]), hosts[1].engine.engine("fd")
    seq, twin = on_ray.open_sequence("fd"), local.open_sequence("fd")
    try:
        for s in (seq, twin):
            s.append("Three famous painters:")
        assert seq.score([" Monet", " Klimt and Kahlo"]) == twin.score([" Monet", " Klimt and Kahlo"])
        assert seq.next_token_logprobs(3) == twin.next_token_logprobs(3)
        assert seq.append_tokens_with_logprobs([70, 80], 2) == twin.append_tokens_with_logprobs([70, 80], 2)
        params = BeamParams(width=2, max_tokens=6)
        ours, theirs = seq.beam_search(params), twin.beam_search(params)
        assert [(b.token_ids(), score) for b, score in ours] == [(b.token_ids(), score) for b, score in theirs]
        assert [b.text() for b, _ in ours] == [b.text() for b, _ in theirs]
        assert seq.log_likelihood() == twin.log_likelihood() and seq.logprobs() == twin.logprobs()
        for beam, _ in [*ours, *theirs]:
            beam.close()
    finally:
        seq.close()
        twin.close()


# -- sequences keep their KV cache where it is --------------------------------------------------------------------


def test_sequence_calls_stay_on_their_replica_and_never_evaluate_again(hosts: tuple[Host, Host]) -> None:
    engine = ray_engine(hosts[0])
    seq = engine.open_sequence("fd")
    try:
        replica = seq.replica
        seq.append("You are a helpful assistant. " * 4)
        for turn in range(4):
            seq.append(f" Question {turn}?")
            seq.generate(InferencingParams(max_tokens=6, temperature=0.0, repeat_penalty=1.0))
            assert seq.replica == replica
        # Every token was evaluated once: appends never evaluated the earlier ones again.
        assert seq.evaluated_token_count() <= len(seq) <= seq.evaluated_token_count() + 1
    finally:
        seq.close()


def kill_replica(replica: str, model: str = "fd") -> None:
    actor = ray.get_actor(f"SERVE_REPLICA::llmhost-model-{model}#ModelReplica#{replica}", namespace="serve")
    ray.kill(actor, no_restart=True)


def test_a_sequence_whose_replica_is_lost_is_rebuilt_elsewhere_with_the_same_result(hosts: tuple[Host, Host]) -> None:
    on_ray, local = ray_engine(hosts[0]), hosts[1].engine.engine("fd")
    seq, twin = on_ray.open_sequence("fd"), local.open_sequence("fd")
    try:
        for s in (seq, twin):
            s.append("The history of the lighthouse")
            s.generate(GREEDY)
        lost = seq.replica
        kill_replica(lost)
        for s in (seq, twin):
            s.append(" continued")
        outcome = seq.generate(GREEDY)
        assert seq.replica != lost
        assert outcome == twin.generate(GREEDY)
        assert seq.token_ids() == twin.token_ids()
    finally:
        seq.close()
        twin.close()


# -- prefix affinity ------------------------------------------------------------------------------------------------


def replicas_serving(engine: RayEngine, prompts: list[str]) -> list[str]:
    served = []
    for prompt in prompts:
        generation = engine.stream("fd", prompt, InferencingParams(max_tokens=2, temperature=0.0))
        served.append(generation.replica)
        collect(generation)
    return served


def test_requests_sharing_a_prompt_start_go_to_one_replica_while_it_has_room(hosts: tuple[Host, Host]) -> None:
    engine = ray_engine(hosts[0])
    # Prompts that share nothing spread over both replicas (all 12 on one: p = 2 / 4096), once this host's router
    # knows both (a replica killed by a test before has been replaced).
    unrelated = [f"{i} unrelated {i * 7919} prompt" for i in range(12)]
    wait_for(lambda: len(set(replicas_serving(engine, unrelated))) == 2, 30)
    system = "You are the ship's computer. Answer briefly and exactly. " * 6  # > the 256 characters of the key
    shared = replicas_serving(engine, [f"{system}Question {i}?" for i in range(10)])
    assert len(set(shared)) == 1


# -- a fleet ---------------------------------------------------------------------------------------------------------


def test_a_host_with_another_config_for_the_model_is_refused_naming_the_keys(
    hosts: tuple[Host, Host], fleet: HostConfig
) -> None:
    other = fleet.models["fd"].model_copy(update={"slots": 8, "replicas": 3})
    with pytest.raises(ConfigError) as caught:
        create_registry(fleet.model_copy(update={"models": {"fd": other}}))
    message = str(caught.value)
    assert "differing: replicas, slots" in message and 'serve.delete("llmhost-model-fd")' in message
    # The same config attaches to the running deployment (a second host of the fleet), deploying nothing.
    started = time.monotonic()
    second = create_registry(fleet)
    assert time.monotonic() - started < 3
    assert collect(second.engine("fd").stream("fd", "fleet", GREEDY)) == collect(
        ray_engine(hosts[0]).stream("fd", "fleet", GREEDY)
    )


def test_a_host_process_shares_the_fleet_and_leaves_the_deployment_when_it_exits(
    hosts: tuple[Host, Host], fleet: HostConfig, tmp_path: Path
) -> None:
    """`llmhost infer` in a process of its own attaches to the running deployment, answers as this process's host
    does, and exits; the deployment stays for the rest of the fleet."""
    lines = [f"{key} = {json.dumps(value)}" for key, value in FLEET.items()]
    config = tmp_path / "llmhost.toml"
    config.write_text(
        '[engine]\nkind = "fake-decoder"\ncontext-length = 1024\n'
        f'[cluster]\nray-address = "{fleet.cluster.ray_address}"\n[models.fd]\n' + "\n".join(lines) + "\n"
    )
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "llmhost"),
            "infer",
            "--max-tokens",
            "12",
            "--temperature",
            "0",
            "fd",
            "fleet",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "LLMHOST_CONFIG": str(config)},
    )
    assert done.returncode == 0, done.stderr
    ours = collect(ray_engine(hosts[0]).stream("fd", "fleet", InferencingParams(max_tokens=12, temperature=0.0)))
    assert done.stdout.rstrip("\n") == ours.text
    assert running_replicas("fd") == 2  # still deployed, still serving this host
    assert collect(ray_engine(hosts[0]).stream("fd", "fleet", GREEDY)).usage.generated_token_count > 0


# -- faults and scaling ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def slow(ray_cluster: RayCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayEngine]:
    """Two replicas whose every decode step takes 300 ms (a GPU-bound step): streams long enough to lose a node
    in the middle of."""
    tmp = tmp_path_factory.mktemp("slow")
    config = HostConfig.model_validate(
        {
            "engine": {"kind": "fake-decoder", "step-ms": 300},
            "cluster": {"ray-address": ray_cluster.address},
            "models": {"slow": {"backend": "ray", "replicas": 2, "replica-cpus": 0.25, "slots": 2}},
            "cache-dir": str(tmp / "cache"),
        }
    )
    engine = create_registry(config).engine("slow")
    assert isinstance(engine, RayEngine)
    yield engine
    serve.delete("llmhost-model-slow")


def stream_on_a_worker(engine: RayEngine, cluster: RayCluster, params: InferencingParams) -> tuple[Any, Any, str]:
    """A stream whose replica runs on a worker node (that node can be lost; the head cannot), and its prompt."""
    for attempt in range(20):
        prompt = f"attempt {attempt}: " + "x" * attempt
        generation = engine.stream("slow", prompt, params)
        node = cluster.worker_of(generation.replica)
        if node is not None:
            return generation, node, prompt
        generation.close()
    raise AssertionError("no stream landed on a worker node")


def test_a_lost_node_ends_a_stream_within_15_s_naming_its_replica(slow: RayEngine, ray_cluster: RayCluster) -> None:
    generation, node, _ = stream_on_a_worker(slow, ray_cluster, InferencingParams(max_tokens=200, temperature=0.0))
    read = [next(generation) for _ in range(2)]
    assert all(isinstance(event, StreamChunk) for event in read)
    ray_cluster.remove(node)
    lost_at = time.monotonic()
    try:
        with pytest.raises(EngineError) as caught:
            for _ in generation:
                pass
        assert time.monotonic() - lost_at < LOST_STREAM_BOUND_S
        assert generation.replica in str(caught.value) and "was lost" in str(caught.value)
        # The next call goes to a replica that lives, within its deadline.
        result = collect(slow.stream("slow", "after the loss", InferencingParams(max_tokens=3, temperature=0.0)))
        assert result.usage.generated_token_count == 3
    finally:
        ray_cluster.add_worker()


def test_a_stream_whose_replica_is_lost_before_its_first_token_finishes_elsewhere(slow: RayEngine) -> None:
    params = InferencingParams(max_tokens=4, temperature=0.0)
    prompt = "no token yet"
    generation = slow.stream("slow", prompt, params)
    first_replica = generation.replica
    kill_replica(first_replica, "slow")  # its first decode step (300 ms) has not ended: no token reached us
    streamed = collect(generation)  # no error: the request started again on a replica that lives
    assert generation.replica != first_replica
    assert streamed == collect(slow.stream("slow", prompt, params))
    assert streamed.usage.generated_token_count == 4


def running_replicas(model: str) -> int:
    status = serve.status().applications.get(f"llmhost-model-{model}")
    if status is None:
        return 0
    return int(status.deployments["ModelReplica"].replica_states.get("RUNNING", 0))


def wait_for(condition: Callable[[], bool], within_s: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < within_s:
        if condition():
            return time.monotonic() - started
        time.sleep(0.25)
    raise AssertionError(f"not within {within_s} s")


def test_load_scales_a_model_up_to_max_replicas_and_idleness_back_down(ray_cluster: RayCluster, tmp_path: Path) -> None:
    config = HostConfig.model_validate(
        {
            "engine": {"kind": "fake-decoder", "step-ms": 50},
            "cluster": {"ray-address": ray_cluster.address},
            "models": {
                "auto": {
                    "backend": "ray",
                    "min-replicas": 1,
                    "max-replicas": 3,
                    "target-ongoing-requests": 1,
                    "slots": 2,
                    "replica-cpus": 0.25,
                    "upscale-delay-s": 1,
                    "downscale-delay-s": 2,
                }
            },
            "cache-dir": str(tmp_path / "cache"),
        }
    )
    engine = create_registry(config).engine("auto")
    try:
        assert running_replicas("auto") == 1
        stop = threading.Event()

        def generate(i: int) -> None:
            while not stop.is_set():  # eight long generations, again and again, until the test has seen 3 replicas
                generation = engine.stream("auto", f"load {i}", InferencingParams(max_tokens=150, temperature=0.0))
                for _ in generation:
                    if stop.is_set():
                        generation.close()
                        break

        workers = [threading.Thread(target=generate, args=(i,), daemon=True) for i in range(8)]
        for worker in workers:
            worker.start()
        try:
            up_s = wait_for(lambda: running_replicas("auto") == 3, 45)
        finally:
            stop.set()
            for worker in workers:
                worker.join(30)
        down_s = wait_for(lambda: running_replicas("auto") == 1, 45)
        print(f"scaled 1 -> 3 in {up_s:.1f} s under load, 3 -> 1 in {down_s:.1f} s idle")
    finally:
        serve.delete("llmhost-model-auto")


# -- a bad address ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("silent", [False, True], ids=["refused", "silent"])
def test_a_bad_address_is_one_line_naming_it_within_the_connect_timeout(tmp_path: Path, silent: bool) -> None:
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    if silent:
        listener.listen(8)  # accepts the TCP handshake and never answers Ray's protocol
    port = listener.getsockname()[1]
    if not silent:
        listener.close()  # nothing listens: refused
    config = tmp_path / "llmhost.toml"
    config.write_text(
        f'[cluster]\nray-address = "127.0.0.1:{port}"\nconnect-timeout-s = 4\n[models.m]\nbackend = "ray"\n'
    )
    started = time.monotonic()
    done = subprocess.run(
        [str(Path(sys.executable).parent / "llmhost"), "infer", "m", "hi"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "LLMHOST_CONFIG": str(config)},
    )
    took = time.monotonic() - started
    listener.close()
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and f"127.0.0.1:{port}" in lines[0], done.stderr
    assert took < 4 + 10  # the timeout, plus Python and Ray's imports
