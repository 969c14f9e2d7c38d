"""platform_probe: the Python SDK's twin of tests/guests/js_platform/app.js (same commands, same JSON), for
tests/e2e/test_js_platform.py, which compares the two guests.

    config NAME                       config.get(NAME) and config.get_all()
    fetch METHOD URL BODY             http.request (BODY "" for none): status, content-type, body text
    kv STORE KEY N                    kv.open; set/get/exists; increment N times; keys(); delete
"""

import json

from llmhost_guest import config, http, kv
from wit_world import WitWorld as _World


def op_config(name):
    return {"value": config.get(name), "all": config.get_all()}


def op_fetch(method, url, body):
    reply = http.request(
        method, url, headers={"accept": "application/json"}, body=body.encode() if body else None, timeout_s=10
    )
    return {"status": reply.status, "type": reply.headers.get("content-type"), "body": reply.text()}


def op_kv(store_name, key, n):
    store = kv.open(store_name)
    store.set(f"{key}.text", "héllo")
    got = store.get(f"{key}.text")
    missing = store.get(f"{key}.missing")
    counts = [store.increment(key) for _ in range(int(n))]
    keys = sorted(store.keys())
    store.delete(f"{key}.text")
    return {
        "get": None if got is None else got.decode(),
        "missing": None if missing is None else missing.decode(),
        "exists": store.exists(f"{key}.text"),
        "counts": counts,
        "keys": keys,
    }


class WitWorld(_World):
    def run(self, args: list[str]) -> int:
        name, *rest = args
        try:
            value = globals()[f"op_{name}"](*rest)
        except (config.ConfigError, http.HttpError, kv.KvError) as error:
            value = {"error": error.kind}
        print(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
        return 0
