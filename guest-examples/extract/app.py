"""extract: turn free text into a JSON object of a given schema (structured output, on the guest SDK).

    llmhost run extract.wasm -- "Maria Lopez, 34, lives in Porto and works as a nurse."

The host constrains generation to the schema (a `json-schema` constraint), so the output always parses and
validates when generation ends with `stop`; with `length` (the token budget ran out) it is a valid prefix.
"""

import json
import sys

from llmhost_guest import LlmError, llm
from wit_world import WitWorld

MODEL = "gemma-3-270m"
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "city": {"type": "string", "maxLength": 40},
        "occupation": {"type": "string", "maxLength": 40},
    },
    "required": ["name", "age", "city", "occupation"],
    "additionalProperties": False,
}
DEFAULT_TEXT = "Maria Lopez, 34, lives in Porto and works as a nurse."


class WitWorld(WitWorld):
    def run(self, args: list[str]) -> int:
        text = " ".join(args) or DEFAULT_TEXT
        prompt = (
            "Extract the person described in the text as JSON with the fields name, age, city, occupation.\n"
            f"Text: {text}\nJSON: "
        )
        try:
            # greedy: the same object every run; the host constrains the output to the schema
            result = llm.infer(
                prompt, MODEL, max_tokens=80, temperature=0.0, top_k=0, top_p=1.0, repeat_penalty=1.0,
                repeat_penalty_last_n_token_count=0, json_schema=SCHEMA,
            )  # fmt: skip
        except LlmError as error:
            print(f"extract: {type(error).__name__}: {error.message}", file=sys.stderr)
            return 1
        complete = result.finish_reason == "stop"  # else a valid prefix: printed as it is
        print(json.dumps(json.loads(result.text), indent=2) if complete else result.text)
        print(f"finish-reason: {result.finish_reason}", file=sys.stderr)
        return 0
