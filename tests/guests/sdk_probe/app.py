"""A test guest for the guest SDK (llmhost_guest): each operation runs SDK calls and prints one JSON line,
{"ok": VALUE} or {"err": {"kind", "message"}}. The e2e tests (tests/e2e/test_sdk_guest.py) check the values.

    slices MODEL PROMPT N              generate N greedy tokens, then seq[:n] for every character offset n
    concat MODEL A B                   seq_a += seq_b, with both generated into first
    score MODEL PROMPT CONT_JSON       seq.score(conts) and, per continuation, its tokens forced one by one
    select MODEL PROMPT CHOICES_JSON   scores and seq.select(choices)
    beam MODEL PROMPT WIDTH N STOP     beam search vs greedy generation of N tokens
    errors MODEL                       the exceptions of some failing calls
    chat MODEL TOOL_CHOICE SEEDS       llm.chat with a weather tool, seeds 0..SEEDS-1; and a plain greedy chat
    next MODEL PROMPT N TOP            next_token_logprobs(TOP) along a greedy generation, and its logprobs
    greedy_loop MODEL PROMPT N         next_token_logprobs(1) + append_tokens against generate(temperature=0)
    seeded MODEL PROMPT N SEED         seeded generate_with, repeated; with another seed; with a stop
    forbid_force MODEL PROMPT N        processors that forbid the best candidate, or force the third
    trap_in_processor MODEL PROMPT N   a processor that raises halfway, with sequences and a stream open
"""

import json

from llmhost_guest import InvalidInput, LlmError, ModelNotSupported, Sequence, llm, processors
from wit_world import WitWorld as _World

GREEDY = {"temperature": 0.0, "repeat_penalty": 1.0}


def op_slices(model, prompt, count):
    with Sequence(model, prompt) as seq:
        seq.generate(max_tokens=int(count), **GREEDY)
        text = str(seq)
        out = []
        for n in range(len(text) + 1):
            with seq[:n] as part:
                ids = part.token_ids
                # The same continuation scored on the slice and on a fresh sequence fed its token ids: equal
                # (up to batch-shape noise) only if the slice's model state is exactly its token ids.
                probe = " the"
                with Sequence(model) as fresh:
                    fresh.append_tokens(ids)
                    fresh_score = fresh.score([probe])[0] if ids else None
                out.append(
                    {
                        "n": n,
                        "text": str(part),
                        "len": len(part),
                        "ids": ids,
                        "score": part.score([probe])[0] if ids else None,
                        "fresh": fresh_score,
                    }
                )
        return {"text": text, "ids": seq.token_ids, "slices": out}


def op_concat(model, first, second):
    a = Sequence(model, first)
    a.generate(max_tokens=6, **GREEDY)
    b = Sequence(model, second)
    b.generate(max_tokens=6, **GREEDY)
    before = {"text": str(a), "ids": a.token_ids, "logprobs": a.logprobs, "evaluated": a.evaluated_token_count}
    other = {"text": str(b), "ids": b.token_ids, "logprobs": b.logprobs, "ll": b.log_likelihood}
    a += b
    after = {
        "text": str(a),
        "ids": a.token_ids,
        "logprobs": a.logprobs,
        "ll": a.log_likelihood,
        "evaluated": a.evaluated_token_count,
    }
    plus = a + " and more"
    added = {"text": str(plus), "a_text": str(a)}
    return {"before": before, "other": other, "after": after, "plus": added, "bos": llm.tokenize("", model)}


def op_score(model, prompt, conts):
    continuations = json.loads(conts)
    bos = len(llm.tokenize("", model))
    with Sequence(model, prompt) as seq:
        scores = seq.score(continuations)
        forced = []
        for cont in continuations:
            with seq.fork() as f:
                for token in llm.tokenize(cont, model)[bos:]:
                    f.generate(max_tokens=1, logit_bias={token: 100.0}, **GREEDY)
                forced.append({"ll": f.log_likelihood, "text": str(f), "logprobs": f.logprobs})
        return {"scores": scores, "forced": forced, "after": str(seq), "ids": seq.token_ids}


def op_select(model, prompt, choices):
    options = json.loads(choices)
    with Sequence(model, prompt) as seq:
        scores = seq.score(options)
        chosen = seq.select(options)
        return {"scores": scores, "chosen": chosen, "text": str(seq)}


