"""agent: a chat whose tools are HTTP APIs. The model is asked a question with two tools; it must call one (the
host constrains its reply to a call whose arguments match the tool's JSON Schema), the guest makes each call as an
HTTP request to the API (`llmhost_guest.http`, only to hosts the config grants), and the model answers with the
results. Prints each call it made (tool, arguments, the API's status and body), then the answer.

The API's base URL is a config value (`weather-api`, `llmhost_guest.config`), so the operator points the agent at
another API without rebuilding it, and grants that host in `allowed-outbound-hosts`.
"""

import json
import sys
from urllib.parse import quote

from llmhost_guest import LlmError, config, http, llm
from wit_world import WitWorld as _World

MODEL = "smollm2-135m"  # the built-in instruct model (Gemma 3 270M is pretrained only: it was never tuned to chat)
QUESTION = "How warm is it in Paris right now?"
API_BASE = "weather-api"  # the config value holding the API's base URL
CITY = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 40}},
    "required": ["city"],
    "additionalProperties": False,
}
TOOLS = [
    {"name": "get_weather", "description": "The weather in a city now: temperature (°C) and sky.", "parameters": CITY},
    {"name": "get_population", "description": "How many people live in a city.", "parameters": CITY},
]
FINAL = "Now answer my question in one sentence."
PROSE = r"[A-Z][^{}<>\n.!?]*[.!?]"  # the answer's shape: one sentence
PATHS = {"get_weather": "/weather", "get_population": "/population"}  # each tool's endpoint
PARAMS = {"max_tokens": 64, "temperature": 0.0}  # greedy: the same calls and answer every run


def call_api(base, name, arguments):
    """The tool call as an HTTP request: (what to print as its outcome, the text the model gets as its result)."""
    city = str(json.loads(arguments).get("city", ""))
    try:
        reply = http.get(f"{base}{PATHS[name]}?city={quote(city)}", timeout_s=10)
    except http.HttpError as error:  # denied, timeout, connection...: the model is told, the run goes on
        result = json.dumps({"error": f"{error.kind}: {error.message}"})
        return f"{error.kind} {result}", result
    return f"{reply.status} {reply.text()}", reply.text()


class WitWorld(_World):
    def run(self, args: list[str]) -> int:
        question = " ".join(args) if args else QUESTION
        base = config.get(API_BASE)
        if base is None:
            print(f"agent: no config value `{API_BASE}` (set it under [sandbox] config)", file=sys.stderr)
            return 1
        messages = [{"role": "user", "content": question}]
        try:
            # tool_choice "required": the reply is one or more calls, never text (a small model left to choose
            # often answers from memory instead).
            reply = llm.chat(messages, MODEL, tools=TOOLS, tool_choice="required", **PARAMS)
            # The calls go into the history with ids of our own, so the conversation is the same every run.
            calls = [
                {"id": f"call_{i}", "name": call.name, "arguments": call.arguments}
                for i, call in enumerate(reply.tool_calls)
            ]
            messages.append({"role": "assistant", "content": None, "tool_calls": calls})
            for call in calls:
                outcome, result = call_api(base.rstrip("/"), call["name"], call["arguments"])
                print(f"call: {call['name']}({call['arguments']}) -> {outcome}")
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
            # Now the answer, from the results: no tools offered, and the reply constrained to one sentence of prose
            # (a small model otherwise tends to echo the tool result's JSON).
            messages.append({"role": "user", "content": FINAL})
            answer = llm.chat(messages, MODEL, regex=PROSE, **PARAMS)
        except LlmError as error:
            print(f"agent: {type(error).__name__}: {error.message}", file=sys.stderr)
            return 1
        print(f"answer: {answer.text.strip()}")
        return 0
