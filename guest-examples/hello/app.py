"""hello: complete a prompt with the host's LLM and print the text, the finish reason and the token usage."""

import sys

from llmhost_guest import LlmError, llm
from wit_world import WitWorld

MODEL = "gemma-3-270m"
DEFAULT_PROMPT = "The capital of France is"


class WitWorld(WitWorld):
    def run(self, args: list[str]) -> int:
        prompt = " ".join(args) if args else DEFAULT_PROMPT
        try:
            # Only what differs from the host's defaults: greedy (the same answer every run), 32 tokens, one line.
            result = llm.infer(prompt, MODEL, max_tokens=32, stop="\n", temperature=0.0, repeat_penalty=1.1)
        except LlmError as error:  # InvalidInput, ModelNotSupported or RuntimeError_, with the host's message
            print(f"hello: {type(error).__name__}: {error.message}", file=sys.stderr)
            return 1
        print(result.text)
        print(f"finish-reason: {result.finish_reason}")
        print(f"usage: prompt={result.usage.prompt_tokens} generated={result.usage.generated_tokens}")
        return 0
