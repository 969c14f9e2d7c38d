"""Benchmark guest: `infer MODEL N PROMPT` times one greedy `infer` call from inside the component and prints
JSON; `noop` returns at once (for start-up timing)."""

import json
import time

from wit_world import WitWorld as _World
from wit_world.imports import llm


class WitWorld(_World):
    def run(self, args: list[str]) -> int:
        if not args or args[0] == "noop":
            return 0
        _, model, n, prompt = args
        params = llm.InferencingParams(
            max_tokens=int(n),
            repeat_penalty=1.0,
            repeat_penalty_last_n_token_count=0,
            stop=[],
            temperature=0.0,
            top_k=0,
            top_p=1.0,
            seed=None,
        )
        start = time.perf_counter()
        result = llm.infer(model, prompt, params)
        elapsed = time.perf_counter() - start
        print(json.dumps({"seconds": elapsed, "generated": result.usage.generated_token_count, "text": result.text}))
        return 0
