"""`llmhost serve --pull` with an `hf-repo` model: downloaded from a local server speaking the Hub's protocol
(tests/hub_server.py; nothing reaches the internet) at start, then answering through openai-compat. The pulled file
is the built-in SmolLM2's, so the pulled model answers as the built-in does, and the response names the model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hub_server import COMMIT, Hub, hub_server
from llmhost.engine.local.models import smollm2_path
from llmhost.toolchains import build_component
from serve_driver import Server, serving

from .conftest import SMOL
from .test_examples import REPO

pytestmark = [pytest.mark.model, pytest.mark.wasm]
HUB_REPO = "test/SmolLM2-135M-Instruct-GGUF"
FILE = "SmolLM2-135M-Instruct-Q4_1.gguf"


def chat(server: Server, model: str) -> dict[str, Any]:
    body = {"model": model, "messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 8}
    status, data = server.request(
        "POST",
        "/v1/chat/completions",
        json.dumps({**body, "temperature": 0}).encode(),
        {"content-type": "application/json"},
    )
    assert status == 200, data
    return json.loads(data)


def test_serve_pull_downloads_the_model_and_it_answers(
    llmhost_cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wasm = build_component(
        REPO / "guest-examples" / "openai-compat", tmp_path / "openai.wasm", "http-app", cache_dir=llmhost_cache_dir
    )
    config = tmp_path / "app.toml"
    config.write_text(
        f'[components.openai]\nsource = "{wasm}"\n[routes]\n"/v1" = "openai"\n\n'
        f'[models.pulled]\nhf-repo = "{HUB_REPO}"\nhf-file = "*Q4_1.gguf"\nthreads = 1\n'
        f"[models.{SMOL}]\nthreads = 1\n"
    )
    with hub_server(Hub({HUB_REPO: {FILE: smollm2_path(llmhost_cache_dir)}})) as hub:
        for key, value in {"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf")}.items():
            monkeypatch.setenv(key, value)
        for key in ("HF_HUB_CACHE", "HF_HUB_OFFLINE", "HF_TOKEN"):
            monkeypatch.delenv(key, raising=False)
        with serving(["-c", str(config), "--pull"], llmhost_cache_dir) as server:
            pulled, builtin = chat(server, "pulled"), chat(server, SMOL)
            assert server.stop() == 0
        assert any(COMMIT in line for line in server.lines)  # the resolved commit is logged
        assert any(method == "GET" and path.endswith(FILE) for method, path, _ in hub.requests)
    assert pulled["model"] == "pulled" and builtin["model"] == SMOL
    assert pulled["choices"][0]["message"] == builtin["choices"][0]["message"]
    assert pulled["usage"] == builtin["usage"]
