"""OpenAI wire parity through `llmhost serve` and openai-compat, with the official `openai` client and the real model:
token-id prompts and inputs, `echo` (with and without logprobs, streamed and not, lm-evaluation-harness's request
shapes), usage counting every evaluated token, model aliases from the host config, and routes without /v1. One
server for the module. Nothing here asserts generated text: paths are compared with paths on this machine."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from serve_driver import Server, serving

pytestmark = [pytest.mark.model, pytest.mark.wasm]

MODEL = "gemma-3-270m"
ALIASES = ("gpt-4.1", "gpt-3.5-turbo-instruct", "text-embedding-3-small")
PROMPT = "The capital of France is"
# Rows of one decode and of one-token decodes round differently on the CPU: a prompt token's logprob read by `echo`
# (the whole prompt in one batch) and the same token's logprob when it was generated (alone) agree this closely.
LOGPROB_TOLERANCE = 0.1


@pytest.fixture(scope="module")
def server(
    http_wasm: dict[str, Path], llmhost_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("openai-parity")
    config = directory / "llmhost.toml"
    config.write_text(
        f"""
[components.openai]
source = "{http_wasm["openai-compat"]}"
[components.openai.limits]
deadline-s = 120

[routes]
"/" = "openai"

[models.gemma-3-270m]
aliases = {json.dumps(list(ALIASES))}
prefix-cache = false  # outputs compared across requests: each prompt is evaluated the same way
threads = 1
batch-size = 128
"""
    )
    with serving(["-c", str(config)], llmhost_cache_dir) as running:
        yield running
        assert running.stop() == 0
        assert not any("trapped" in line for line in running.lines), "the guest trapped"


@pytest.fixture(scope="module")
def client(server: Server) -> Any:
    from openai import OpenAI

    return OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def tokenize(real_probe_app: Any) -> Callable[[str], list[int]]:
    """The host's tokenizer (the probe guest's `llm.tokenize`, in-process): tokenizing is exact on every CPU."""
    from probe_driver import run_probe

    return lambda text: list(run_probe(real_probe_app, "tokenize", MODEL, text).value)


def post(server: Server, path: str, body: Any) -> tuple[int, Any]:
    status, data = server.request("POST", path, json.dumps(body).encode(), {"content-type": "application/json"})
    return status, json.loads(data)


# -- token ids --------------------------------------------------------------------------------------------------------


def test_token_id_prompts_in_every_shape_complete_as_their_text(client: Any, tokenize: Any) -> None:
    ids = tokenize(PROMPT)
    greedy = {"model": MODEL, "max_tokens": 6, "temperature": 0}
    # An echoed text prompt is prefilled from its ids, the path a token-id prompt takes: the same continuation.
    echoed = client.completions.create(prompt=PROMPT, echo=True, **greedy).choices[0].text
    assert echoed.startswith(PROMPT)
    flat = client.completions.create(prompt=ids, **greedy)
    assert flat.choices[0].text == echoed[len(PROMPT) :]
    assert flat.usage.prompt_tokens == len(ids)
    nested = client.completions.create(prompt=[ids, ids[:3]], **greedy)
    assert [c.index for c in nested.choices] == [0, 1]
    assert nested.choices[0].text == flat.choices[0].text
    assert nested.usage.prompt_tokens == len(ids) + 3
    streamed = client.completions.create(prompt=ids, stream=True, **greedy)
    assert "".join(chunk.choices[0].text for chunk in streamed if chunk.choices) == flat.choices[0].text


def test_bad_token_ids_are_400_naming_the_element(server: Server) -> None:
    cases = [
        ("/v1/completions", {"prompt": [[2, 818], [2, 99_999_999]]}, "prompt[1][1]"),
        ("/v1/completions", {"prompt": [2, -1]}, "prompt[1]"),
        ("/v1/completions", {"prompt": [[2], []]}, "prompt[1]"),
        ("/v1/embeddings", {"input": [[2, 818, 5279], [818, 262_144]]}, "input[1][1]"),
        ("/v1/embeddings", {"input": [818, 1_000_000]}, "input[1]"),
        ("/v1/embeddings", {"input": [[818, "x"]]}, "input[0][1]"),
    ]
    for path, body, param in cases:
        status, data = post(server, path, {"model": MODEL, **body})
        assert status == 400 and data["error"]["param"] == param, (body, data)


def test_token_id_inputs_embed_as_their_text_and_usage_counts_every_token(client: Any, tokenize: Any) -> None:
    texts = ["The cat sat on the mat.", "Quarterly revenue grew."]
    ids = [tokenize(text) for text in texts]
    as_text = client.embeddings.create(model=MODEL, input=texts, encoding_format="float")
    # Every token evaluated counts, the beginning-of-sequence token included (tokenize's ids carry it).
    assert as_text.usage.prompt_tokens == sum(len(i) for i in ids)
    as_ids = client.embeddings.create(model=MODEL, input=ids, encoding_format="float")
    assert as_ids.usage.prompt_tokens == sum(len(i) for i in ids)
    for a, b in zip(as_text.data, as_ids.data, strict=True):
        assert a.embedding == pytest.approx(b.embedding, abs=1e-6)

    # Texts share decode calls (packed batches), and Gemma's K-quant kernels round a row otherwise in a call of 8 or
    # more tokens than in a smaller one: a text embedded in another call's company agrees to a cosine, not to 1e-6.
    def same(a: list[float], b: list[float]) -> bool:
        return sum(x * y for x, y in zip(a, b, strict=True)) > 0.999  # unit vectors

    one = client.embeddings.create(model=MODEL, input=ids[0], encoding_format="float")  # a flat list: one input
    assert len(one.data) == 1 and same(one.data[0].embedding, as_text.data[0].embedding)
    mixed = client.embeddings.create(model=MODEL, input=[texts[1], ids[0]], encoding_format="float")
    assert same(mixed.data[0].embedding, as_text.data[1].embedding)
    assert same(mixed.data[1].embedding, as_text.data[0].embedding)


def test_prompt_usage_counts_every_token_in_completions_and_chat(
    client: Any, tokenize: Any, real_probe_app: Any
) -> None:
    from probe_driver import run_probe

    done = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=1)
    assert done.usage.prompt_tokens == len(tokenize(PROMPT))
    messages = [{"role": "user", "content": "Hi!"}]
    chat = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=1)
    template = run_probe(real_probe_app, "template", MODEL, json.dumps(messages), "[]", "true").value
    assert chat.usage.prompt_tokens == len(tokenize(template))


# -- echo -------------------------------------------------------------------------------------------------------------


def test_echo_prepends_the_prompt_with_its_logprobs_the_first_null(client: Any, tokenize: Any) -> None:
    ids = tokenize(PROMPT)
    plain = client.completions.create(model=MODEL, prompt=PROMPT, echo=True, max_tokens=3, temperature=0)
    assert plain.choices[0].text.startswith(PROMPT) and plain.choices[0].logprobs is None
    out = client.completions.create(model=MODEL, prompt=PROMPT, echo=True, max_tokens=3, temperature=0, logprobs=2)
    choice = out.choices[0]
    lp = choice.logprobs
    assert choice.text == plain.choices[0].text
    assert len(lp.tokens) == len(ids) + out.usage.completion_tokens
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(v is not None and v <= 0 for v in lp.token_logprobs[1:])
    assert all(len(top) <= 2 and top for top in lp.top_logprobs[1:])
    assert "".join(lp.tokens) == choice.text
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(lp.tokens))]
    # The generated tokens' logprobs are what a request without echo reports for them.
    alone = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=3, temperature=0, logprobs=2)
    expected = alone.choices[0].logprobs.token_logprobs
    assert lp.token_logprobs[len(ids) :] == pytest.approx(expected, abs=LOGPROB_TOLERANCE)
    # Streamed: the prompt comes first, as its own chunk, with its logprobs.
    chunks = list(
        client.completions.create(
            model=MODEL, prompt=PROMPT, echo=True, max_tokens=3, temperature=0, logprobs=2, stream=True
        )
    )
    assert chunks[0].choices[0].text == PROMPT
    assert chunks[0].choices[0].logprobs.token_logprobs == pytest.approx(lp.token_logprobs[: len(ids)], abs=1e-6)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == choice.text


def test_echo_with_no_tokens_scores_a_text_as_lm_eval_does(
    server: Server, client: Any, tokenize: Any, real_host: Any
) -> None:
    from llmhost import InferencingParams

    # A continuation the model generates greedily (its ids and logprobs from the Python API), then scored the way
    # lm-evaluation-harness scores a (context, continuation) pair: token ids in, `echo`, no new tokens (its
    # `loglikelihood` requests).
    context = tokenize(PROMPT)
    seq = real_host.open_sequence(MODEL)
    try:
        seq.append_tokens(context)
        generated = seq.generate(InferencingParams(max_tokens=4, temperature=0.0, logprobs=1)).logprobs
    finally:
        seq.close()
    continuation = [entry.token_id for entry in generated]
    continuation_lps = [entry.logprob for entry in generated]
    body = {"model": MODEL, "prompt": [context + continuation], "echo": True, "max_tokens": 0, "logprobs": 5}
    body |= {"temperature": 0.0, "seed": 1234}
    status, data = post(server, "/v1/completions", body)
    assert status == 200, data
    (choice,) = data["choices"]
    assert choice["finish_reason"] == "length" and data["usage"]["completion_tokens"] == 0
    assert data["usage"]["prompt_tokens"] == len(context) + len(continuation)
    logprobs = choice["logprobs"]
    assert len(logprobs["token_logprobs"]) == len(context) + len(continuation)
    ctxlen = len(context)
    scored = logprobs["token_logprobs"][ctxlen:]
    assert scored == pytest.approx(continuation_lps, abs=LOGPROB_TOLERANCE)
    # lm-eval's `is_greedy`: each continuation token is the best of its position (a greedy continuation).
    for value, top in zip(scored, logprobs["top_logprobs"][ctxlen:], strict=True):
        assert value >= max(top.values()) - LOGPROB_TOLERANCE
    # lm-eval 0.4's local-completions shape: one new token, scored up to the last prompt token.
    newer = {**body, "max_tokens": 1, "logprobs": 1}
    status, data = post(server, "/v1/completions", newer)
    assert status == 200 and len(data["choices"][0]["logprobs"]["token_logprobs"]) == ctxlen + len(continuation) + 1
    assert data["choices"][0]["logprobs"]["token_logprobs"][ctxlen:-1] == pytest.approx(scored, abs=1e-6)
    # Streamed with no new tokens: the prompt, then the finish.
    streamed = list(client.completions.create(model=MODEL, prompt=PROMPT, echo=True, max_tokens=0, stream=True))
    assert [c.choices[0].text for c in streamed] == [PROMPT, ""]
    assert streamed[-1].choices[0].finish_reason == "length"


def test_max_tokens_zero_without_echo_is_400(server: Server) -> None:
    status, data = post(server, "/v1/completions", {"model": MODEL, "prompt": PROMPT, "max_tokens": 0})
    assert status == 400 and data["error"]["param"] == "max_tokens", data


# -- aliases and routes -----------------------------------------------------------------------------------------------


def test_hosted_model_names_answer_under_the_name_sent(client: Any) -> None:
    from openai import NotFoundError

    chat = client.chat.completions.create(model="gpt-4.1", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    assert chat.model == "gpt-4.1" and chat.usage.completion_tokens <= 2
    text = client.completions.create(model="gpt-3.5-turbo-instruct", prompt=PROMPT, max_tokens=2, temperature=0)
    direct = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=2, temperature=0)
    assert text.model == "gpt-3.5-turbo-instruct" and text.choices[0].text == direct.choices[0].text
    vectors = client.embeddings.create(model="text-embedding-3-small", input="x", encoding_format="float")
    same = client.embeddings.create(model=MODEL, input="x", encoding_format="float")
    assert vectors.model == "text-embedding-3-small"
    assert vectors.data[0].embedding == pytest.approx(same.data[0].embedding, abs=1e-6)
    assert client.models.retrieve("gpt-4.1").id == "gpt-4.1"
    with pytest.raises(NotFoundError):
        client.chat.completions.create(model="gpt-5", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    with pytest.raises(NotFoundError):
        client.models.retrieve("gpt-5")


def test_every_endpoint_is_served_without_the_v1_prefix(server: Server) -> None:
    from openai import OpenAI

    bare = OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=120)  # http://host:port, no /v1
    assert MODEL in [m.id for m in bare.models.list()]
    assert bare.models.retrieve(MODEL).id == MODEL
    chat = bare.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    assert chat.object == "chat.completion"
    assert bare.completions.create(model=MODEL, prompt=PROMPT, max_tokens=2).object == "text_completion"
    assert len(bare.embeddings.create(model=MODEL, input="x").data) == 1
    reply = bare.responses.create(model=MODEL, input="Hi", max_output_tokens=16)
    assert reply.object == "response"
