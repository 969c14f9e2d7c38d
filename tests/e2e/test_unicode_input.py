"""Client strings that are not valid Unicode (issue 49, defect 3): JSON can carry a lone surrogate ("\\ud800", as
JavaScript's JSON.stringify writes one), Python's json.loads turns it into a str no UTF-8 string can hold, and
lowering that as a WIT string trapped the guest (500 "wasm unreachable"). Now: 400 naming the field from
openai-compat on every route, the guest SDK's `InvalidInput` naming the argument before it lowers a string, and
`InvalidInput` from the Python API, with the real model and real guests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llmhost import Host, build_component
from llmhost.domain.errors import InvalidInput
from llmhost.domain.types import InferencingParams
from serve_driver import Server, serving

pytestmark = [pytest.mark.model, pytest.mark.wasm]

REPO = Path(__file__).resolve().parents[2]
MINILM, GEMMA = "all-minilm-l6-v2", "gemma-3-270m"
BAD = "ok \ud800 then"
USER = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def server(
    http_wasm: dict[str, Path], llmhost_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("unicode-input")
    sizes = build_component(REPO / "tests" / "guests" / "http_sizes", directory / "sizes.wasm", "http-app",
                            cache_dir=llmhost_cache_dir)  # fmt: skip
    config = directory / "llmhost.toml"
    config.write_text(
        f"""
[limits]
deadline-s = 120

[components.openai]
source = "{http_wasm["openai-compat"]}"

[components.sizes]
source = "{sizes}"

[routes]
"/v1" = "openai"
"/sizes" = "sizes"

[models.{GEMMA}]
[models.{MINILM}]
"""
    )
    with serving(["-c", str(config)], llmhost_cache_dir) as running:
        yield running
        assert running.stop() == 0
        assert not any("trapped" in line for line in running.lines), "a guest trapped"


def post(server: Server, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    # ensure_ascii: the lone surrogate travels as the escape "\ud800" (raw, it is not UTF-8 at all)
    status, data = server.request("POST", path, json.dumps(body).encode(), {"content-type": "application/json"})
    return status, json.loads(data)


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/embeddings", {"model": MINILM, "input": BAD}, "input"),
        ("/v1/embeddings", {"model": MINILM, "input": ["fine", BAD]}, "input[1]"),
        (
            "/v1/chat/completions",
            {"model": GEMMA, "messages": [{"role": "user", "content": BAD}]},
            "messages[0].content",
        ),
        ("/v1/chat/completions", {"model": GEMMA, "messages": USER, "stop": ["x", BAD]}, "stop[1]"),
        (
            "/v1/chat/completions",
            {"model": GEMMA, "messages": USER, "metadata": {BAD: "v"}},
            "metadata.ok \\ud800 then",
        ),
        ("/v1/completions", {"model": GEMMA, "prompt": BAD, "max_tokens": 2}, "prompt"),
        ("/v1/completions", {"model": BAD, "prompt": "Hi", "max_tokens": 2}, "model"),
        ("/v1/responses", {"model": GEMMA, "input": BAD}, "input"),
    ],
)
def test_openai_compat_answers_400_naming_the_field(server: Server, path: str, body: Any, param: str) -> None:
    status, data = post(server, path, body)
    assert status == 400, data
    assert data["error"]["param"] == param and "not valid Unicode" in data["error"]["message"]
    assert data["error"]["type"] == "invalid_request_error"


def test_the_server_keeps_serving_after_them(server: Server) -> None:
    status, data = post(server, "/v1/embeddings", {"model": MINILM, "input": ["ok \U0001f600 then"]})
    assert status == 200 and len(data["data"]) == 1  # a real astral character, as its surrogate pair: fine


def test_the_guest_sdk_refuses_them_before_lowering_them(server: Server) -> None:
    status, body = server.request("GET", "/sizes/surrogate")
    assert status == 200, body[:300]
    errors = json.loads(body)
    names = {
        "infer": "prompt", "infer-stop": "params.stop[1]", "chat": "messages[0].content", "embed": "text[1]",
        "tokenize": "text", "model": "model", "sequence": "text",
    }  # fmt: skip
    for call, name in names.items():
        assert errors[call]["kind"] == "InvalidInput", (call, errors[call])
        assert errors[call]["message"].startswith(f"{name} is not valid Unicode"), (call, errors[call])


def test_the_python_api_raises_invalid_input_naming_the_text(real_host: Host) -> None:
    calls = {
        "prompt": lambda: real_host.infer(GEMMA, BAD, InferencingParams(max_tokens=2)),
        "prompt ": lambda: real_host.infer_stream(GEMMA, BAD),
        "text": lambda: real_host.tokenize(GEMMA, BAD),
        r"inputs\[1\]": lambda: real_host.embeddings(MINILM, ["fine", BAD]),
        r"stop\[0\]": lambda: real_host.infer(GEMMA, "Hi", InferencingParams(max_tokens=2, stop=(BAD,))),
        "the appended text": lambda: real_host.open_sequence(GEMMA).append(BAD),
    }
    for name, call in calls.items():
        with pytest.raises(InvalidInput, match=rf"^{name.strip()} is not valid Unicode"):
            call()
    assert real_host.tokenize(GEMMA, "ok \U0001f600")  # valid text still works
