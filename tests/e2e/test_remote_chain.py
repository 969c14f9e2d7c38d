"""llmhost to llmhost: a model whose remote is another `llmhost serve` running guest-examples/openai-compat.

What that app serves today: /v1/completions with greedy params, stops, streaming with usage. Checked against the
official `openai` client calling the same server directly."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from llmhost import Host, HostConfig, InferencingParams
from llmhost.config import ModelConfig
from llmhost.domain.types import StreamChunk, StreamDone
from llmhost.engine.local.models import default_model_path
from serve_driver import Server, serving

pytestmark = [pytest.mark.model, pytest.mark.wasm]

CHAINED = "gemma-chained"
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def upstream(
    http_wasm: dict[str, Path], llmhost_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    config = tmp_path_factory.mktemp("chain") / "llmhost.toml"
    config.write_text(
        f"""
[components.openai]
source = "{http_wasm["openai-compat"]}"
[routes]
"/v1" = "openai"
[models.gemma-3-270m]
threads = 1
"""
    )
    with serving(["-c", str(config)], llmhost_cache_dir) as server:
        yield server


@pytest.fixture(scope="module")
def host(upstream: Server, llmhost_cache_dir: Path) -> Iterator[Host]:
    remote = ModelConfig(
        backend="openai",
        base_urls=(f"{upstream.url}/v1",),
        remote_model="gemma-3-270m",
        server="llmhost",
        path=default_model_path(llmhost_cache_dir),  # tokenize here: the app has no tokenize endpoint
    )
    with Host(HostConfig(models={CHAINED: remote}, cache_dir=llmhost_cache_dir)) as h:
        yield h


def test_greedy_infer_through_a_chained_llmhost_equals_the_direct_client(upstream: Server, host: Host) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=f"{upstream.url}/v1", api_key="unused", max_retries=0)
    direct = client.completions.create(model="gemma-3-270m", prompt=PROMPT, max_tokens=8, temperature=0)
    params = InferencingParams(max_tokens=8, temperature=0, repeat_penalty=1, top_k=0)
    result = host.engine.engine(CHAINED).infer(CHAINED, PROMPT, params)
    assert result.text == direct.choices[0].text
    assert result.finish_reason == "length"
    assert direct.usage is not None
    assert result.usage.prompt_token_count == direct.usage.prompt_tokens == len(host.tokenize(CHAINED, PROMPT))
    assert result.usage.generated_token_count == 8


def test_stops_and_streaming_through_a_chained_llmhost(host: Host) -> None:
    params = InferencingParams(max_tokens=8, temperature=0, repeat_penalty=1, top_k=0)
    full = host.engine.engine(CHAINED).infer(CHAINED, PROMPT, params).text
    stop = full[3:6]
    stopped = host.engine.engine(CHAINED).infer(CHAINED, PROMPT, params.model_copy(update={"stop": (stop,)}))
    assert stopped.text == full[: full.find(stop)] and stopped.finish_reason == "stop"
    events = list(host.engine.engine(CHAINED).stream(CHAINED, PROMPT, params))
    assert "".join(e.text for e in events if isinstance(e, StreamChunk)) == full
    assert [type(e) for e in events].count(StreamDone) == 1 and isinstance(events[-1], StreamDone)
