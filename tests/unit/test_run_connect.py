"""`llmhost run --connect URL` without a model: the models a server lists become remote models of server kind
"llmhost" (engine/remote/connect.py), whose requests carry the host's sampler fields, which openai-compat takes."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from llmhost.config import ConfigError, HostConfig, ModelConfig
from llmhost.domain.errors import InvalidInput
from llmhost.domain.types import Constraint, InferencingParams
from llmhost.engine.remote.client import RemoteModel
from llmhost.engine.remote.connect import api_base, lent_models
from openai_compat_validate import load_validate


class Listing:
    """A loopback server answering GET /v1/models with `body` and `status`."""

    def __init__(self) -> None:
        self.status = 200
        self.body: Any = {"object": "list", "data": []}
        self.posted: list[tuple[str, Any]] = []
        self.tokenizes = True  # False: an openai-compat from before /v1/tokenize
        listing = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                payload = json.dumps(listing.body).encode()
                code = listing.status if self.path == "/v1/models" else 404
                self.send_response(code)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_POST(self) -> None:  # noqa: N802 - /v1/tokenize: one token per word, after a BOS of 1
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                listing.posted.append((self.path, body))
                payload = json.dumps({"tokens": [1] + [2] * len(body["prompt"].split())}).encode()
                self.send_response(200 if listing.tokenizes else 404)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture(scope="module")
def listing() -> Iterator[Listing]:
    found = Listing()
    thread = threading.Thread(target=found.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield found
    found.server.shutdown()
    found.server.server_close()


def test_the_api_base_is_the_url_with_v1() -> None:
    assert api_base("http://127.0.0.1:8080") == "http://127.0.0.1:8080/v1"
    assert api_base("http://h:1/v1/") == "http://h:1/v1"
    assert api_base("https://h/team") == "https://h/team/v1"
    with pytest.raises(ConfigError, match="not an http"):
        api_base("127.0.0.1:8080")


def test_every_listed_model_becomes_remote_with_the_local_config_s_facts(listing: Listing, tmp_path: Path) -> None:
    listing.status = 200
    listing.body = {"data": [{"id": "smollm2-135m", "kind": "instruct"}, {"id": "mine", "kind": None}]}
    local = HostConfig(
        models={
            "mine": ModelConfig(path=tmp_path / "mine.gguf", context_length=512, threads=3, aliases=("m",)),
            "gemma-3-270m": ModelConfig(),  # not served: gone, so nothing loads here
        },
        cache_dir=tmp_path,
    )
    models = lent_models(local, listing.url).models
    assert list(models) == ["smollm2-135m", "mine"]
    for name, model in models.items():
        assert model.backend == "openai" and model.server == "llmhost" and model.remote_model == name
        assert model.base_urls == (f"{listing.url}/v1",)
    assert models["smollm2-135m"].kind == "instruct"
    mine = models["mine"]
    assert (mine.path, mine.context_length, mine.aliases, mine.kind) == (tmp_path / "mine.gguf", 512, ("m",), None)
    assert mine.threads != 3  # how to run it is the server's business


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (200, {"data": []}, "lists no model"),
        (404, {"error": "no"}, "answered 404 without an OpenAI model list"),
        (200, {"models": ["x"]}, "answered 200 without an OpenAI model list"),
        (401, {}, "LLMHOST_CONNECT_API_KEY"),
    ],
)
def test_a_server_without_models_is_a_config_error(listing: Listing, status: int, body: Any, message: str) -> None:
    listing.status, listing.body = status, body
    with pytest.raises(ConfigError, match=message):
        lent_models(HostConfig(), listing.url)


def test_an_llmhost_server_gets_the_host_s_sampler_fields(tmp_path: Path) -> None:
    config = ModelConfig(backend="openai", base_urls=("http://127.0.0.1:9/v1",), server="llmhost")
    model = RemoteModel("gemma-3-270m", config, tmp_path)
    try:
        params = InferencingParams(max_tokens=4, temperature=0, repeat_penalty=1.3, top_k=7)
        extra = model.request_body([1, 2], 2, params)["extra_body"]
        assert extra == {"top_k": 7, "repeat_penalty": 1.3, "repeat_last_n": 64}
        assert model.token_prompts  # sequences go as their token ids, exactly
    finally:
        model.close()


def test_an_llmhost_server_counts_prompts_so_no_vocabulary_loads_here(listing: Listing, tmp_path: Path) -> None:
    config = ModelConfig(backend="openai", base_urls=(f"{listing.url}/v1",), server="llmhost")
    model = RemoteModel("gemma-3-270m", config, tmp_path / "empty-cache")  # a built-in: its file would load
    try:
        model.check_length("prompt", "three short words", 100)
        assert model.tokenize("three short words") == [1, 2, 2, 2]
        assert listing.posted[-1] == ("/v1/tokenize", {"prompt": "three short words", "model": "gemma-3-270m"})
        assert model._vocab is None
    finally:
        model.close()
    custom = RemoteModel("mine", config, tmp_path)  # no file here: a sequence's later appends cannot be counted
    try:
        with pytest.raises(InvalidInput, match=r"counts prompts only: set `models\.mine\.path`"):
            custom.tokenize("more", add_special=False)
    finally:
        custom.close()


@pytest.mark.model  # loads a vocabulary with llama.cpp (no weights)
def test_without_the_endpoint_prompts_are_counted_here(listing: Listing, llmhost_cache_dir: Path) -> None:
    from llmhost.engine.local.models import resolve_model_path

    path = resolve_model_path("smollm2-135m", ModelConfig(), llmhost_cache_dir)
    config = ModelConfig(backend="openai", base_urls=(f"{listing.url}/v1",), server="llmhost", path=path)
    model = RemoteModel("smollm2-135m", config, llmhost_cache_dir)
    listing.tokenizes = False
    try:
        posted = len(listing.posted)
        counted = model.tokenize("three short words")
        assert counted == model.vocab().tokenize("three short words", True)  # type: ignore[union-attr]
        model.tokenize("again")
        assert len(listing.posted) == posted + 1  # asked once, then never again
    finally:
        listing.tokenizes = True
        model.close()


def test_openai_compat_takes_the_repeat_penalty_extension() -> None:
    validate = load_validate("openai_compat_validate_connect")
    plain = validate.completion_request({"prompt": "x"}).params
    assert (plain["repeat_penalty"], plain["repeat_penalty_last_n_token_count"]) == (1.0, 0)
    given = validate.completion_request({"prompt": "x", "repeat_penalty": 1.1, "repeat_last_n": 64}).params
    assert (given["repeat_penalty"], given["repeat_penalty_last_n_token_count"]) == (1.1, 64)
    alone = validate.completion_request({"prompt": "x", "repeat_penalty": 1.2}).params
    assert alone["repeat_penalty_last_n_token_count"] == validate.PENALTY_WINDOW
    with pytest.raises(validate.BadRequest, match="repeat_penalty"):
        validate.completion_request({"prompt": "x", "repeat_penalty": 0})
    assert validate.tokenize_request({"prompt": "x"}).prompt == "x"
    with pytest.raises(validate.BadRequest, match="prompt"):
        validate.tokenize_request({"prompt": 3})


def _validate() -> Any:
    return load_validate("openai_compat_validate_constraints")


@pytest.mark.parametrize(
    ("constraint", "keyword", "value"),
    [
        (Constraint.json_schema('{"type": "object"}'), "json_schema", '{"type": "object"}'),
        (Constraint.json_object(), "json_object", True),
        (Constraint.regex("[0-9]+"), "regex", "[0-9]+"),
        (Constraint.grammar('%llguidance {}\nstart: "a"'), "grammar", '%llguidance {}\nstart: "a"'),
        (Constraint.choice(["yes", "no"]), "choice", ["yes", "no"]),
    ],
)
def test_each_constraint_goes_on_a_field_openai_compat_takes(
    tmp_path: Path, constraint: Constraint, keyword: str, value: Any
) -> None:
    """The request `--connect` sends for each constraint kind (an %llguidance grammar included: chat tool calls)
    is one openai-compat's completions route checks into the guest SDK's keyword of the same constraint."""
    config = ModelConfig(backend="openai", base_urls=("http://127.0.0.1:9/v1",), server="llmhost")
    model = RemoteModel("gemma-3-270m", config, tmp_path)
    try:
        params = InferencingParams(max_tokens=4, temperature=0, constraint=constraint, stop=("\n",))
        body = model.request_body([1, 2], 2, params)
    finally:
        model.close()
    assert body["stop"] == ["\n"]  # an llmhost server matches stops as the host does: it ends there itself
    request = {k: v for k, v in body.items() if k not in ("extra_body", "stream_options")} | body["extra_body"]
    params_taken = _validate().completion_request(request).params
    assert params_taken[keyword] == value
    assert params_taken["max_tokens"] == 4 and params_taken["stop"] == ["\n"]


def test_openai_compat_takes_one_constraint_and_token_id_logprobs() -> None:
    validate = _validate()
    taken = validate.completion_request({"prompt": "x", "logprobs": 2, "return_tokens_as_token_ids": True})
    assert taken.return_tokens_as_token_ids and taken.params["logprobs"] == 2
    with pytest.raises(validate.BadRequest, match="at most one of response_format, regex, grammar, choice"):
        validate.completion_request({"prompt": "x", "regex": "a", "response_format": {"type": "json_object"}})
    with pytest.raises(validate.BadRequest, match="'choice'"):
        validate.completion_request({"prompt": "x", "choice": []})


def test_what_a_server_kind_cannot_do_names_the_fix(tmp_path: Path) -> None:
    generic = RemoteModel("m", ModelConfig(backend="openai", base_urls=("http://127.0.0.1:9/v1",)), tmp_path)
    try:
        with pytest.raises(InvalidInput, match=r"cannot enforce a regex constraint \(set `models\.m\.server`"):
            generic.request_body("x", 1, InferencingParams(constraint=Constraint.regex("a")))
        with pytest.raises(InvalidInput, match=r"logprobs are not available .*set `models\.m\.server`"):
            generic.request_body("x", 1, InferencingParams(logprobs=1))
    finally:
        generic.close()
