"""Data at application sizes between host and guest (issue 49), through `llmhost serve`: openai-compat answers
OpenAI's batch size (2,048 inputs on all-minilm-l6-v2, 1,024 on gemma-3-270m, float and base64) to the official
`openai` client and refuses more up front; an http-app returns a 64 MiB body; a guest receives 8,192 vectors
through the guest SDK; an input too large for one call is the SDK's `InvalidInput`, not a trap; and the embeddings'
tokens are counted in `llmhost_prompt_tokens_total`. One server for the module (tests/guests/http_sizes beside
openai-compat)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llmhost import Host, build_component
from llmhost.domain.limits import MAX_LIFTED_ITEMS
from serve_driver import METRICS_LINE, Samples, Server, delta, scrape, serving

pytestmark = [pytest.mark.model, pytest.mark.wasm]

REPO = Path(__file__).resolve().parents[2]
MINILM, GEMMA = "all-minilm-l6-v2", "gemma-3-270m"
MiB = 1024 * 1024
ANIMALS = ("cat", "dog", "heron", "otter", "moth", "lynx", "crab")


def texts(count: int) -> list[str]:
    """Distinct short passages (a few tokens each: the count, not the length, is what these tests are about)."""
    return [f"passage {i}: the {ANIMALS[i % 7]} sat on mat {i % 13}" for i in range(count)]


class Running:
    def __init__(self, server: Server, metrics: tuple[str, int]) -> None:
        self.server, self.metrics = server, metrics

    def samples(self) -> Samples:
        return scrape(*self.metrics)

    def get(self, path: str, timeout: float = 120.0) -> tuple[int, dict[str, str], bytes]:
        connection = self.server.connection(timeout)
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        finally:
            connection.close()

    def get_json(self, path: str) -> Any:
        status, _, body = self.get(path)
        assert status == 200, (status, body[:300])
        return json.loads(body)


@pytest.fixture(scope="module")
def running(
    http_wasm: dict[str, Path], llmhost_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Running]:
    directory = tmp_path_factory.mktemp("data-sizes")
    sizes = build_component(REPO / "tests" / "guests" / "http_sizes", directory / "sizes.wasm", "http-app",
                            cache_dir=llmhost_cache_dir)  # fmt: skip
    config = directory / "llmhost.toml"
    config.write_text(
        f"""
metrics-listen = "127.0.0.1:0"

[limits]
deadline-s = 300  # generous: thousands of texts on a shared two-core machine

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
    with serving(["-c", str(config)], llmhost_cache_dir) as server:
        match = server.wait_for_line(METRICS_LINE.pattern, 30)
        yield Running(server, (match.group(1), int(match.group(2))))
        assert server.stop() == 0
        assert not any("trapped" in line and "fuel" not in line for line in server.lines), "a guest trapped"


@pytest.fixture(scope="module")
def client(running: Running) -> Any:
    from openai import OpenAI

    return OpenAI(base_url=f"{running.server.url}/v1", api_key="unused", max_retries=0, timeout=300)


def prompt_tokens(before: Samples, after: Samples, model: str) -> float:
    return delta(before, after, "llmhost_prompt_tokens_total", model=model)


# -- openai-compat at OpenAI's batch size --------------------------------------------------------------------------


# OpenAI's batch sizes (2,048 and 1,024 inputs) are soaks, run by `make test-slow`; `make test` checks the same
# assertions at a size that costs seconds, not a minute (issue 59).
MINILM_COUNTS = [256, pytest.param(2048, marks=pytest.mark.soak)]
GEMMA_COUNTS = [64, pytest.param(1024, marks=pytest.mark.soak)]


@pytest.mark.slow
@pytest.mark.parametrize("count", MINILM_COUNTS)
def test_openai_compat_embeds_minilm_texts_in_both_encodings(
    running: Running, client: Any, real_host: Host, count: int
) -> None:
    inputs = texts(count)
    before = running.samples()
    packed = client.embeddings.create(model=MINILM, input=inputs)  # the client asks for base64, and unpacks it
    floats = client.embeddings.create(model=MINILM, input=inputs, encoding_format="float")
    after = running.samples()
    want = real_host.embeddings(MINILM, inputs)
    for result in (packed, floats):
        assert [d.index for d in result.data] == list(range(count))
        assert {len(d.embedding) for d in result.data} == {384}
        assert result.usage.prompt_tokens == want.prompt_token_count
    for got, base64_got, expected in zip(floats.data, packed.data, want.embeddings, strict=True):
        assert base64_got.embedding == pytest.approx(got.embedding, abs=1e-6)  # f32 both ways: the same numbers
        assert got.embedding == pytest.approx(expected, abs=1e-4)  # the host's own vectors, in input order
    # Both calls' tokens are counted (issue 49, defect 10).
    assert prompt_tokens(before, after, MINILM) == 2 * want.prompt_token_count


