"""Benchmark guest, timing from inside the component and printing JSON:
`infer MODEL N PROMPT` one greedy `infer` call; `stream MODEL N PROMPT` the same through `infer-stream` (time to
the first chunk and to `done`); `noop` returns at once (for start-up timing)."""

import json
import time

from wit_world import WitWorld as _World
from wit_world.imports import llm


def greedy(n: str) -> llm.InferencingParams:
    return llm.InferencingParams(
        max_tokens=int(n),
        repeat_penalty=1.0,
        repeat_penalty_last_n_token_count=0,
        stop=[],
        temperature=0.0,
        top_k=0,
        top_p=1.0,
        seed=None,
    )


class WitWorld(_World):
    def run(self, args: list[str]) -> int:
        if not args or args[0] == "noop":
            return 0
        op, model, n, prompt = args
        if op == "stream":
            start = time.perf_counter()
            first = None
            generated = 0
            with llm.infer_stream(model, prompt, greedy(n)) as stream:
                while True:
                    event = stream.next()
                    if isinstance(event, llm.StreamEvent_Chunk) and first is None:
                        first = time.perf_counter() - start
                    if isinstance(event, llm.StreamEvent_Done):
                        generated = event.value.usage.generated_token_count
                        break
            elapsed = time.perf_counter() - start
            print(json.dumps({"seconds": elapsed, "first_chunk": first, "generated": generated}))
            return 0
        params = greedy(n)
        start = time.perf_counter()
        result = llm.infer(model, prompt, params)
        elapsed = time.perf_counter() - start
        print(json.dumps({"seconds": elapsed, "generated": result.usage.generated_token_count, "text": result.text}))
        return 0