def op_beam(model, prompt, width, count, stop):
    stops = json.loads(stop)
    with Sequence(model, prompt) as seq:
        with seq.fork() as greedy:
            done = greedy.generate(max_tokens=int(count), stop=stops, **GREEDY)
            greedy_value = {"text": str(greedy), "ids": greedy.token_ids, "ll": greedy.log_likelihood}
            greedy_value["finish"] = done.finish_reason
        beams = seq.beam_search(int(width), int(count), stop=stops)
        value = [{"text": str(b), "ids": b.token_ids, "score": s, "ll": b.log_likelihood} for b, s in beams]
        for b, _ in beams:
            b.close()
        return {"greedy": greedy_value, "beams": value, "source": str(seq), "source_ids": seq.token_ids}


def op_errors(model):
    out = {}
    for name, action in {
        "unknown-model": lambda: llm.infer("hi", model="no-such-model"),
        "bad-temperature": lambda: llm.infer("hi", model=model, temperature=-1.0),
        "seq-unknown-model": lambda: Sequence("no-such-model"),
        "beam-width": lambda: Sequence(model, "hi").beam_search(width=99, max_tokens=2),
        "two-constraints": lambda: llm.infer("hi", model=model, regex="a", choice=["a"]),
    }.items():
        try:
            action()
            out[name] = None
        except LlmError as error:
            out[name] = {
                "type": type(error).__name__,
                "message": error.message,
                "invalid": isinstance(error, InvalidInput),
                "unsupported": isinstance(error, ModelNotSupported),
            }
    return out


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather forecast for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "days", "unit"],
        },
    },
}


def reply_json(reply):
    return {
        "content": reply.content,
        "text": reply.text,
        "calls": [{"id": c.id, "name": c.name, "args": c.args} for c in reply.tool_calls],
        "finish_reason": reply.finish_reason,
        "usage": [reply.usage.prompt_tokens, reply.usage.generated_tokens],
    }


def op_chat(model, tool_choice, seeds):
    ask = [{"role": "system", "content": "You are brief."}, ("user", "What is the weather in Paris for 3 days?")]
    replies = [
        reply_json(llm.chat(ask, model, tools=[WEATHER], tool_choice=tool_choice, max_tokens=96, seed=seed))
        for seed in range(int(seeds))
    ]
    plain = llm.chat([("user", "Say hello.")], model, max_tokens=12, temperature=0.0)
    return {"replies": replies, "plain": reply_json(plain)}


def op_next(model, prompt, count, top):
    """next_token_logprobs(top) at every position of a greedy generation, read from a fork at that position, and
    the logprobs the generation reported there."""
    with Sequence(model, prompt) as seq:
        start = seq.token_count
        result = seq.generate(max_tokens=int(count), logprobs=int(top), **GREEDY)
        ids = seq.token_ids
        reads = []
        with Sequence(model) as probe:
            probe.append_tokens(ids[:start])
            for i in range(len(result.logprobs)):
                before = probe.token_ids
                reads.append(probe.next_token_logprobs(int(top)))
                assert probe.token_ids == before  # left unchanged
                probe.append_tokens([ids[start + i]])
        generated = [
            {"id": e.token_id, "logprob": e.logprob, "top": [[t[0], t[2]] for t in e.top]} for e in result.logprobs
        ]
        return {"generated": generated, "reads": [[[t, lp, list(b)] for t, lp, b in r] for r in reads]}


def op_greedy_loop(model, prompt, count):
    """A greedy loop on next_token_logprobs(1) + append_tokens, against generate(temperature=0), from one prompt
    state (forked), and generate_with(temperature=0, top=1) with no processors."""
    with Sequence(model, prompt) as base:
        start = base.token_count
        with base.fork() as gen:
            text = str(gen.generate(max_tokens=int(count), **GREEDY))
            gen_ids = gen.token_ids[start:]
        with base.fork() as loop:
            for _ in range(int(count)):
                token, _, piece = loop.next_token_logprobs(1)[0]
                if not piece:
                    break
                loop.append_tokens([token])
            loop_text = str(loop)[len(prompt) :]
            loop_ids = loop.token_ids[start:]
        with base.fork() as sdk:
            with_text = sdk.generate_with([], max_tokens=int(count), top=1, temperature=0.0)
            with_state = str(sdk)
        return {
            "prompt_ids": base.token_ids,
            "generate": {"text": text, "ids": gen_ids},
            "loop": {"text": loop_text, "ids": loop_ids},
            "with": {"text": with_text, "state": with_state},
        }


