"""A test guest (not an example) of the `command` world for key-value state: its arguments pick one operation, and it
prints one JSON line.

    wit STORE STEPS_JSON     open STORE through the raw `wasi:keyvalue` bindings and run the steps on its bucket:
                             ["get", K] ["set", K, TEXT] ["set-size", K, N] ["delete", K] ["exists", K]
                             ["list", CURSOR|null] ["incr", K, DELTA] ["cas", K, NEW] (new, current, swap)
                             ["cas-race", K, OTHER, NEW] (new; set K to OTHER; swap NEW: fails; then swap the
                             fresh cas) ["get-many", [K...]] ["set-many", [[K, TEXT]...]] ["delete-many", [K...]]
                             ["nul-key"] (a key with NUL) ["get-size", K] (the value's length)
                             ["hold-cas", K, N] ["hold-buckets", STORE, N] (open N handles and keep them: how many
                             opened); one {"ok": ...} or {"err": {"kind", "message"}} per step
    sdk STORE STEPS_JSON     the same through `llmhost_guest.kv`: ["get", K] ["set", K, TEXT] ["delete", K]
                             ["exists", K] ["keys"] ["incr", K, DELTA] ["bad-key"] (a lone surrogate) ["set-size", K, N]
                             ["set-json", K, VALUE] ["get-json", K] (parsed)
    count STORE KEY N        increment KEY N times (SDK); the last value
    bench STORE N            N sets (new values) then N increments (SDK): {"set-per-s", "increment-per-s"}
    loop STORE N MS          set key loop-I for I < N (SDK), MS ms apart: each {"ok": ms} or {"err": {kind, message,
                             ms}} (ms: how long the call took)

Output: {"ok": VALUE}, exit status 0; an `open` that fails: {"err": {"kind", "message"}}, exit status 1.
"""

import json
import sys
import time

from componentize_py_types import Err
from llmhost_guest import kv
from wit_world import WitWorld
from wit_world.imports import atomics, batch, wasi_keyvalue_store

KINDS = {
    wasi_keyvalue_store.Error_NoSuchStore: "no-such-store",
    wasi_keyvalue_store.Error_AccessDenied: "access-denied",
    wasi_keyvalue_store.Error_Other: "other",
}


HELD = []  # handles kept open on purpose (until the run ends)


def error_json(error):
    if isinstance(error, kv.KvError):
        return {"kind": error.kind, "message": error.message}
    if isinstance(error, Err):
        value = error.value
        if isinstance(value, atomics.CasError_StoreError):
            value = value.value
        if isinstance(value, atomics.CasError_CasFailed):
            return {"kind": "cas-failed", "message": ""}
        return {"kind": KINDS.get(type(value), "?"), "message": getattr(value, "value", "") or ""}
    return {"kind": type(error).__name__, "message": str(error)}


def text(value):
    return None if value is None else bytes(value).decode("utf-8", "replace")


def wit_step(bucket, step):
    op, args = step[0], step[1:]
    if op == "get":
        return text(bucket.get(args[0]))
    if op == "set":
        return bucket.set(args[0], args[1].encode())
    if op == "set-size":
        return bucket.set(args[0], b"x" * int(args[1]))
    if op == "delete":
        return bucket.delete(args[0])
    if op == "exists":
        return bucket.exists(args[0])
    if op == "list":
        page = bucket.list_keys(args[0])
        return {"keys": page.keys, "cursor": page.cursor}
    if op == "incr":
        return atomics.increment(bucket, args[0], int(args[1]))
    if op == "cas":
        cas = atomics.Cas.new(bucket, args[0])
        before = text(cas.current())
        atomics.swap(cas, args[1].encode())
        return before
    if op == "cas-race":
        cas = atomics.Cas.new(bucket, args[0])
        bucket.set(args[0], args[1].encode())
        try:
            atomics.swap(cas, args[2].encode())
        except Err as failure:
            if not isinstance(failure.value, atomics.CasError_CasFailed):
                raise
            fresh = failure.value.value
            seen = text(fresh.current())
            atomics.swap(fresh, args[2].encode())
            return {"failed-first": True, "fresh-current": seen}
        return {"failed-first": False}
    if op == "get-many":
        return [None if pair is None else [pair[0], text(pair[1])] for pair in batch.get_many(bucket, args[0])]
    if op == "set-many":
        return batch.set_many(bucket, [(k, v.encode()) for k, v in args[0]])
    if op == "delete-many":
        return batch.delete_many(bucket, args[0])
    if op == "nul-key":
        return bucket.set("a\0b", b"x")
    if op == "get-size":
        value = bucket.get(args[0])
        return None if value is None else len(value)
    if op in ("hold-cas", "hold-buckets"):
        for i in range(int(args[1])):
            try:
                HELD.append(atomics.Cas.new(bucket, args[0]) if op == "hold-cas" else wasi_keyvalue_store.open(args[0]))
            except Err as failure:
                return {"opened": i, "err": error_json(failure)}
        return {"opened": int(args[1])}
    raise ValueError(f"unknown step {op!r}")


