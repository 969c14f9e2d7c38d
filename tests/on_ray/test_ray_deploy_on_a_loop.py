"""A host made on an event loop's thread (as Serve runs the constructor of `llmhost.ray:app`'s ingress replica, which
builds the app's host) deploys a `backend = "ray"` model, and attaches to it, although Serve refuses blocking handle
calls on such a thread."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from llmhost import HostConfig
from llmhost.domain.types import InferencingParams
from llmhost.engine.base import Engine, collect
from llmhost.engine.registry import create_registry

MODEL = {"backend": "ray", "replica-cpus": 0.25, "slots": 2}


def test_a_host_made_on_an_event_loop_deploys_and_attaches(ray_host_config: Callable[..., HostConfig]) -> None:
    config = ray_host_config({"onloop": MODEL})

    async def host_engine() -> Engine:
        return create_registry(config).engine("onloop")

    made: list[Any] = [asyncio.run(host_engine()) for _ in range(2)]  # the first deploys, the second attaches
    params = InferencingParams(max_tokens=8, temperature=0.0)
    results = [collect(engine.stream("onloop", "abc", params)) for engine in made]
    assert results[0].text == results[1].text and results[0].usage.generated_token_count == 8
