"""A test guest (not an example): its arguments pick one operation, and it prints one JSON line with the outcome.

Tests drive every `llm` function and every sandbox boundary through the real guest path with it, against the
fake engine (tests/integration) and the real llama.cpp engine (tests/e2e):

    stream MODEL PROMPT [PARAMS_JSON]  every event of infer-stream, then two more `next()` results (after done)
    stream-drop MODEL PROMPT N SLOTS   read N events, drop the stream, then hold SLOTS new streams at once
    stream-idle MODEL PROMPT SECONDS   read one event, sleep, then call next() again
    infer-seeds MODEL PROMPT PARAMS_JSON N   N streams at once with seeds 0..N-1: [{"text", "finish-reason"}]
    leak MODEL [return|trap|catch]     keep a stream and a sequence in a global, then return/trap/catch and return
    open-many MODEL N                  open N sequences and keep them: {"opened", "err"}
    infer MODEL PROMPT [PARAMS_JSON]   PARAMS_JSON: "none", or an object of WIT field names (kebab-case)
                                       overriding the WIT defaults, e.g. {"max-tokens": 8, "stop": ["\\n"]}
    seq MODEL SCRIPT_JSON              run a script of `sequences` calls, e.g. [["open", "a"], ["append", "a", "Hi"],
                                       ["generate", "a", PARAMS], ["fork", "a", "b"], ["text", "b"]]: one result per
                                       step ({"ok": ...} or {"err": ...}); the rest of the steps still run
    chat MODEL MESSAGES_JSON [CHAT_PARAMS_JSON]   MESSAGES_JSON: [{"role", "content", "tool-calls", "tool-call-id"}];
                                       CHAT_PARAMS_JSON: "none" or {"inferencing": PARAMS|null, "tools": [{"name",
                                       "description", "parameters"}], "tool-choice": "auto"|"none"|"required"|
                                       {"named": NAME}}: {"message", "finish-reason", "usage"}
    chat-stream MODEL MESSAGES_JSON [CHAT_PARAMS_JSON]   every event of chat-stream, then one more next()
    chat-seeds MODEL MESSAGES_JSON CHAT_PARAMS_JSON N    N chat streams at once, seeds 0..N-1: [{"ok": result}]
    template MODEL MESSAGES_JSON TOOLS_JSON ADD_GEN   apply-chat-template (ADD_GEN: true|false)
    chat-seq MODEL MESSAGES_JSON USER_TURNS_JSON PARAMS_JSON   a conversation on one sequence: per user turn, render
                                       with apply-chat-template, append only what is new since the last render,
                                       generate: [{"reply", "appended", "evaluated-before", "evaluated-after",
                                       "len-before"}]
    tokenize MODEL TEXT
    info MODEL
    kind MODEL                         get-model-kind (0.2.4)
    embed MODEL TEXT...
    argv [ANY...]                      the WASI argv the guest sees
    count                              how many runs this instance has seen (1: a fresh instance per run)
    env                                the environment the guest sees
    readfile PATH | writefile PATH TEXT | listdir PATH
    connect IP PORT                    open a TCP connection to a numeric IPv4 address
    alloc MB                           allocate (and touch) MB megabytes
    trap                               raise an uncaught exception (the guest traps)
    loop                               spin forever (for timeouts)

Output: {"ok": VALUE} with exit status 0, or {"err": {"kind": KIND, "message": MSG}} with exit status 1, where KIND
is the WIT error case ("invalid-input", "model-not-supported", "runtime-error") or a Python exception name.
"""

import json
import os
import socket
import sys

from componentize_py_types import Err
from wit_world import WitWorld
from wit_world.imports import llm, sequences

# The WIT defaults (the `inferencing-params` doc); PARAMS_JSON overrides any of them.
DEFAULT_PARAMS = {
    "max-tokens": 100,
    "repeat-penalty": 1.1,
    "repeat-penalty-last-n-token-count": 64,
    "stop": [],
    "temperature": 0.8,
    "top-k": 40,
    "top-p": 0.9,
    "seed": None,
    "constraint": None,
    "logprobs": None,
    "frequency-penalty": 0.0,
    "presence-penalty": 0.0,
    "logit-bias": [],
}

# PARAMS_JSON's "constraint": {"json-schema": TEXT} | {"json-object": null} | {"regex": TEXT} | {"grammar": TEXT} |
# {"choice": [TEXT, ...]}
CONSTRAINTS = {
    "json-schema": llm.Constraint_JsonSchema,
    "json-object": llm.Constraint_JsonObject,
    "regex": llm.Constraint_Regex,
    "grammar": llm.Constraint_Grammar,
    "choice": llm.Constraint_Choice,
}


