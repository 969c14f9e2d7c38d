"""A component linker with everything the host provides: WASI 0.2, the `llm`, `sequences` and `outbound-http`
interfaces, and the standard `wasi:keyvalue` and `wasi:config` ones (those three as the component's grants allow)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from wasmtime import Engine
from wasmtime.component import Component, FuncType, Linker, LinkerInstance

from llmhost.grants import Grants, GrantServices
from llmhost.interfaces.chat import FUNCTIONS as CHAT_FUNCTIONS
from llmhost.interfaces.chat import define_chat
from llmhost.interfaces.config_store import INTERFACES as CONFIG_INTERFACES
from llmhost.interfaces.config_store import define_config_store
from llmhost.interfaces.keyvalue import INTERFACES as KEYVALUE_INTERFACES
from llmhost.interfaces.keyvalue import define_keyvalue
from llmhost.interfaces.llm import INTERFACES as LLM_INTERFACES
from llmhost.interfaces.llm import define_llm
from llmhost.interfaces.outbound_http import INTERFACES as OUTBOUND_INTERFACES
from llmhost.interfaces.outbound_http import define_outbound_http
from llmhost.interfaces.sequences import INTERFACES as SEQUENCES_INTERFACES
from llmhost.interfaces.sequences import define_sequences
from llmhost.run.service import LlmService, ScopeLimits
from llmhost.runtime import abi

# Defines one more WIT interface in a linker instance, given the functions the component imports from it.
InterfaceDefiner = Callable[[LinkerInstance, dict[str, FuncType]], None]


def build_linker(
    engine: Engine,
    component: Component,
    llm: LlmService,
    limits: ScopeLimits,
    *,
    grants: Grants,
    services: GrantServices,
    extra: Mapping[str, InterfaceDefiner] | None = None,
) -> Linker:
    """A linker for one component: host functions are typed by that component's imports (see `abi`).

    `grants`: what this component may reach beyond the model (key-value stores, config values, outbound hosts);
    `services`: the host's stores and HTTP client they reach. `extra`: more interfaces, by full name (e.g.
    `llmhost:llm/http@0.1.0`), each defined only if imported.
    """
    linker = Linker(engine)
    linker.add_wasip2()
    # Every served version of each interface the component imports (one implementation; see `versions`).
    for name in LLM_INTERFACES:
        imported = abi.imported_functions(component, engine, name)
        if imported:
            with linker.root() as root, root.add_instance(name) as instance:
                define_llm(instance, llm, limits, imported)
                define_chat(instance, llm, limits, {n: t for n, t in imported.items() if n in CHAT_FUNCTIONS})
    for name in SEQUENCES_INTERFACES:
        imported = abi.imported_functions(component, engine, name)
        if imported:
            with linker.root() as root, root.add_instance(name) as instance:
                define_sequences(instance, llm, limits, imported)
    # The grants' interfaces: defined for every component that imports them (all llmhost worlds do), refusing
    # whatever the grants do not name.
    granted: dict[str, InterfaceDefiner] = {
        **{name: _keyvalue(name, grants, services) for name in KEYVALUE_INTERFACES},
        **{name: lambda i, f: define_config_store(i, grants, f) for name in CONFIG_INTERFACES},
        **{name: lambda i, f: define_outbound_http(i, grants, services, f) for name in OUTBOUND_INTERFACES},
    }
    for name, define in {**granted, **(extra or {})}.items():
        if name in component.type.imports(engine):
            functions = abi.imported_functions(component, engine, name)
            with linker.root() as root, root.add_instance(name) as instance:
                define(instance, functions)
    return linker


def _keyvalue(name: str, grants: Grants, services: GrantServices) -> InterfaceDefiner:
    return lambda instance, functions: define_keyvalue(instance, name, grants, services, functions)


# Interfaces of other packages than WASI 0.2 that the linker defines (`api.check_imports` accepts them).
GRANT_INTERFACES = (*KEYVALUE_INTERFACES, *CONFIG_INTERFACES, *OUTBOUND_INTERFACES)
