"""The real model on Ray: gemma-3-270m as a `backend = "ray"` model (one replica on the test cluster, llama.cpp in it)
gives a guest what the local backend gives it on this machine: greedy text, stops, streams with logprobs, sequences
and forks, chat and embeddings. (Scores and beam search are compared on the fake decoder: test_ray_engine.py.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from ray import serve

from llmhost import Host, HostConfig
from probe_driver import run_probe

from .conftest import RayCluster
from .streams import merged_chunks

MODEL = "gemma-3-270m"
GREEDY = {"temperature": 0.0, "repeat-penalty": 1.0, "max-tokens": 24}


@pytest.fixture(scope="module")
def hosts(ray_cluster: RayCluster, llmhost_cache_dir: Path) -> Iterator[tuple[Host, Host]]:
    ray_model = {"backend": "ray", "replicas": 1, "replica-cpus": 0.5, "slots": 4, "context-length": 1024}
    on_ray = HostConfig.model_validate({"cluster": {"ray-address": ray_cluster.address}, "models": {MODEL: ray_model}})
    local = HostConfig.model_validate({"models": {MODEL: {"slots": 4, "context-length": 1024}}})
    try:
        with Host(on_ray) as ray_host, Host(local) as local_host:
            yield ray_host, local_host
    finally:
        serve.delete(f"llmhost-model-{MODEL}")


@pytest.mark.model
def test_a_guest_on_ray_gets_what_the_local_backend_gives(hosts: tuple[Host, Host], probe_wasm: Path) -> None:
    on_ray, local = (host.load(probe_wasm) for host in hosts)
    seq_script = [
        ["open", "s"],
        ["append", "s", "The three primary colours are"],
        ["generate", "s", GREEDY],
        ["fork", "s", "t"],
        ["append", "t", " Also,"],
        ["stream", "t", {**GREEDY, "max-tokens": 8}],
        ["evaluated", "s"],
        ["logprobs", "t"],
    ]
    messages = json.dumps([{"role": "user", "content": "Name a planet."}])
    chat_params = json.dumps({"inferencing": {"max-tokens": 16, "temperature": 0.0, "repeat-penalty": 1.0}})
    cases = [
        ("infer", MODEL, "The capital of France is", json.dumps(GREEDY)),
        ("infer", MODEL, "Count: one, two,", json.dumps({**GREEDY, "stop": [","]})),
        ("stream", MODEL, "Once upon a time", json.dumps({**GREEDY, "max-tokens": 12, "logprobs": 2})),
        ("seq", MODEL, json.dumps(seq_script)),
        ("chat", MODEL, messages, chat_params),
        ("embed", MODEL, "a sentence to embed", "another one"),
    ]
    for case in cases:
        ours, theirs = run_probe(on_ray, *case), run_probe(local, *case)
        assert ours.error is None and ours.exit_code == 0, (case, ours.stderr)
        assert merged_chunks(ours.value) == merged_chunks(theirs.value), case