def parse_constraint(value):
    if value is None:
        return None
    [(kind, payload)] = value.items()
    return CONSTRAINTS[kind]() if payload is None else CONSTRAINTS[kind](payload)


ERROR_KINDS = {
    llm.Error_ModelNotSupported: "model-not-supported",
    llm.Error_RuntimeError: "runtime-error",
    llm.Error_InvalidInput: "invalid-input",
}


def parse_params(text):
    if text == "none":
        return None
    fields = dict(DEFAULT_PARAMS)
    overrides = json.loads(text)
    unknown = set(overrides) - set(fields)
    if unknown:
        raise ValueError(f"unknown params: {sorted(unknown)}")
    fields.update(overrides)
    fields["constraint"] = parse_constraint(fields["constraint"])
    fields["logit-bias"] = [llm.LogitBias(token_id=e["token-id"], bias=e["bias"]) for e in fields["logit-bias"]]
    return llm.InferencingParams(**{k.replace("-", "_"): v for k, v in fields.items()})


def usage_json(usage):
    return {
        "prompt-token-count": usage.prompt_token_count,
        "generated-token-count": usage.generated_token_count,
    }


def logprobs_json(entries):
    return [
        {
            "token-id": e.token_id,
            "bytes": list(e.bytes),
            "logprob": e.logprob,
            "top": [{"token-id": t.token_id, "bytes": list(t.bytes), "logprob": t.logprob} for t in e.top],
        }
        for e in entries
    ]


def result_json(result):
    value = {
        "text": result.text,
        "finish-reason": result.finish_reason.name.lower().replace("_", "-"),
        "usage": usage_json(result.usage),
    }
    if result.logprobs:  # only when requested (keeps the 0.1.0 shape otherwise)
        value["logprobs"] = logprobs_json(result.logprobs)
    return value


def op_infer(model, prompt, params="none"):
    return result_json(llm.infer(model, prompt, parse_params(params)))


def event_json(event):
    if event is None:
        return None
    if isinstance(event, llm.StreamEvent_Chunk):
        chunk = event.value
        value = {"text": chunk.text, "token-ids": list(chunk.token_ids), "usage": usage_json(chunk.usage)}
        if chunk.logprobs:
            value["logprobs"] = logprobs_json(chunk.logprobs)
        return {"chunk": value}
    done = event.value
    reason = done.finish_reason.name.lower().replace("_", "-")
    return {"done": {"finish-reason": reason, "usage": usage_json(done.usage)}}


def op_stream(model, prompt, params="none"):
    events = []
    with llm.infer_stream(model, prompt, parse_params(params)) as stream:
        while True:
            event = stream.next()
            events.append(event_json(event))
            if event is None or isinstance(event, llm.StreamEvent_Done):
                break
        after = [event_json(stream.next()), event_json(stream.next())]
    return {"events": events, "after-done": after}


GREEDY_FOR_STREAMS = '{"temperature": 0.0, "repeat-penalty": 1.0, "max-tokens": 64}'


def op_stream_drop(model, prompt, n, slots):
    stream = llm.infer_stream(model, prompt, parse_params(GREEDY_FOR_STREAMS))
    read = [event_json(stream.next()) for _ in range(int(n))]
    stream.__exit__(None, None, None)  # drop the handle now, long before the generation would end
    import time

    time.sleep(0.5)  # a generation that kept running would decode ~15 more tokens meanwhile
    # Every slot at once: only possible if the dropped stream gave its slot back.
    held = [llm.infer_stream(model, prompt, parse_params(GREEDY_FOR_STREAMS)) for _ in range(int(slots))]
    firsts = [event_json(s.next()) for s in held]
    for s in held:
        s.__exit__(None, None, None)
    return {"read": read, "held": firsts}


def op_stream_idle(model, prompt, seconds):
    import time

    with llm.infer_stream(model, prompt, parse_params(GREEDY_FOR_STREAMS)) as stream:
        first = event_json(stream.next())
        time.sleep(float(seconds))
        try:
            second = {"event": event_json(stream.next())}
        except Err as error:
            second = {"err": error_json(error)}
    return {"first": first, "second": second}


