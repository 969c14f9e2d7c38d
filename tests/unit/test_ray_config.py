"""`backend = "ray"`'s config and pure logic: refusals at load, the model keys as Serve options, the keys a
differing fleet config names, rendezvous affinity, and Ray's tracebacks cut to their one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from llmhost.config import ConfigError, HostConfig, ModelConfig, load_config
from llmhost.engine.ray.deploy import deployment_options, last_error_line
from llmhost.engine.ray.protocol import differing_keys, fingerprint
from llmhost.engine.ray.router import rendezvous


def refused(toml: str, tmp_path: Path) -> str:
    path = tmp_path / "llmhost.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    return str(caught.value)


def test_a_ray_model_without_an_address_is_refused_naming_the_key(tmp_path: Path) -> None:
    message = refused('[models.m]\nbackend = "ray"\n', tmp_path)
    assert "`[cluster] ray-address`" in message and "'m'" in message


def test_ray_keys_need_backend_ray_and_replicas_excludes_autoscaling(tmp_path: Path) -> None:
    assert '`replicas`: only with backend = "ray"' in refused("[models.m]\nreplicas = 2\n", tmp_path)
    both = '[cluster]\nray-address = "auto"\n[models.m]\nbackend = "ray"\nreplicas = 2\nmax-replicas = 3\n'
    assert "`replicas` is a fixed count" in refused(both, tmp_path)
    upside_down = '[cluster]\nray-address = "auto"\n[models.m]\nbackend = "ray"\nmin-replicas = 3\nmax-replicas = 2\n'
    assert "`min-replicas` (3) is more than `max-replicas` (2)" in refused(upside_down, tmp_path)


def test_without_the_ray_extra_a_ray_config_is_refused_naming_pip_install(tmp_path: Path) -> None:
    path = tmp_path / "llmhost.toml"
    path.write_text('[cluster]\nray-address = "auto"\n[models.m]\nbackend = "ray"\n')
    # Ray made unimportable in a fresh interpreter, as where the extra is not installed.
    script = (
        "import sys; sys.modules['ray'] = None\n"
        "from llmhost.config import load_config, ConfigError\n"
        f"try:\n    load_config({str(path)!r})\nexcept ConfigError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert "pip install llmhost[ray]" in out.stdout


def test_model_keys_map_onto_serve_options() -> None:
    fixed = deployment_options(ModelConfig(backend="ray", replicas=3, slots=8, replica_cpus=2, replica_gpus=1))
    assert fixed["num_replicas"] == 3 and fixed["max_ongoing_requests"] == 8
    assert fixed["ray_actor_options"] == {"num_cpus": 2, "num_gpus": 1}
    assert "autoscaling_config" not in fixed
    scaled = deployment_options(
        ModelConfig(backend="ray", min_replicas=1, max_replicas=3, target_ongoing_requests=2, slots=4)
    )
    auto = scaled["autoscaling_config"]
    assert (auto["min_replicas"], auto["max_replicas"], auto["target_ongoing_requests"]) == (1, 3, 2)
    assert "num_replicas" not in scaled
    assert deployment_options(ModelConfig(backend="ray"))["num_replicas"] == 1


def test_a_differing_fleet_config_names_each_differing_key() -> None:
    config = HostConfig.model_validate({"engine": {"kind": "fake-decoder"}})
    ours = fingerprint(ModelConfig(backend="ray", slots=4, replicas=2), config.engine)
    same = fingerprint(ModelConfig(backend="ray", slots=4, replicas=2), config.engine)
    theirs = fingerprint(ModelConfig(backend="ray", slots=8, replicas=2, deterministic=True), config.engine)
    assert differing_keys(ours, same) == []
    assert differing_keys(ours, theirs) == ["deterministic", "slots"]
    # Setting a key to its default is the same config as leaving it out.
    assert (
        differing_keys(ours, fingerprint(ModelConfig(backend="ray", slots=4, replicas=2, threads=2), config.engine))
        == []
    )


def replica(unique_id: str) -> SimpleNamespace:
    return SimpleNamespace(replica_id=SimpleNamespace(unique_id=unique_id))


def test_rendezvous_is_stable_and_moves_only_the_keys_of_a_replica_that_left() -> None:
    replicas = [replica(name) for name in ("a1", "b2", "c3")]
    keys = [f"system prompt {i}" for i in range(300)]
    chosen = {key: rendezvous(key, replicas).replica_id.unique_id for key in keys}  # type: ignore[arg-type]
    assert len(set(chosen.values())) == 3  # spread over every replica
    assert all(rendezvous(key, list(reversed(replicas))).replica_id.unique_id == chosen[key] for key in keys)  # type: ignore[arg-type]
    remaining = replicas[:2]
    for key in keys:
        now = rendezvous(key, remaining).replica_id.unique_id  # type: ignore[arg-type]
        assert now == chosen[key] or chosen[key] == "c3"


def test_a_replicas_traceback_becomes_its_one_error_line() -> None:
    traceback = (
        'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n'
        "llmhost.domain.errors.EngineError: model file /nope.gguf does not exist (fix `models.m.path` in the config)\n"
    )
    assert last_error_line(traceback) == (
        "EngineError: model file /nope.gguf does not exist (fix `models.m.path` in the config)"
    )


def test_a_call_is_sent_again_only_when_its_replica_was_lost_never_after_the_run_ended() -> None:
    from ray.exceptions import ActorDiedError

    from llmhost.domain.errors import EngineError
    from llmhost.engine.ray.calls import ReplicaLost, call

    class Response:
        def __init__(self, fails: bool) -> None:
            self.fails, self.cancelled = fails, False

        def result(self, timeout_s: float) -> object:
            if self.fails:
                raise ActorDiedError()
            return "answer"

        def cancel(self) -> None:
            self.cancelled = True

    sent: list[Response] = []

    def start(fails: list[bool]) -> Response:
        sent.append(Response(fails.pop(0)))
        return sent[-1]

    # A lost replica: sent again, and the second replica answers.
    pending = [True, False]
    assert call(lambda: start(pending), "m") == "answer"
    assert len(sent) == 2
    # Lost on every attempt: one error naming the loss, after the attempts.
    sent.clear()
    with pytest.raises(ReplicaLost, match="was lost"):
        call(lambda: start([True]), "m")
    assert len(sent) == 3

    # The run's own end (its deadline, a cancel) is raised at once: the call is not sent again.
    def ended() -> None:
        raise EngineError("the run's deadline passed")

    sent.clear()
    with pytest.raises(EngineError, match="deadline"):
        call(lambda: start([False]), "m", ended)
    assert len(sent) == 1 and sent[0].cancelled
