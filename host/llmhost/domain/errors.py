"""The `LlmError` family: expected failures, which `abi` turns into the WIT `error` variant (never a trap)."""

from __future__ import annotations


class LlmError(Exception):
    """An expected failure; `abi` turns it into the WIT `error` variant (never a trap)."""

    kind = "runtime-error"

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message


class ModelNotSupported(LlmError):
    kind = "model-not-supported"


class EngineError(LlmError):
    kind = "runtime-error"


class InvalidInput(LlmError):
    kind = "invalid-input"