def op_seq(model, script):
    held = {}

    def step(op, name, *args):
        if op == "open":
            held[name] = sequences.Sequence.open(args[0] if args else model)
            return None
        seq = held[name]
        if op == "append":
            return seq.append(args[0])
        if op == "append-tokens":
            return seq.append_tokens(args[0])
        if op == "generate":
            return result_json(seq.generate(parse_params(json.dumps(args[0]) if args else "none")))
        if op == "stream":
            with seq.generate_stream(parse_params(json.dumps(args[0]) if args else "none")) as stream:
                events = []
                limit = args[1] if len(args) > 1 else None  # read at most this many events, then drop the stream
                while limit is None or len(events) < limit:
                    event = stream.next()
                    events.append(event_json(event))
                    if event is None or isinstance(event, llm.StreamEvent_Done):
                        break
            return events
        if op == "fork":
            held[args[0]] = seq.fork()
            return None
        if op == "truncate":
            return seq.truncate(args[0])
        if op == "drop":
            held.pop(name).__exit__(None, None, None)
            return None
        getters = {
            "text": seq.text,
            "tokens": seq.token_ids,
            "len": seq.len,
            "logprobs": seq.logprobs,
            "log-likelihood": seq.log_likelihood,
            "evaluated": seq.evaluated_token_count,
        }
        return getters[op]()

    results = []
    for op, name, *args in json.loads(script):
        try:
            results.append({"ok": step(op, name, *args)})
        except Err as error:
            results.append({"err": error_json(error)})
    return results


def op_infer_seeds(model, prompt, params, count):
    """Start one stream per seed 0..COUNT-1 at once (the host batches them), read them in order, and return
    each one's joined text and finish reason. (In order, not round-robin: a stream still waiting for a slot would
    block a round-robin reader while the admitted ones wait, unread, for it.)"""
    base = json.loads(params)
    streams = [
        llm.infer_stream(model, prompt, parse_params(json.dumps({**base, "seed": s}))) for s in range(int(count))
    ]
    texts = [[] for _ in streams]
    reasons = [None] * len(streams)
    for i, stream in enumerate(streams):
        while reasons[i] is None:
            event = stream.next()
            if isinstance(event, llm.StreamEvent_Chunk):
                texts[i].append(event.value.text)
            elif isinstance(event, llm.StreamEvent_Done):
                reasons[i] = event.value.finish_reason.name.lower().replace("_", "-")
    for stream in streams:
        stream.__exit__(None, None, None)
    return [{"text": "".join(t), "finish-reason": r} for t, r in zip(texts, reasons, strict=True)]


ROLES = {
    "system": llm.ChatRole.SYSTEM,
    "user": llm.ChatRole.USER,
    "assistant": llm.ChatRole.ASSISTANT,
    "tool": llm.ChatRole.TOOL,
}


def parse_messages(text):
    return [
        llm.ChatMessage(
            role=ROLES[m["role"]],
            content=m.get("content"),
            tool_calls=[
                llm.ToolCall(id=c["id"], name=c["name"], arguments=c["arguments"]) for c in m.get("tool-calls", [])
            ],
            tool_call_id=m.get("tool-call-id"),
        )
        for m in (json.loads(text) if isinstance(text, str) else text)
    ]


def parse_tools(values):
    return [llm.Tool(name=t["name"], description=t.get("description"), parameters=t["parameters"]) for t in values]


def parse_chat_params(text):
    if text == "none":
        return None
    value = json.loads(text) if isinstance(text, str) else text
    inferencing = value.get("inferencing")
    choice = value.get("tool-choice", "auto")
    if isinstance(choice, dict):
        tool_choice = llm.ToolChoice_Named(choice["named"])
    else:
        # `None` is a Python keyword: the binding's class is `ToolChoice_None_`
        choices = {"auto": llm.ToolChoice_Auto, "none": llm.ToolChoice_None_, "required": llm.ToolChoice_Required}
        tool_choice = choices[choice]()
    return llm.ChatParams(
        inferencing=None if inferencing is None else parse_params(json.dumps(inferencing)),
        tools=parse_tools(value.get("tools", [])),
        tool_choice=tool_choice,
    )


def message_json(m):
    return {
        "role": m.role.name.lower(),
        "content": m.content,
        "tool-calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in m.tool_calls],
        "tool-call-id": m.tool_call_id,
    }


def chat_result_json(r):
    value = {
        "message": message_json(r.message),
        "finish-reason": r.finish_reason.name.lower().replace("_", "-"),
        "usage": usage_json(r.usage),
    }
    if r.logprobs:
        value["logprobs"] = logprobs_json(r.logprobs)
    return value


def op_chat(model, messages, params="none"):
    return chat_result_json(llm.chat(model, parse_messages(messages), parse_chat_params(params)))


