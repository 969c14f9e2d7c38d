"""Typed exceptions for the WIT `error` variant, and the call wrapper that raises them."""

from __future__ import annotations

import dataclasses
import inspect
from array import array
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
    """Call a generated binding; its `Err(error)` becomes the typed exception (with the host's message).

    Every string in the arguments is checked first (`check_text`): one that is not valid Unicode (a lone surrogate,
    e.g. from `json.loads` of `"\\ud800"`) cannot be lowered to a WIT string and would trap the guest."""
    from componentize_py_types import Err

    check_text(function, args)
    try:
        return function(*args)
    except Err as failure:
        raise from_wit(failure.value) from None


def check_text(function: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """Raise `InvalidInput` naming the first string of `args` (by `function`'s parameter names, into lists and
    records: `messages[0].content`) that is not valid Unicode; the bindings would trap on it instead."""
    for i, value in enumerate(args):
        found = _invalid_text(value)
        if found is None:
            continue
        path, char, index = found
        try:
            names = list(inspect.signature(function).parameters)  # only now: it costs more than the walk
        except (TypeError, ValueError):  # no signature: name the position
            names = []
        where = (names[i] if i < len(names) else f"argument {i + 1}") + path
        raise InvalidInput(
            f"{where} is not valid Unicode: it holds a lone surrogate ({char!r}) at index {index}; WIT strings are "
            "UTF-8"
        )


def _invalid_text(value: Any) -> tuple[str, str, int] | None:
    """The first string in `value` that cannot be encoded as UTF-8: (its path below `value`, the offending
    character, its index), or None."""
    kind = type(value)
    if kind is str:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as error:
            return "", value[error.start], error.start
    elif kind is list or kind is tuple:
        if not _numbers(value):
            for i, item in enumerate(value):
                found = _invalid_text(item)
                if found is not None:
                    return f"[{i}]{found[0]}", found[1], found[2]
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):  # a WIT record or variant case
        for item in dataclasses.fields(value):
            found = _invalid_text(getattr(value, item.name))
            if found is not None:
                return f".{item.name}{found[0]}", found[1], found[2]
    return None


def _numbers(values: Any) -> bool:
    """Whether `values` holds only integers (token ids, bytes), checked at C speed: those lists can be long."""
    try:
        array("q", values)
    except (TypeError, OverflowError):
        return False
    return True