def sdk_step(store, step):
    op, args = step[0], step[1:]
    if op == "get":
        return text(store.get(args[0]))
    if op == "set":
        return store.set(args[0], args[1])
    if op == "set-size":
        return store.set(args[0], b"x" * int(args[1]))
    if op == "delete":
        return store.delete(args[0])
    if op == "exists":
        return store.exists(args[0])
    if op == "keys":
        return store.keys()
    if op == "incr":
        return store.increment(args[0], int(args[1]))
    if op == "bad-key":
        return store.set("bad\ud800key", "x")
    if op == "set-json":
        return store.set_json(args[0], args[1])
    if op == "get-json":
        return store.get_json(args[0])
    raise ValueError(f"unknown step {op!r}")


def steps(run_step, handle, steps_json):
    results = []
    for step in json.loads(steps_json):
        try:
            results.append({"ok": run_step(handle, step)})
        except (Err, kv.KvError) as error:
            results.append({"err": error_json(error)})
    return results


def op_wit(store, steps_json):
    return steps(wit_step, wasi_keyvalue_store.open(store), steps_json)


def op_sdk(store, steps_json):
    return steps(sdk_step, kv.open(store), steps_json)


def op_count(store, key, n):
    opened = kv.open(store)
    value = None
    for _ in range(int(n)):
        value = opened.increment(key)
    return value


def op_loop(store, n, ms):
    opened = kv.open(store)
    outcomes = []
    for i in range(int(n)):
        start = time.monotonic()
        try:
            opened.set(f"loop-{i}", str(i))
            outcomes.append({"ok": round((time.monotonic() - start) * 1000)})
        except kv.KvError as error:
            outcomes.append({"err": {**error_json(error), "ms": round((time.monotonic() - start) * 1000)}})
        print(json.dumps(outcomes[-1]), file=sys.stderr, flush=True)  # progress, for the test to act on
        time.sleep(int(ms) / 1000)
    return outcomes


def op_bench(store, n):
    opened, n, nonce = kv.open(store), int(n), time.time_ns()
    start = time.monotonic()
    for i in range(n):
        opened.set(f"bench-{i}", f"{nonce}-{i}")  # a new value every time: every set writes
    middle = time.monotonic()
    for _ in range(n):
        opened.increment("bench-counter")
    return {"set-per-s": round(n / (middle - start)), "increment-per-s": round(n / (time.monotonic() - middle))}


OPERATIONS = {"wit": op_wit, "sdk": op_sdk, "count": op_count, "loop": op_loop, "bench": op_bench}


class WitWorld(WitWorld):
    def run(self, args):
        if not args or args[0] not in OPERATIONS:
            print(f"usage: kv_probe {{{'|'.join(OPERATIONS)}}} ARGS...", file=sys.stderr)
            return 2
        try:
            value = OPERATIONS[args[0]](*args[1:])
        except (Err, kv.KvError) as error:
            print(json.dumps({"err": error_json(error)}), flush=True)
            return 1
        print(json.dumps({"ok": value}), flush=True)
        return 0
