"""A component linker with everything the host provides: WASI 0.2 and the `llm` and `sequences` interfaces."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from wasmtime import Engine
from wasmtime.component import Component, FuncType, Linker, LinkerInstance

from llmhost.interfaces.chat import FUNCTIONS as CHAT_FUNCTIONS
from llmhost.interfaces.chat import define_chat
from llmhost.interfaces.llm import INTERFACES as LLM_INTERFACES
from llmhost.interfaces.llm import define_llm
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
    extra: Mapping[str, InterfaceDefiner] | None = None,
) -> Linker:
    """A linker for one component: host functions are typed by that component's imports (see `abi`).

    `extra`: more interfaces, by full name (e.g. `llmhost:llm/http@0.1.0`), each defined only if imported.
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
    for name, define in (extra or {}).items():
        if name in component.type.imports(engine):
            functions = abi.imported_functions(component, engine, name)
            with linker.root() as root, root.add_instance(name) as instance:
                define(instance, functions)
    return linker
