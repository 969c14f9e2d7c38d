"""A test guest for the guest SDK (llmhost_guest): each operation runs SDK calls and prints one JSON line,
{"ok": VALUE} or {"err": {"kind", "message"}}. The e2e tests (tests/e2e/test_sdk_guest.py) check the values.

    slices MODEL PROMPT N              generate N greedy tokens, then seq[:n] for every character offset n
    concat MODEL A B                   seq_a += seq_b, with both generated into first
    score MODEL PROMPT CONT_JSON       seq.score(conts) and, per continuation, its tokens forced one by one
    select MODEL PROMPT CHOICES_JSON   scores and seq.select(choices)
    beam MODEL PROMPT WIDTH N STOP     beam search vs greedy generation of N tokens
    errors MODEL                       the exceptions of some failing calls
    chat MODEL TOOL_CHOICE SEEDS       llm.chat with a weather tool, seeds 0..SEEDS-1; and a plain greedy chat
"""

import json

from llmhost_guest import InvalidInput, LlmError, ModelNotSupported, Sequence, llm
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


OPERATIONS = {
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
