"""stream: print a completion as it is generated, then why it ended and the token usage (from the done event)."""

import sys

from componentize_py_types import Err
from wit_world import WitWorld as _World
from wit_world.imports import llm

MODEL = "gemma-3-270m"
DEFAULT_PROMPT = "Once upon a time, there was a dragon who"


class WitWorld(_World):
    def run(self, args: list[str]) -> int:
        prompt = " ".join(args) if args else DEFAULT_PROMPT
        params = llm.InferencingParams(
            max_tokens=40,
            repeat_penalty=1.1,
            repeat_penalty_last_n_token_count=64,
            stop=["\n"],
            temperature=0.0,  # greedy: the same text every run
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
            with llm.infer_stream(MODEL, prompt, params) as stream:
                chunks = 0
                while True:
                    event = stream.next()
                    if isinstance(event, llm.StreamEvent_Chunk):
                        chunks += 1
                        sys.stdout.write(event.value.text)
                        sys.stdout.flush()  # show each piece as soon as it arrives
                    elif isinstance(event, llm.StreamEvent_Done):
                        done = event.value
                        print()
                        print(f"finish-reason: {done.finish_reason.name.lower().replace('_', '-')}")
                        print(
                            f"usage: prompt={done.usage.prompt_token_count} "
                            f"generated={done.usage.generated_token_count} chunks={chunks}"
                        )
                        return 0
                    else:
                        print("stream: ended without a done event", file=sys.stderr)
                        return 1
        except Err as error:
            print(f"stream: {type(error.value).__name__}: {getattr(error.value, 'value', '')}", file=sys.stderr)
            return 1
