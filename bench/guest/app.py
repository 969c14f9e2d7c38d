"""Benchmark guest, timing from inside the component and printing JSON:
`infer MODEL N PROMPT` one greedy `infer` call; `stream MODEL N PROMPT` the same through `infer-stream` (time to
the first chunk and to `done`); `list-seq MODEL N PROMPT` / `list-infer MODEL N PROMPT` the numbered-list program
(guest-examples/continuous) on a sequence / re-sending the whole prompt to `infer` at each step;
`seq-generate MODEL N PROMPT` / `seq-loop MODEL N PROMPT` N greedy tokens on a sequence by one `generate` / by a
guest loop on `next-token-logprobs(1)` + `append-tokens`; `noop` returns at once (for start-up timing)."""

import json
import time

from wit_world import WitWorld as _World
from wit_world.imports import llm, sequences


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
        constraint=None,
        logprobs=None,
        frequency_penalty=0.0,
        presence_penalty=0.0,
        logit_bias=[],
    )


def numbered_list(model: str, items: int, prompt: str, use_sequence: bool) -> dict[str, object]:
    params = llm.InferencingParams(
        max_tokens=24,
        repeat_penalty=1.0,
        repeat_penalty_last_n_token_count=0,
        stop=["\n"],
        temperature=0.0,
        top_k=0,
        top_p=1.0,
        seed=None,
        constraint=None,
        logprobs=None,
        frequency_penalty=0.0,
        presence_penalty=0.0,
        logit_bias=[],
    )
    start = time.perf_counter()
    if use_sequence:
        with sequences.Sequence.open(model) as seq:
            seq.append(prompt)
            for i in range(items):
                seq.append(f"{i}, ")
                seq.generate(params)
                seq.append("\n")
            text, evaluated, length = seq.text(), seq.evaluated_token_count(), seq.len()
    else:
        text, evaluated = prompt, 0
        for i in range(items):
            text += f"{i}, "
            result = llm.infer(model, text, params)
            # infer evaluates the whole prompt, then every generated token but the last one sampled
            evaluated += result.usage.prompt_token_count + result.usage.generated_token_count - 1
            text += result.text + "\n"
        length = len(llm.tokenize(model, text))
    elapsed = time.perf_counter() - start
    return {"seconds": elapsed, "evaluated": evaluated, "length": length, "text": text}


def sequence_steps(model: str, n: int, prompt: str, loop: bool) -> dict[str, object]:
    """n greedy tokens on a sequence after its prompt: one `generate`, or a guest loop of
    `next-token-logprobs(1)` + `append-tokens` (what a guest-side sampler costs). Timed from after the prompt."""
    with sequences.Sequence.open(model) as seq:
        seq.append(prompt)
        started_at = time.time()  # wall clock, comparable across concurrent guests (the bench's aggregate window)
        start = time.perf_counter()
        if loop:
            tokens: list[int] = []
            while len(tokens) < n:
                best = seq.next_token_logprobs(1)[0]
                if not best.bytes:
                    break
                seq.append_tokens([best.token_id])
                tokens.append(best.token_id)
            generated = len(tokens)
        else:
            generated = seq.generate(greedy(str(n))).usage.generated_token_count
        elapsed = time.perf_counter() - start
        return {"seconds": elapsed, "generated": generated, "started_at": started_at, "ended_at": time.time()}


class WitWorld(_World):
    def run(self, args: list[str]) -> int:
        if not args or args[0] == "noop":
            return 0
        op, model, n, prompt = args
        if op in ("list-seq", "list-infer"):
            print(json.dumps(numbered_list(model, int(n), prompt, op == "list-seq")))
            return 0
        if op in ("seq-generate", "seq-loop"):
            print(json.dumps(sequence_steps(model, int(n), prompt, op == "seq-loop")))
            return 0
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
