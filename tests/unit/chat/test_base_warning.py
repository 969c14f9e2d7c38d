"""A chat on a base model runs, with one warning per model naming it, its kind and the ways out; an instruct
model's chats, and a base model given a template of the config's, are not warned of (on the fake engine)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from llmhost import Host
from llmhost.config import FakeEngineConfig, HostConfig, ModelConfig

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "llmhost.chat.service" and r.levelno == logging.WARNING]


def test_a_base_model_chat_warns_once_per_model(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    models = {
        "gemma-3-270m": ModelConfig(),  # built-in: base
        "smollm2-135m": ModelConfig(),  # built-in: instruct
        "mine": ModelConfig(kind="base", chat_template="{{ messages[0]['content'] }}"),  # the user chose a format
        "other": ModelConfig(kind="base"),
    }
    config = HostConfig(engine=FakeEngineConfig(context_length=512), models=models, cache_dir=tmp_path)
    with caplog.at_level(logging.WARNING), Host(config) as host:
        for model in ("gemma-3-270m", "gemma-3-270m", "smollm2-135m", "mine", "other", "other"):
            assert host.chat(model, QUESTION).message.content  # it still runs
    said = warnings(caplog)
    assert len(said) == 2, said
    assert all("base (pretrained)" in s and "chat-template" in s and "instruct" in s for s in said)
    assert ["'gemma-3-270m'" in said[0], "'other'" in said[1]] == [True, True]
