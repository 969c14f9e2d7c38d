"""A test guest (`http-app` world) with PyPI dependencies, served by `llmhost serve` in
tests/integration/test_guest_lock.py: POST a YAML document, get it back as JSON, with humanize's reading of its
`n` and whether pyyaml's compiled loader is there (it is not: the guest runs pyyaml's Python code)."""

import json

import humanize
import yaml
from wit_world import exports
from wit_world.imports import http


class Handler(exports.Handler):
    def handle(self, request, writer):
        document = yaml.safe_load(request.body.decode())
        value = {"yaml": document, "n": humanize.intcomma(document.get("n", 0)), "libyaml": yaml.__with_libyaml__}
        headers = [("content-type", "application/json")]
        return http.Response(status=200, headers=headers, body=json.dumps(value).encode())
