"""A component linker with everything the host provides: WASI 0.2 and the `llm` interface."""

from __future__ import annotations

from wasmtime import Engine
from wasmtime.component import Component, Linker

from .. import abi
from ..interfaces.llm import INTERFACE as LLM_INTERFACE
from ..interfaces.llm import LlmService, define_llm
from ..interfaces.streams import StreamTable


def build_linker(engine: Engine, component: Component, llm: LlmService, streams: StreamTable) -> Linker:
    """A linker for one component: host functions are typed by that component's imports (see `abi`)."""
    linker = Linker(engine)
    linker.add_wasip2()
    imported = abi.imported_functions(component, engine, LLM_INTERFACE)
    if imported:
        with linker.root() as root, root.add_instance(LLM_INTERFACE) as instance:
            define_llm(instance, llm, streams, imported)
    return linker