def op_chat_seeds(model, messages, params, count, at_once="4"):
    """COUNT chat streams with seeds 0..COUNT-1, AT_ONCE at a time (the host batches them; more than the model's
    slots would wait unread), read round-robin; each one's result gathered as `chat` returns it (content joined,
    tool calls from their deltas)."""
    base = json.loads(params)
    results = []
    seeds = list(range(int(count)))
    while seeds:
        batch, seeds = seeds[: int(at_once)], seeds[int(at_once) :]
        results.extend(chat_streams(model, messages, base, batch))
    return results


def chat_streams(model, messages, base, seeds):
    streams = []
    for seed in seeds:
        p = dict(base)
        p["inferencing"] = {**(base.get("inferencing") or {}), "seed": seed}
        streams.append(llm.chat_stream(model, parse_messages(messages), parse_chat_params(json.dumps(p))))
    results = [{"content": [], "calls": {}, "done": None} for _ in streams]
    while any(r["done"] is None for r in results):
        for stream, r in zip(streams, results, strict=True):
            if r["done"] is not None:
                continue
            event = stream.next()
            if isinstance(event, llm.ChatEvent_Content):
                r["content"].append(event.value.text)
            elif isinstance(event, llm.ChatEvent_ToolCall):
                d = event.value
                call = r["calls"].setdefault(d.index, {"id": None, "name": None, "arguments": ""})
                call["id"] = d.id or call["id"]
                call["name"] = d.name or call["name"]
                call["arguments"] += d.arguments
            else:
                r["done"] = event.value
    for stream in streams:
        stream.__exit__(None, None, None)
    return [
        {
            "ok": {
                "message": {
                    "role": "assistant",
                    "content": "".join(r["content"]) or None,
                    "tool-calls": [r["calls"][i] for i in sorted(r["calls"])],
                    "tool-call-id": None,
                },
                "finish-reason": r["done"].finish_reason.name.lower().replace("_", "-"),
                "usage": usage_json(r["done"].usage),
            }
        }
        for r in results
    ]


def chat_event_json(event):
    if event is None:
        return None
    if isinstance(event, llm.ChatEvent_Content):
        return {"content": event_json(llm.StreamEvent_Chunk(event.value))["chunk"]}
    if isinstance(event, llm.ChatEvent_ToolCall):
        d = event.value
        return {"tool-call": {"index": d.index, "id": d.id, "name": d.name, "arguments": d.arguments}}
    return {"done": event_json(llm.StreamEvent_Done(event.value))["done"]}


def op_chat_stream(model, messages, params="none"):
    events = []
    with llm.chat_stream(model, parse_messages(messages), parse_chat_params(params)) as stream:
        while True:
            event = stream.next()
            events.append(chat_event_json(event))
            if event is None or isinstance(event, llm.ChatEvent_Done):
                break
        after = chat_event_json(stream.next())
    return {"events": events, "after-done": after}


def op_template(model, messages, tools, add_generation_prompt):
    return llm.apply_chat_template(
        model, parse_messages(messages), parse_tools(json.loads(tools)), add_generation_prompt == "true"
    )


def op_chat_seq(model, messages, user_turns, params):
    """A conversation kept on one sequence: each turn appends only the text the template adds since the
    previous turn (the reply is already in the sequence), so the host evaluates only new tokens."""
    history = json.loads(messages)
    turns = []
    rendered = ""
    with sequences.Sequence.open(model) as seq:
        for user in json.loads(user_turns):
            history.append({"role": "user", "content": user})
            text = llm.apply_chat_template(model, parse_messages(history), [], True)
            if not text.startswith(rendered):
                raise ValueError(f"the template re-rendered history differently: {rendered!r} vs {text!r}")
            new = text[len(rendered) :]
            before = {"evaluated-before": seq.evaluated_token_count(), "len-before": seq.len()}
            seq.append(new)
            reply = seq.generate(parse_params(params)).text
            history.append({"role": "assistant", "content": reply})
            rendered = text + reply
            turns.append(
                {
                    "reply": reply,
                    "appended": new,
                    **before,
                    "evaluated-after": seq.evaluated_token_count(),
                    "len-after": seq.len(),
                }
            )
    return turns


LEAKED = []


def op_leak(model, mode="return"):
    """Keep an unread stream and an open sequence in a global, then return (or trap, or catch an error from
    the sequence and return): the host must free them when the run ends."""
    stream = llm.infer_stream(model, "Count to one hundred: 1, 2, 3,", parse_params('{"max-tokens": 50}'))
    stream.next()
    seq = sequences.Sequence.open(model)
    seq.append("Hello there")
    LEAKED.extend([stream, seq])
    if mode == "trap":
        raise RuntimeError("probe: trap while holding a stream and a sequence")
    if mode == "catch":
        try:  # noqa: SIM105 (an explicit handler, as careful guest code writes it)
            seq.truncate(10**6)
        except Err:
            pass  # the exception's traceback keeps `seq` alive in a cycle
    return len(LEAKED)