@pytest.mark.slow
@pytest.mark.parametrize("count", GEMMA_COUNTS)
def test_openai_compat_embeds_gemma_texts_in_both_encodings(client: Any, count: int) -> None:
    inputs = [f"t{i}" for i in range(count)]
    packed = client.embeddings.create(model=GEMMA, input=inputs)
    floats = client.embeddings.create(model=GEMMA, input=inputs, encoding_format="float")
    assert len(packed.data) == len(floats.data) == count
    assert {len(d.embedding) for d in floats.data} == {640}
    assert packed.usage.prompt_tokens == floats.usage.prompt_tokens >= count
    for a, b in zip(packed.data, floats.data, strict=True):
        assert a.embedding == pytest.approx(b.embedding, abs=1e-6)


def test_more_inputs_than_openai_allows_are_refused_before_any_work(running: Running, client: Any) -> None:
    from openai import BadRequestError

    before = running.samples()
    for count in (2049, 16384):
        with pytest.raises(BadRequestError, match="at most 2048") as refused:
            client.embeddings.create(model=MINILM, input=["x"] * count)
        assert refused.value.body["param"] == "input"  # type: ignore[index]
    assert prompt_tokens(before, running.samples(), MINILM) == 0  # nothing was embedded


def test_embeddings_count_in_the_prompt_token_metric(running: Running, client: Any) -> None:
    """Issue 49, defect 10: `llmhost_prompt_tokens_total` rose by 0 after embeddings calls."""
    for model, inputs in ((MINILM, ["How tall is Kilimanjaro?"]), (GEMMA, ["a", "b c"])):
        before = running.samples()
        result = client.embeddings.create(model=model, input=inputs)
        assert result.usage.prompt_tokens > 0
        assert prompt_tokens(before, running.samples(), model) == result.usage.prompt_tokens


# -- http-app bodies -------------------------------------------------------------------------------------------------


def expected_body(size: int) -> bytes:
    return (b"0123456789" * (size // 10 + 1))[:size]


def test_an_http_app_returns_a_64_mib_body_through_the_guest_sdk(running: Running) -> None:
    status, headers, body = running.get(f"/sizes/body?bytes={64 * MiB}&how=sdk")
    assert status == 200 and len(body) == 64 * MiB
    assert body == expected_body(64 * MiB)
    assert headers.get("transfer-encoding") == "chunked"  # streamed through the writer, in pieces
    # A small body stays in the response record: one piece, with a content-length.
    status, headers, body = running.get("/sizes/body?bytes=1000&how=sdk")
    assert (status, headers.get("content-length"), body) == (200, "1000", expected_body(1000))


def test_a_body_returned_whole_is_capped_by_wasmtime_and_the_failure_says_so(running: Running) -> None:
    """What a guest returns in `response.body` leaves it in one call: the whole record counts, so a body of up to
    MAX_LIFTED_ITEMS bytes less a little for the status and headers (the README's limit); more traps the guest, and
    the 500 says what the limit is and how to send more."""
    size = MAX_LIFTED_ITEMS - 1000
    status, _, body = running.get(f"/sizes/body?bytes={size}&how=inline")
    assert status == 200 and body == expected_body(size)
    status, _, body = running.get(f"/sizes/body?bytes={MAX_LIFTED_ITEMS + 1}&how=inline")
    assert status == 500
    assert f"at most {MAX_LIFTED_ITEMS} list items" in body.decode() and "response-writer.write" in body.decode()


# -- vectors into a guest, inputs out of it -------------------------------------------------------------------------


def test_a_guest_receives_8192_vectors(running: Running) -> None:
    before = running.samples()
    got = running.get_json(f"/sizes/embed?n=8192&how=sdk&model={MINILM}")
    assert got["ok"]["count"] == 8192 and got["ok"]["dim"] == 384
    # The SDK called the host in batches; every token is counted once.
    assert prompt_tokens(before, running.samples(), MINILM) == got["ok"]["tokens"] > 8192


def test_an_input_too_large_for_one_call_is_refused_by_the_sdk_before_any_work(running: Running) -> None:
    """One token list longer than one call can carry out of the guest: the SDK's InvalidInput naming the input
    and the limit; batches of many smaller lists go through."""
    before = running.samples()
    got = running.get_json(f"/sizes/embed-tokens?n=1&len={MAX_LIFTED_ITEMS}&how=sdk&model={MINILM}")
    assert got["err"]["kind"] == "InvalidInput"
    assert re.search(r"inputs\[0\] is too large .* at most 2796202 list items", got["err"]["message"]), got
    assert prompt_tokens(before, running.samples(), MINILM) == 0
    got = running.get_json(f"/sizes/embed-tokens?n=3&len=5&how=sdk&model={MINILM}")
    assert got["ok"]["count"] == 3 and got["ok"]["tokens"] == 15
