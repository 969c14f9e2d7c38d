"""hello: complete a prompt with the host's LLM and print the text, the finish reason and the token usage."""

import sys

from componentize_py_types import Err
from wit_world import WitWorld
from wit_world.imports import llm

MODEL = "gemma-3-270m"
DEFAULT_PROMPT = "The capital of France is"
ERROR_KINDS = {
    llm.Error_ModelNotSupported: "model-not-supported",
    llm.Error_InvalidInput: "invalid-input",
    llm.Error_RuntimeError: "runtime-error",
}


class WitWorld(WitWorld):
    def run(self, args: list[str]) -> int:
        prompt = " ".join(args) if args else DEFAULT_PROMPT
        params = llm.InferencingParams(
            max_tokens=32,
            repeat_penalty=1.1,
            repeat_penalty_last_n_token_count=64,
            stop=["\n"],
            temperature=0.0,  # greedy: the same answer every run
            top_k=40,
            top_p=0.9,
            seed=None,
            constraint=None,
            logprobs=None,
            frequency_penalty=0.0,
            presence_penalty=0.0,
            logit_bias=[],
        )
        try:
            result = llm.infer(MODEL, prompt, params)
        except Err as error:
            # error.value is one case of the WIT `error` variant; the string cases carry a message in `.value`.
            kind = ERROR_KINDS.get(type(error.value), "error")
            print(f"hello: {kind}: {getattr(error.value, 'value', '')}", file=sys.stderr)
            return 1
        print(result.text)
        print(f"finish-reason: {result.finish_reason.name.lower().replace('_', '-')}")
        print(f"usage: prompt={result.usage.prompt_token_count} generated={result.usage.generated_token_count}")
        return 0
