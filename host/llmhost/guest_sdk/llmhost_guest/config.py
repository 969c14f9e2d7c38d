"""Config values the operator gave this component (`config = { NAME = "value", TOKEN = { env = "VAR" } }` under
`[sandbox]` or `[components.NAME]`), through the standard `wasi:config/store` interface.

    from llmhost_guest import config

    base = config.get("api_base") or "https://api.example.com"
    token = config.get("token")          # None: the operator gave no such value
    everything = config.get_all()        # {name: value}
"""

from __future__ import annotations

from typing import Any

__all__ = ["ConfigError", "get", "get_all"]


class ConfigError(Exception):
    """The host could not read the values. `kind`: "upstream" or "io" (wasi:config's cases); `message`: why."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


def get(name: str) -> str | None:
    """The value of `name`, or None if this component was given no such value."""
    if not isinstance(name, str):
        raise TypeError(f"a config name is a str, not {type(name).__name__}")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate cannot be handed to the host (it would trap the guest)
        return None
    return _call(_wit().get, name)


def get_all() -> dict[str, str]:
    """Every value this component was given, by name."""
    return dict(_call(_wit().get_all))


def _wit() -> Any:
    from wit_world.imports import wasi_config_store

    return wasi_config_store


def _call(function: Any, *args: Any) -> Any:
    from componentize_py_types import Err

    try:
        return function(*args)
    except Err as failure:
        kind = "io" if type(failure.value).__name__ == "Error_Io" else "upstream"
        raise ConfigError(kind, str(getattr(failure.value, "value", ""))) from None