def op_open_many(model, count):
    """Open COUNT sequences (kept open); returns how many opened before the first error, and that error."""
    for i in range(int(count)):
        try:
            LEAKED.append(sequences.Sequence.open(model))
        except Err as error:
            return {"opened": i, "err": error_json(error)}
    return {"opened": int(count), "err": None}


def op_tokenize(model, text):
    return llm.tokenize(model, text)


def op_info(model):
    info = llm.get_model_info(model)
    return {"name": info.name, "context-length": info.context_length, "vocab-size": info.vocab_size}


def op_kind(model):
    """llm.get-model-kind (0.2.4): "base", "instruct" or "embedding"."""
    return llm.get_model_kind(model).name.lower()


def op_defaults(model):
    """llm.default-params (0.2.1): the host's params when none are given."""
    p = llm.default_params(model)
    return {
        "max-tokens": p.max_tokens,
        "repeat-penalty": p.repeat_penalty,
        "temperature": p.temperature,
        "top-k": p.top_k,
        "top-p": p.top_p,
        "stop": list(p.stop),
        "seed": p.seed,
        "logprobs": p.logprobs,
        "constraint": None if p.constraint is None else type(p.constraint).__name__,
    }


def op_embed(model, *texts):
    result = llm.generate_embeddings(model, list(texts))
    return {"embeddings": result.embeddings, "usage": {"prompt-token-count": result.usage.prompt_token_count}}


def op_argv(*_args):
    return sys.argv


RUNS = 0


def op_count():
    # 1 on every run when each run gets a fresh instance (module state does not survive between runs).
    global RUNS
    RUNS += 1
    return RUNS


def op_env():
    return dict(os.environ)


def op_readfile(path):
    with open(path) as f:
        return f.read()


def op_writefile(path, text):
    with open(path, "w") as f:
        f.write(text)
    return len(text)


def op_listdir(path):
    return sorted(os.listdir(path))


def op_connect(ip, port):
    # A numeric address and no getaddrinfo: name lookup needs the `idna` codec, which is not in the guest.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.connect((ip, int(port)))
        return "connected"


def op_alloc(megabytes):
    block = bytearray(int(megabytes) * 1024 * 1024)
    block[::4096] = b"x" * len(block[::4096])  # touch every page
    return len(block)


def op_trap():
    raise RuntimeError("probe: deliberate trap")


def op_loop():
    n = 0
    while True:
        n += 1


OPERATIONS = {
    "infer": op_infer,
    "infer-seeds": op_infer_seeds,
    "leak": op_leak,
    "open-many": op_open_many,
    "stream": op_stream,
    "seq": op_seq,
    "stream-drop": op_stream_drop,
    "stream-idle": op_stream_idle,
    "chat": op_chat,
    "chat-seeds": op_chat_seeds,
    "chat-stream": op_chat_stream,
    "chat-seq": op_chat_seq,
    "template": op_template,
    "tokenize": op_tokenize,
    "info": op_info,
    "kind": op_kind,
    "defaults": op_defaults,
    "embed": op_embed,
    "argv": op_argv,
    "count": op_count,
    "env": op_env,
    "readfile": op_readfile,
    "writefile": op_writefile,
    "listdir": op_listdir,
    "connect": op_connect,
    "alloc": op_alloc,
    "trap": op_trap,
    "loop": op_loop,
}


def error_json(error):
    if isinstance(error, Err):
        kind = ERROR_KINDS.get(type(error.value), type(error.value).__name__)
        return {"kind": kind, "message": getattr(error.value, "value", None) or ""}
    return {"kind": type(error).__name__, "message": str(error)}


class WitWorld(WitWorld):
    def run(self, args):
        if not args or args[0] not in OPERATIONS:
            print(f"usage: probe {{{'|'.join(OPERATIONS)}}} ARGS...", file=sys.stderr)
            return 2
        operation = OPERATIONS[args[0]]
        try:
            value = operation(*args[1:])
        except TypeError as error:  # wrong number of arguments for the operation
            print(f"probe: {error}", file=sys.stderr)
            return 2
        except (Err, OSError, ValueError, LookupError, MemoryError) as error:
            print(json.dumps({"err": error_json(error)}), flush=True)
            return 1
        print(json.dumps({"ok": value}), flush=True)
        return 0
