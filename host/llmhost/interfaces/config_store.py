"""The host side of `wasi:config/store@0.2.0-draft` (wit/deps/config): the config values granted to a component.

A component gets exactly the values of its own `config` grant (`[sandbox]` or `[components.NAME]`), read when it
was loaded; a key it was not given is `none`, as for a key nobody set. Values taken from the environment are
never logged: nothing here logs a value.
"""

from __future__ import annotations

from typing import Any

from wasmtime.component import FuncType, LinkerInstance

from llmhost.grants import Grants
from llmhost.interfaces.versions import CONFIG_STORE
from llmhost.runtime.abi import define_functions

INTERFACES = (CONFIG_STORE,)


def define_config_store(instance: LinkerInstance, grants: Grants, imported: dict[str, FuncType]) -> None:
    values = dict(grants.config)

    def get(key: str) -> str | None:
        return values.get(key)

    def get_all() -> list[tuple[str, str]]:
        return list(values.items())

    def identity(value: Any) -> Any:
        return value

    define_functions(
        instance,
        imported,
        {"get": (lambda _store, key: get(key), identity), "get-all": (lambda _store: get_all(), identity)},
        scrub=grants.scrub,
    )
