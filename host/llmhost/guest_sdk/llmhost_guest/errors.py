"""Typed exceptions for the WIT `error` variant, and the call wrapper that raises them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class LlmError(Exception):
    """A host call failed; `message` is the host's text."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message


class InvalidInput(LlmError, ValueError):
    """WIT `error::invalid-input`: bad parameters, a prompt too long for the window, a closed sequence..."""


class ModelNotSupported(LlmError, LookupError):
    """WIT `error::model-not-supported`: the host has no such model configured."""


class RuntimeError_(LlmError, RuntimeError):  # noqa: N801 (the WIT name, without shadowing the builtin)
    """WIT `error::runtime-error`: the engine failed (out of slots, a decode error...)."""


# The generated bindings name a variant case `Error_<Case>`: mapped by name, so that this module imports no
# bindings (a guest of any world can use it, and tests can fake them).
_KINDS: dict[str, type[LlmError]] = {
    "Error_InvalidInput": InvalidInput,
    "Error_ModelNotSupported": ModelNotSupported,
    "Error_RuntimeError": RuntimeError_,
}


def from_wit(error: Any) -> LlmError:
    """The exception for one WIT `error` value."""
    kind = _KINDS.get(type(error).__name__, LlmError)
    message = getattr(error, "value", None)
    if kind is ModelNotSupported and not message:
        message = "model not supported by this host"
    return kind(str(message) if message is not None else "")


def call(function: Callable[..., T], *args: Any) -> T:
    """Call a generated binding; its `Err(error)` becomes the typed exception (with the host's message)."""
    from componentize_py_types import Err

    try:
        return function(*args)
    except Err as failure:
        raise from_wit(failure.value) from None
