"""Structured-output benchmark (part of `make bench`): what a constraint costs.

- Decode tok/s of a JSON-schema-constrained greedy generation ÷ the same unconstrained, through the engine, runs
  interleaved; and the same schema through llama.cpp's own grammar sampler (GBNF from llama-cpp-python's
  JSON-schema converter, `Llama.create_completion(grammar=...)`) ÷ its unconstrained run, as the anchor.
- 8 concurrent streams, half of them constrained: aggregate tok/s ÷ 8 unconstrained streams.
- Time to the first token with a schema never seen before (grammar compilation) and with the same schema again
  (served from the compiled-grammar cache).

`run` measures one model (bench/run.py calls it for each built-in model, each in a fresh process).
"""

from __future__ import annotations

import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from llmhost import Host, HostConfig, InferencingParams, StreamChunk
from llmhost.config import ModelConfig
from llmhost.domain.types import Constraint

TOKENS = 96
ROUNDS = 5
PROMPT = "A list of measurements in JSON: "
# Long by construction: the array must have many items, so both runs generate exactly TOKENS tokens.
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "values": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 999}, "minItems": 100},
    },
    "required": ["name", "values"],
    "additionalProperties": False,
}
FREE = InferencingParams(max_tokens=TOKENS, temperature=0.0, repeat_penalty=1.0, top_k=0, top_p=1.0)
CONSTRAINED = FREE.model_copy(update={"constraint": Constraint.json_schema(json.dumps(SCHEMA))})


def _rate(host: Host, model: str, params: InferencingParams, prompt: str = PROMPT) -> float:
    start = time.perf_counter()
    result = host.infer(model, prompt, params)
    return result.usage.generated_token_count / (time.perf_counter() - start)


def _first_token_s(host: Host, model: str, params: InferencingParams) -> float:
    start = time.perf_counter()
    stream = host.infer_stream(model, PROMPT, params)
    try:
        for event in stream:
            if isinstance(event, StreamChunk):
                break
    finally:
        stream.close()
    return time.perf_counter() - start


def _concurrent(host: Host, model: str, params: list[InferencingParams]) -> float:
    def one(i: int) -> int:
        return host.infer(model, f"Run {i}: {PROMPT}", params[i]).usage.generated_token_count

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(params)) as pool:
        generated = sum(pool.map(one, range(len(params))))
    return generated / (time.perf_counter() - start)


def _llama_cpp_anchor(model_path: Path, threads: int, n_gpu_layers: int) -> tuple[float, float]:
    """(constrained tok/s, unconstrained tok/s) through llama-cpp-python with llama.cpp's grammar sampler."""
    import llama_cpp
    from llama_cpp.llama_grammar import LlamaGrammar, json_schema_to_gbnf

    llm = llama_cpp.Llama(str(model_path), n_ctx=2048, n_threads=threads, n_gpu_layers=n_gpu_layers, verbose=False)
    grammar = LlamaGrammar.from_string(json_schema_to_gbnf(json.dumps(SCHEMA)), verbose=False)

    def rate(constrained: bool) -> float:
        llm.reset()
        start = time.perf_counter()
        out = llm.create_completion(
            PROMPT,
            max_tokens=TOKENS,
            temperature=0.0,
            repeat_penalty=1.0,
            top_k=1,
            grammar=grammar if constrained else None,
        )
        return int(out["usage"]["completion_tokens"]) / (time.perf_counter() - start)  # type: ignore[index]

    rate(True)  # warm-up
    pairs = [(rate(True), rate(False)) for _ in range(3)]
    return statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)


def run(config: HostConfig, model_path: Path, model: str, threads: int, n_gpu_layers: int) -> list[str]:
    cfg = config.model_copy(
        update={
            "models": {
                model: ModelConfig(
                    threads=threads, n_gpu_layers=n_gpu_layers, slots=8, context_length=1024, prefix_cache=False
                )
            }
        }
    )
    with Host(cfg) as host:
        host.infer(model, "warm up", InferencingParams(max_tokens=4))
        vocab = host.model_info(model).vocab_size
        # The model's first constrained request also builds llguidance's view of the vocabulary (once per model).
        very_first = _first_token_s(host, model, FREE.model_copy(update={"constraint": _new_schema(99)}))
        fresh = [_first_token_s(host, model, FREE.model_copy(update={"constraint": _new_schema(i)})) for i in range(3)]
        cached = [_first_token_s(host, model, CONSTRAINED) for _ in range(4)][1:]
        free_first = [_first_token_s(host, model, FREE) for _ in range(3)]
        constrained: list[float] = []
        free: list[float] = []
        for i in range(ROUNDS):  # interleaved, the order alternating
            order = (
                [(constrained, CONSTRAINED), (free, FREE)] if i % 2 == 0 else [(free, FREE), (constrained, CONSTRAINED)]
            )
            for rates, params in order:
                rates.append(_rate(host, model, params))
        mixed = [CONSTRAINED if i % 2 == 0 else FREE for i in range(8)]
        batch_mixed, batch_free = [], []
        for _ in range(2):
            batch_mixed.append(_concurrent(host, model, mixed))
            batch_free.append(_concurrent(host, model, [FREE] * 8))
    anchor_constrained, anchor_free = _llama_cpp_anchor(model_path, threads, n_gpu_layers)
    ratio = statistics.median(constrained) / statistics.median(free)
    batch_ratio = statistics.median(batch_mixed) / statistics.median(batch_free)
    return [
        f"Greedy, {TOKENS} tokens, prompt {PROMPT!r}, a JSON schema whose array needs ≥ 100 items (so every run "
        f"generates {TOKENS} tokens); median of {ROUNDS} interleaved rounds.",
        "",
        "| measure | value | target |",
        "| --- | ---: | ---: |",
        f"| llmhost: constrained tok/s ÷ unconstrained ({statistics.median(constrained):.1f} ÷ "
        f"{statistics.median(free):.1f}) | **{ratio:.3f}** ({'met' if ratio >= 0.9 else 'NOT met'}) | ≥ 0.90 |",
        f"| anchor, llama.cpp's grammar sampler (GBNF from llama-cpp-python's converter): constrained ÷ "
        f"unconstrained ({anchor_constrained:.1f} ÷ {anchor_free:.1f}) | {anchor_constrained / anchor_free:.3f} | |",
        f"| 8 concurrent streams, half constrained: aggregate tok/s ÷ 8 unconstrained "
        f"({statistics.median(batch_mixed):.1f} ÷ {statistics.median(batch_free):.1f}) | **{batch_ratio:.3f}** "
        f"({'met' if batch_ratio >= 0.85 else 'NOT met'}) | ≥ 0.85 |",
        f"| time to first token of the model's first constrained request (also builds llguidance's tokenizer "
        f"for the {vocab // 1000}k-token vocabulary, once per model) | {very_first * 1000:.0f} ms | |",
        f"| time to first token, a schema never seen (compiled now), median of 3 | "
        f"{statistics.median(fresh) * 1000:.0f} ms | |",
        f"| time to first token, the same schema again (compiled-grammar cache) | "
        f"{statistics.median(cached) * 1000:.0f} ms | |",
        f"| time to first token, unconstrained | {statistics.median(free_first) * 1000:.0f} ms | |",
    ]


def _new_schema(i: int) -> Constraint:
    schema = dict(SCHEMA, properties={**SCHEMA["properties"], f"extra{time.time_ns()}_{i}": {"type": "boolean"}})  # type: ignore[dict-item]
    return Constraint.json_schema(json.dumps(schema))
