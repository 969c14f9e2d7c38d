"""Bounded work with the real model under `llmhost serve`: a prompt or text far too long for the context window is
refused before it is tokenized, so it costs the host little memory and time, whichever call carries it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmhost.domain.limits import MAX_TOKENIZE_BYTES
from serve_driver import Server, serving

pytestmark = [pytest.mark.model, pytest.mark.wasm]
CONTEXT = 4096
SIZE = 16 * 1024 * 1024
# Host memory an oversized call may take beyond a call that is refused before its text is looked at (for a model
# that does not exist): wasmtime-py's lifting of a string argument alone makes about four copies of it (the C API's
# value, bytes, str), which no host function can avoid; what the engine adds must be small. (Before: tokenizing
# 8 MB took +531 MB for `infer`, +1,052 MB for `tokenize`.)
MAX_GROWTH_KB = 50 * 1024


@pytest.fixture(scope="module")
def server(
    http_wasm: dict[str, Path], llmhost_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    config = tmp_path_factory.mktemp("serve-bounds") / "llmhost.toml"
    config.write_text(
        f"""
[models.gemma-3-270m]
context-length = {CONTEXT}
slots = 1

[limits]
deadline-s = 120

[components.probe]
source = "{http_wasm["http_probe"]}"

[routes]
"/" = "probe"
"""
    )
    with serving(["-c", str(config)], llmhost_cache_dir) as running:
        running.get_json("/infer?max_tokens=1")  # load the model
        running.get_json("/big?op=tokenize&bytes=300000")  # and the vocabulary's longest token (computed once)
        yield running


@pytest.mark.parametrize("op", ["infer", "chat", "append", "score", "embed", "tokenize"])
def test_an_oversized_text_is_refused_cheaply_naming_the_context(server: Server, op: str) -> None:
    growth, body = server.peak_growth_kb(f"/big?op={op}&bytes={SIZE}")
    error = json.loads(body)["err"]
    assert error["kind"] == "invalid-input", error
    if op == "tokenize":
        assert str(MAX_TOKENIZE_BYTES) in error["message"]
    else:
        assert f"context window of {CONTEXT} tokens" in error["message"]
    lifted = op if op in ("infer", "chat", "embed", "tokenize") else "infer"  # the same strings lifted
    lift_only, body = server.peak_growth_kb(f"/big?op={lifted}&model=nope&bytes={SIZE}")
    assert json.loads(body)["err"]["kind"] in ("model-not-supported", "invalid-input")
    assert growth - lift_only < MAX_GROWTH_KB, (growth, lift_only)


def test_a_text_near_the_bound_is_still_tokenized_and_counted(server: Server) -> None:
    # 4096 tokens need more than 4096 × 48 characters only for the longest tokens: ordinary text of 60 KB is
    # refused by its token count (the message gives it), not by its length.
    error = server.get_json("/big?op=infer&bytes=60000")["err"]
    assert error["kind"] == "invalid-input" and "tokens but the context window is 4096 tokens" in error["message"]
    assert server.get_json("/big?op=append&bytes=2000")["ok"] > 0
