"""The remote backend's config and request mapping (no server: what is sent for which params and server kind).
Its behaviour against real servers is tested in tests/integration/test_remote_faults.py and tests/e2e."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from llmhost import HostConfig
from llmhost.config import ModelConfig
from llmhost.domain.errors import InvalidInput
from llmhost.domain.types import Constraint, InferencingParams, LogitBias
from llmhost.engine.registry import Registry, create_registry
from llmhost.engine.remote.client import RemoteModel


def remote(server: str = "generic", **extra: object) -> RemoteModel:
    config = ModelConfig(backend="openai", base_urls=("http://127.0.0.1:9/v1",), server=server, **extra)  # type: ignore[arg-type]
    return RemoteModel("m", config, Path("/nonexistent"))


def test_backend_openai_needs_base_urls() -> None:
    with pytest.raises(ValidationError, match="base-urls"):
        ModelConfig(backend="openai")
    with pytest.raises(ValidationError, match="not an http"):
        ModelConfig(backend="openai", base_urls=("10.0.0.1:8000",))


def test_config_keys_are_kebab_case() -> None:
    config = HostConfig.model_validate(
        {"models": {"r": {"backend": "openai", "base-urls": ["http://h/v1"], "remote-model": "x", "api-key-env": "K"}}}
    )
    assert config.models["r"].remote_model == "x" and config.models["r"].api_key_env == "K"


def test_a_mixed_host_routes_each_model_to_its_backend() -> None:
    config = HostConfig.model_validate(
        {"engine": {"kind": "fake"}, "models": {"local": {}, "r": {"backend": "openai", "base-urls": ["http://h/v1"]}}}
    )
    engine = create_registry(config)
    try:
        assert isinstance(engine, Registry)
        assert engine.model_names() == ["local", "r"]
        assert type(engine.engine("local")).__name__ == "FakeEngine"
        assert type(engine.engine("r")).__name__ == "OpenAIEngine"
        assert [m.name for m in engine.list_models()] == ["local", "r"]
    finally:
        engine.close()


def test_the_api_key_comes_from_the_named_variable_and_is_never_in_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SECRET_KEY_VAR", "sk-very-secret")
    model = remote(api_key_env="SECRET_KEY_VAR")
    assert model.clients[0].api_key == "sk-very-secret"
    assert "sk-very-secret" not in repr(model.config)


def test_greedy_params_map_to_plain_fields_and_the_servers_extras() -> None:
    params = InferencingParams(
        max_tokens=8, temperature=0, repeat_penalty=1, seed=3, logit_bias=(LogitBias(token_id=5, bias=-1),)
    )
    body = remote("vllm").request_body([1, 2, 3], 3, params)
    assert body["prompt"] == [1, 2, 3] and body["max_tokens"] == 8 and body["seed"] == 3
    assert body["stream_options"] == {"include_usage": True} and "stop" not in body
    assert body["logit_bias"] == {"5": -1}
    assert body["extra_body"] == {"top_k": 40, "min_p": 0.0, "repetition_penalty": 1}
    assert remote("generic").request_body("hi", 1, params)["extra_body"] == {}


def test_stops_are_never_sent_and_max_tokens_none_is_the_rest_of_the_context() -> None:
    params = InferencingParams(max_tokens=None, stop=("\n",))
    body = remote("llama-cpp-python", context_length=100).request_body("hi", 10, params)
    assert "stop" not in body and body["max_tokens"] == 90


@pytest.mark.parametrize(
    ("server", "constraint", "field"),
    [
        ("vllm", Constraint.regex("[a-z]+"), {"structured_outputs": {"regex": "[a-z]+"}}),
        ("vllm", Constraint.choice(["a", "b"]), {"structured_outputs": {"choice": ["a", "b"]}}),
        ("vllm", Constraint.json_schema('{"type": "integer"}'), {"structured_outputs": {"json": {"type": "integer"}}}),
        ("sglang", Constraint.grammar('root ::= "x"'), {"ebnf": 'root ::= "x"'}),
        ("llama-cpp-server", Constraint.json_schema('{"type": "integer"}'), {"json_schema": {"type": "integer"}}),
        ("llama-cpp-server", Constraint.choice(["a", 'b"']), {"grammar": 'root ::= "a" | "b\\""'}),
    ],
)
def test_constraints_map_onto_each_servers_fields(
    server: str, constraint: Constraint, field: dict[str, object]
) -> None:
    body = remote(server).request_body("hi", 1, InferencingParams(constraint=constraint))
    assert {k: v for k, v in body["extra_body"].items() if k in field} == field


@pytest.mark.parametrize(
    ("server", "params", "words"),
    [
        (
            "generic",
            InferencingParams(constraint=Constraint.json_object()),
            ["generic", "json-object", "models.m.server"],
        ),
        ("llama-cpp-python", InferencingParams(constraint=Constraint.regex("a")), ["llama-cpp-python", "regex"]),
        ("vllm", InferencingParams(logprobs=2), ["logprobs"]),
    ],
)
def test_what_a_server_lacks_is_invalid_input_naming_it(
    server: str, params: InferencingParams, words: list[str]
) -> None:
    with pytest.raises(InvalidInput) as err:
        remote(server).request_body("hi", 1, params)
    assert all(w in err.value.message for w in words), err.value.message
