"""A test guest (`command` world) for outbound HTTP and config values through the guest SDK
(tests/integration/test_outbound_guests.py). Each operation prints one JSON line, {"ok": VALUE} or
{"err": {"kind", "message"}} (an `http.HttpError`).

    fetch SPEC_JSON        http.request(**spec): {"method", "url", "headers", "body", "timeout_s"} -> the response
                           (`{config:NAME}` in the URL or a header value is replaced by that config value):
                           {"status", "headers", "text" (the first 4000 characters), "len"}
    many URL N             N GETs of URL: each one's status, or its error's kind
    surrogate URL          SDK calls given a lone surrogate (URL, header): the errors they raise, not a trap
    bigbody URL BYTES      a POST with a body of BYTES bytes
    rawbody URL BYTES      the same through the binding itself, past the SDK's checks: {"status", "len"}
    config NAME...         config.get(NAME) for each, and the sorted names of config.get_all()
    config_hash NAME       the SHA-256 of config.get(NAME) (a secret is never printed)
"""

import hashlib
import json
import re

from llmhost_guest import config, http
from wit_world import WitWorld as _World


def response_json(reply):
    return {"status": reply.status, "headers": reply.headers, "text": reply.text()[:4000], "len": len(reply.body)}


def with_config(text):
    """`{config:NAME}` in a URL or header value -> that config value (so a secret is used without being printed)."""
    return re.sub(r"\{config:(\w+)\}", lambda m: config.get(m.group(1)) or "", text)


def op_fetch(spec):
    kw = json.loads(spec)
    if isinstance(kw.get("headers"), dict):
        kw["headers"] = {name: with_config(value) for name, value in kw["headers"].items()}
    return response_json(http.request(kw.pop("method", "GET"), with_config(kw.pop("url")), **kw))


def op_many(url, count):
    out = []
    for _ in range(int(count)):
        try:
            out.append(http.get(url).status)
        except http.HttpError as error:
            out.append(error.kind)
    return out


def op_surrogate(url):
    out = {}
    calls = {
        "url": lambda: http.get(url + "/\ud800"),
        "header": lambda: http.get(url, headers={"x-a": "b\udc00"}),
        "header-name": lambda: http.get(url, headers=[("x-\ud800", "b")]),
        "body": lambda: http.post(url, body="\ud800"),
        "method": lambda: http.request("G\ud800T", url),
    }
    for name, call in calls.items():
        try:
            call()
            out[name] = "sent"
        except http.HttpError as error:
            out[name] = error.kind
    return out


def op_bigbody(url, size):
    return response_json(http.post(url, body=b"b" * int(size)))


def op_rawbody(url, size):
    from componentize_py_types import Err
    from wit_world.imports import outbound_http as wit

    request = wit.Request(method="POST", url=url, headers=[], body=b"b" * int(size), timeout_ms=None)
    try:
        reply = wit.send(request)
    except Err as failure:
        kind = type(failure.value).__name__.removeprefix("Error_")
        raise http.HttpError(kind, str(failure.value.value)) from None
    return {"status": reply.status, "len": len(reply.body)}


def op_config(*names):
    return {"get": {name: config.get(name) for name in names}, "all": sorted(config.get_all())}


def op_config_hash(name):
    value = config.get(name)
    every = config.get_all()
    return {
        "sha256": None if value is None else hashlib.sha256(value.encode()).hexdigest(),
        "in_all": every.get(name) == value,
    }


OPERATIONS = {
    "fetch": op_fetch,
    "many": op_many,
    "surrogate": op_surrogate,
    "bigbody": op_bigbody,
    "rawbody": op_rawbody,
    "config": op_config,
    "config_hash": op_config_hash,
}


class WitWorld(_World):
    def run(self, args):
        try:
            value = OPERATIONS[args[0]](*args[1:])
        except http.HttpError as error:
            print(json.dumps({"err": {"kind": error.kind, "message": error.message}}), flush=True)
            return 1
        print(json.dumps({"ok": value}), flush=True)
        return 0
