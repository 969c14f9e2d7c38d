"""`arguments_of`: a method that takes another's arguments as they are, declared once (the other's signature).

For the methods that only pass their arguments on (`chat` reading `chat_stream` to its end, the async API calling the
sync one): type checkers and `inspect.signature` (help, editors) see the source's parameters, so the parameter list
is written, documented and changed in one place.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

P = ParamSpec("P")
S = TypeVar("S")
R = TypeVar("R")


def arguments_of(
    source: Callable[Concatenate[Any, P], object],
) -> Callable[[Callable[Concatenate[S, ...], R]], Callable[Concatenate[S, P], R]]:
    """Decorates `def method(self, *args: Any, **kwargs: Any) -> R` that passes its arguments on to `source` (a
    method of any class, `self` aside): it keeps its own `self`, body and return type, with `source`'s parameters."""

    def apply(method: Callable[Concatenate[S, ...], R]) -> Callable[Concatenate[S, P], R]:
        returns = inspect.signature(method).return_annotation
        method.__signature__ = inspect.signature(source).replace(return_annotation=returns)  # type: ignore[attr-defined]
        return method

    return apply
