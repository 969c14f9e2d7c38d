"""A test guest of the `http-app` world for outbound HTTP and config values under `llmhost serve`
(tests/integration/test_outbound_guests.py). Answers JSON, {"ok": VALUE} or {"err": {"kind", "message"}}.

    /fetch?spec=JSON        http.request(**spec) ({"method", "url", "headers", "body", "timeout_s"}): status, len,
                            text (the first 4000 characters); `{config:NAME}` in the URL or a header value is
                            replaced by that config value
    /config?name=N          config.get(N) (for values that are not secret), and the names config.get_all() has
    /config-hash?name=N     the SHA-256 of config.get(N) (a secret is never sent back)
"""

import hashlib
import json
import re
from urllib.parse import parse_qs, urlsplit

from llmhost_guest import config
from llmhost_guest import http as outbound
from wit_world import exports
from wit_world.imports import http


def reply(value):
    return http.Response(status=200, headers=[("content-type", "application/json")], body=json.dumps(value).encode())


def with_config(text):
    """`{config:NAME}` in a URL or header value -> that config value (so a secret is used without being sent back)."""
    return re.sub(r"\{config:(\w+)\}", lambda m: config.get(m.group(1)) or "", text)


def op_fetch(q):
    kw = json.loads(q["spec"])
    if isinstance(kw.get("headers"), dict):
        kw["headers"] = {name: with_config(value) for name, value in kw["headers"].items()}
    try:
        got = outbound.request(kw.pop("method", "GET"), with_config(kw.pop("url")), **kw)
    except outbound.HttpError as error:
        return {"err": {"kind": error.kind, "message": error.message}}
    return {"ok": {"status": got.status, "len": len(got.body), "text": got.text()[:4000]}}


def op_config(q):
    return {"ok": {"value": config.get(q["name"]), "all": sorted(config.get_all())}}


def op_config_hash(q):
    value = config.get(q["name"])
    return {"ok": {"sha256": None if value is None else hashlib.sha256(value.encode()).hexdigest()}}


OPS = {"fetch": op_fetch, "config": op_config, "config-hash": op_config_hash}


class Handler(exports.Handler):
    def handle(self, request, writer):
        url = urlsplit(request.path_with_query)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        return reply(OPS[url.path.rstrip("/").rsplit("/", 1)[-1]](q))  # routes keep their prefix: the last part
