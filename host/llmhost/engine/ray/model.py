"""`RayModel`: one `backend = "ray"` model's deployment handle, and how the host calls it."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from llmhost.config import ModelConfig
from llmhost.engine.ray.calls import call, never, value
from llmhost.engine.ray.protocol import affinity_key


class RayModel:
    """One model's deployment handle, and how the host calls it."""

    def __init__(self, name: str, config: ModelConfig, handle: Any) -> None:
        self.name = name
        self.config = config
        self.handle = handle
        self.streaming = handle.options(stream=True)

    def affinity(self, prompt: str) -> str | None:
        return affinity_key(prompt) if self.config.prefix_affinity else None

    def engine_call(self, method: str, *args: Any, check: Callable[[], None] | None = None, prompt: str = "") -> Any:
        start = functools.partial(self.handle.engine_call.remote, method, args, affinity=self.affinity(prompt))
        return value(call(start, self.name, check or never))
