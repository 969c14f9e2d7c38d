"""`tool-choice` required / named promise a call: a `max-tokens` too small for any valid call is refused before
generating (on the fake engine, whose tokens are bytes plus a beginning-of-sequence token)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmhost import Host
from llmhost.config import FakeEngineConfig, HostConfig
from llmhost.domain.errors import InvalidInput
from llmhost.domain.types import ChatMessage, ChatParams, ChatRole, InferencingParams, Tool, ToolChoice

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOL = Tool(name="get_weather", parameters=json.dumps(CITY))
# The shortest valid call, in the JSON call format (the fake engine's template knows no tools): 45 bytes.
SHORTEST = '{"name": "get_weather", "arguments": {"city": ""}}'


def chat(host: Host, max_tokens: int, choice: ToolChoice) -> None:
    params = ChatParams(inferencing=InferencingParams(max_tokens=max_tokens), tools=(TOOL,), tool_choice=choice)
    host._llm.chat("gemma-3-270m", [ChatMessage(role=ChatRole.USER, content="Weather in Paris?")], params)


@pytest.mark.parametrize("choice", [ToolChoice(kind="required"), ToolChoice(kind="named", name="get_weather")])
def test_a_budget_too_small_for_any_call_is_refused_naming_max_tokens(tmp_path: Path, choice: ToolChoice) -> None:
    config = HostConfig(engine=FakeEngineConfig(script=SHORTEST, context_length=512), cache_dir=tmp_path)
    with Host(config) as host:
        with pytest.raises(InvalidInput, match=rf"max-tokens \(8\) is too small.*at least {len(SHORTEST)}"):
            chat(host, 8, choice)
        # Enough for the shortest call, or `auto` (no call promised): past the check, to the engine, which here
        # cannot constrain a reply (the refusal the real engine never gives).
        for budget, kind in ((len(SHORTEST), choice), (8, ToolChoice(kind="auto"))):
            with pytest.raises(InvalidInput, match="structured output needs the llama-cpp engine"):
                chat(host, budget, kind)
