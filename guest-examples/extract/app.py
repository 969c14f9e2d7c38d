"""extract: turn free text into a JSON object of a given schema (structured output, llmhost:llm@0.2.0).

    llmhost run extract.wasm -- "Maria Lopez, 34, lives in Porto and works as a nurse."

The host constrains generation to the schema (a `json-schema` constraint), so the output always parses and
validates when generation ends with `stop`; with `length` (the token budget ran out) it is a valid prefix.
"""

import json
import sys

from componentize_py_types import Err
from wit_world import WitWorld
from wit_world.imports import llm

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
        params = llm.InferencingParams(
            max_tokens=80,
            repeat_penalty=1.0,
            repeat_penalty_last_n_token_count=0,
            stop=[],
            temperature=0.0,  # greedy: the same object every run
            top_k=0,
            top_p=1.0,
            seed=None,
            constraint=llm.Constraint_JsonSchema(json.dumps(SCHEMA)),
            logprobs=None,
            frequency_penalty=0.0,
            presence_penalty=0.0,
            logit_bias=[],
        )
        try:
            result = llm.infer(MODEL, prompt, params)
        except Err as error:
            print(f"extract: {type(error.value).__name__}: {getattr(error.value, 'value', '')}", file=sys.stderr)
            return 1
        complete = result.finish_reason == llm.FinishReason.STOP  # else a valid prefix: printed as it is
        print(json.dumps(json.loads(result.text), indent=2) if complete else result.text)
        print(f"finish-reason: {result.finish_reason.name.lower()}", file=sys.stderr)
        return 0
