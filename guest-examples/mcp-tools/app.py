"""mcp-tools: two tools for agents, `summarize` and `extract`, each a function the guest's own world exports
(wit/world.wit). `llmhost mcp DIR` builds the guest and serves every exported function as an MCP tool: the WIT doc
comment is the tool's description, the parameter types its input schema.

A tool answers `Ok(text)`, or raises `Err(message)`: the client then gets a tool error with that message.
"""

import json

from componentize_py_types import Err
from llmhost_guest import LlmError, llm
from wit_world import WitWorld

MODEL = "gemma-3-270m"
MAX_WORDS = 200
GREEDY = dict(temperature=0.0, top_k=0, top_p=1.0, repeat_penalty=1.0, repeat_penalty_last_n_token_count=0)


class WitWorld(WitWorld):
    def summarize(self, text: str, max_words: int) -> str:
        if not text.strip():
            raise Err("text is empty: give the text to summarize")
        if not 1 <= max_words <= MAX_WORDS:
            raise Err(f"max-words must be from 1 to {MAX_WORDS}, got {max_words}")
        prompt = f"Summarize the text in at most {max_words} words.\nText: {text}\nSummary:"
        try:
            # About two tokens a word; the answer is then cut at the word limit (the model may run over it).
            result = llm.infer(prompt, MODEL, max_tokens=2 * max_words + 8, stop=["\n\n"], **GREEDY)
        except LlmError as error:
            raise Err(error.message) from None
        return " ".join(result.text.split()[:max_words])

    def extract(self, text: str, schema: str) -> str:
        try:
            parsed = json.loads(schema)
        except ValueError as error:
            raise Err(f"schema is not JSON: {error}") from None
        prompt = f"Extract the data the JSON Schema describes from the text, as JSON.\nSchema: {schema}\n"
        prompt += f"Text: {text}\nJSON: "
        try:
            # The host constrains generation to the schema: what comes back parses and validates.
            result = llm.infer(prompt, MODEL, max_tokens=128, json_schema=parsed, **GREEDY)
        except LlmError as error:
            raise Err(error.message) from None
        if result.finish_reason != "stop":
            raise Err(f"the answer did not fit in 128 tokens (finish reason {result.finish_reason})")
        return result.text
