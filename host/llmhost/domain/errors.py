"""The `LlmError` family: expected failures, which `abi` turns into the WIT `error` variant (never a trap)."""

from __future__ import annotations

import copy
from collections.abc import Callable


class LlmError(Exception):
    """An expected failure; `abi` turns it into the WIT `error` variant (never a trap)."""

    kind = "runtime-error"

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message

    def scrubbed(self, scrub: Callable[[str], str]) -> LlmError:
        """This error with its message passed through `scrub` (e.g. `Grants.scrub`): same class and kind, so the
        guest gets the same WIT case. The error itself is left as it was."""
        message = scrub(self.message)
        if message == self.message:
            return self
        scrubbed = copy.copy(self)
        scrubbed.message, scrubbed.args = message, (message,)
        return scrubbed


class ModelNotSupported(LlmError):
    kind = "model-not-supported"


class EngineError(LlmError):
    kind = "runtime-error"


class InvalidInput(LlmError):
    kind = "invalid-input"


# -- grants (wasi:keyvalue's `error`, llmhost's `outbound-http.error`): the WIT case is the class's `kind` ----------


class NoSuchStore(LlmError):
    """No `[key-value.NAME]` table declares the store (and it is not `default`)."""

    kind = "no-such-store"


class AccessDenied(LlmError):
    """The store is not granted to the component (`key-value-stores`)."""

    kind = "access-denied"


class StoreFailure(LlmError):
    """wasi:keyvalue's `other`: a quota (naming its key), an invalid key or cursor, the backend failing."""

    kind = "other"


class OutboundDenied(LlmError):
    """The URL (or a redirect, or the address its host resolves to) is not granted; nothing was sent."""

    kind = "denied"


class InvalidRequest(LlmError):
    kind = "invalid-request"


class OutboundTimeout(LlmError):
    kind = "timeout"


class TooLarge(LlmError):
    kind = "too-large"


class ConnectionFailed(LlmError):
    kind = "connection"
