"""API keys: with keys configured, a request must carry `Authorization: Bearer KEY` with one of them.

Keys come from the environment variable `LLMHOST_API_KEYS` (comma-separated) and/or the file named by the app
config's `api-keys-file` (one key per line; blank lines and `#` comments skipped). Only their SHA-256 digests are
kept, so no key can reach a log line, a repr or an error message; a presented key is hashed and compared in
constant time. A refused request gets 401 in OpenAI's error shape (the API most clients of these apps speak), or
in Anthropic's for a client of its Messages API (`x-api-key`, accepted as a key too).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Iterable
from pathlib import Path

from llmhost.config import ConfigError

API_KEYS_ENV = "LLMHOST_API_KEYS"


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


class ApiKeys:
    """The accepted keys, as digests. Empty: every request is let through."""

    def __init__(self, keys: Iterable[str] = ()) -> None:
        self._digests = frozenset(_digest(k) for k in keys if k)

    def __bool__(self) -> bool:
        return bool(self._digests)

    def __repr__(self) -> str:
        return f"ApiKeys({len(self._digests)} keys)"

    def allows(self, headers: Iterable[tuple[str, str]]) -> bool:
        """Whether the request's `Authorization: Bearer KEY` (or Anthropic's `x-api-key: KEY`) names an accepted
        key (always, when there are none)."""
        if not self._digests:
            return True
        for name, value in headers:
            key = value.strip() if name == "x-api-key" else ""
            if name == "authorization":
                scheme, _, key = value.strip().partition(" ")
                key = key.strip() if scheme.lower() == "bearer" else ""
            if key:
                presented = _digest(key)
                # Every digest is compared, so timing says nothing about which (or whether one) matched.
                return sum(hmac.compare_digest(presented, d) for d in self._digests) > 0
        return False


def load_api_keys(path: Path | None, environ: dict[str, str] | None = None) -> ApiKeys:
    """The keys of `LLMHOST_API_KEYS` and of the file `path` (the config's `api-keys-file`)."""
    env = os.environ if environ is None else environ
    keys = [k.strip() for k in env.get(API_KEYS_ENV, "").split(",")]
    if path is not None:
        try:
            text = path.read_text()
        except OSError as error:
            raise ConfigError(f"`api-keys-file`: cannot read {path}: {error.strerror}") from None
        file_keys = [line.strip() for line in text.splitlines()]
        file_keys = [k for k in file_keys if k and not k.startswith("#")]
        if not file_keys:
            raise ConfigError(f"`api-keys-file`: {path} holds no key (one key per line)")
        keys += file_keys
    return ApiKeys(k for k in keys if k)


UNAUTHORIZED_BODY = json.dumps(
    {
        "error": {
            "message": "missing or invalid API key: send `Authorization: Bearer KEY` with a key this server accepts",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }
).encode()

# Anthropic's shape, for clients of its Messages API (they send `anthropic-version` or `x-api-key`).
ANTHROPIC_UNAUTHORIZED_BODY = json.dumps(
    {
        "type": "error",
        "error": {
            "type": "authentication_error",
            "message": "missing or invalid API key: send `x-api-key: KEY` (or `Authorization: Bearer KEY`) with a key "
            "this server accepts",
        },
    }
).encode()


def unauthorized_body(headers: Iterable[tuple[str, str]]) -> bytes:
    """The 401 body in the error shape of the API the client speaks."""
    anthropic = any(name in ("anthropic-version", "x-api-key") for name, _ in headers)
    return ANTHROPIC_UNAUTHORIZED_BODY if anthropic else UNAUTHORIZED_BODY
