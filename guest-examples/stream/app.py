"""stream: print a completion as it is generated, then why it ended and the token usage (from the done event)."""

import sys

from llmhost_guest import LlmError, llm
from wit_world import WitWorld as _World

MODEL = "gemma-3-270m"
DEFAULT_PROMPT = "Once upon a time, there was a dragon who"


class WitWorld(_World):
    def run(self, args: list[str]) -> int:
        prompt = " ".join(args) if args else DEFAULT_PROMPT
        chunks = 0
        try:
            # greedy: the same text every run; at most 40 tokens, cut at the first newline
            with llm.stream(prompt, MODEL, max_tokens=40, stop="\n", temperature=0.0) as stream:
                for chunk in stream:
                    chunks += 1
                    sys.stdout.write(chunk.text)
                    sys.stdout.flush()  # show each piece as soon as it arrives
        except LlmError as error:
            print(f"stream: {type(error).__name__}: {error.message}", file=sys.stderr)
            return 1
        if stream.done is None:
            print("stream: ended without a done event", file=sys.stderr)
            return 1
        print()
        print(f"finish-reason: {stream.done.finish_reason}")
        usage = stream.done.usage
        print(f"usage: prompt={usage.prompt_tokens} generated={usage.generated_tokens} chunks={chunks}")
        return 0