def op_seeded(model, prompt, count, seed):
    """generate_with at temperature 1 with a seed, three times from fresh sequences; and once more with stops."""
    outs = []
    for _ in range(3):
        with Sequence(model, prompt) as seq:
            text = seq.generate_with([processors.no_repeat_ngram(3)], max_tokens=int(count), seed=int(seed))
            outs.append({"text": text, "state": str(seq), "ids": seq.token_ids})
    other = []
    with Sequence(model, prompt) as seq:
        other.append(seq.generate_with([], max_tokens=int(count), seed=int(seed) + 1))
    stop = outs[0]["text"][len(outs[0]["text"]) // 2 :][:3]
    with Sequence(model, prompt) as seq:
        stopped = seq.generate_with([processors.no_repeat_ngram(3)], max_tokens=int(count), seed=int(seed), stop=stop)
        stopped_state, stopped_ids = str(seq), seq.token_ids
        with Sequence(model, prompt + stopped) as fresh:
            fresh_ids = fresh.token_ids
    return {
        "runs": outs,
        "other_seed": other[0],
        "stop": stop,
        "stopped": stopped,
        "stopped_state": stopped_state,
        "stopped_ids": stopped_ids,
        "fresh_ids": fresh_ids,
    }


def op_forbid_force(model, prompt, count):
    """A processor that forbids the greedy choice at every step, and one that forces the 3rd candidate."""
    with Sequence(model, prompt) as seq:
        greedy = seq.fork()
        plain = greedy.generate_with([], max_tokens=int(count), top=8, temperature=0.0)
        greedy.close()
        seen = []

        def forbid_best(s, cands):
            seen.append([c[0] for c in cands])
            return cands[1:]

        forbidden = seq.fork()
        text_forbid = forbidden.generate_with([forbid_best], max_tokens=int(count), top=8, temperature=0.0)
        forbidden_ids = forbidden.token_ids
        forbidden.close()
        forced_seen = []

        def force_third(s, cands):
            forced_seen.append(cands[2])
            return [cands[2]]

        forced = seq.fork()
        text_force = forced.generate_with([force_third], max_tokens=int(count), top=8, temperature=1.0, seed=1)
        forced_ids = forced.token_ids
        forced.close()
        start = seq.token_count
        return {
            "plain": plain,
            "forbid": {"text": text_forbid, "ids": forbidden_ids[start:], "seen": seen},
            "force": {"text": text_force, "ids": forced_ids[start:], "chosen": [c[0] for c in forced_seen]},
        }


def op_trap_in_processor(model, prompt, count):
    """A processor that traps the guest halfway (an unhandled exception), holding open sequences and a stream."""
    seq = Sequence(model, prompt)
    extra = seq.fork()
    stream = extra.stream(max_tokens=64)
    next(iter(stream))
    calls = []

    def trap(s, cands):
        calls.append(1)
        if len(calls) > int(count) // 2:
            raise RuntimeError("a bug in a processor")
        return cands

    seq.generate_with([trap], max_tokens=int(count), seed=3)
    return {"unreachable": True}


OPERATIONS = {
    "next": op_next,
    "greedy_loop": op_greedy_loop,
    "seeded": op_seeded,
    "forbid_force": op_forbid_force,
    "trap_in_processor": op_trap_in_processor,
    "chat": op_chat,
    "slices": op_slices,
    "concat": op_concat,
    "score": op_score,
    "select": op_select,
    "beam": op_beam,
    "errors": op_errors,
}


class WitWorld(_World):
    def run(self, args):
        try:
            value = OPERATIONS[args[0]](*args[1:])
        except LlmError as error:
            print(json.dumps({"err": {"kind": type(error).__name__, "message": error.message}}), flush=True)
            return 1
        print(json.dumps({"ok": value}), flush=True)
        return 0
