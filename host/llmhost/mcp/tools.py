"""The tools of `llmhost mcp`: every function a component exports (but the `command` and `http-app` entry points),
described once from the component's type and cached beside its compiled code, so that listing them never
instantiates a guest; each call runs in a fresh instance with serve's per-request limits."""

from __future__ import annotations

import contextlib
import json
import logging
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wasmtime import Store, WasmtimeError

from llmhost import telemetry
from llmhost.api import Host, LinkedComponent, wasm_cause
from llmhost.domain.limits import ALLOWED_MODELS_KEY, MAX_REASON_CHARS
from llmhost.interfaces.http import HANDLER_INTERFACES
from llmhost.mcp.schema import answer_type, structured
from llmhost.run.scope import RunScope
from llmhost.runtime.components import store_file
from llmhost.runtime.exports import ArgumentError, ExportedFunction, export_index, exported_functions, lift, lower
from llmhost.runtime.sandbox import new_store
from llmhost.shell.config import ComponentSettings
from llmhost.shell.guest import TRAP, GuestFailure, GuestOutput, guest_failure
from llmhost.toolchains.wit_docs import read_docs

_log = logging.getLogger("llmhost.mcp")

# Exports that are not tools: the `command` world's entry point, the `http-app` handler, WASI's, and
# componentize-py's pre-initialization hook (`exports#init`, called once at build time).
ENTRY_EXPORTS = frozenset({"run", "exports", *HANDLER_INTERFACES})
TOOLS_CACHE_FORMAT = 1


@dataclass(frozen=True)
class ToolSpec:
    name: str  # as clients call it
    component: str
    function: ExportedFunction
    description: str


@dataclass(frozen=True)
class ToolAnswer:
    text: str
    structured: dict[str, Any] | None = None
    is_error: bool = False
    failure: str | None = None  # the guest failure kind (trap, deadline, memory) when the guest failed
    # As metrics count it, in HTTP's terms: 200 an answer (a tool error the guest returned included), 400 arguments
    # that do not fit, 413 a body over the component's limit, 499 the client cancelled or left, 500 a trap or a
    # memory overrun, 503 the server shut down, 504 the deadline.
    status: int = 200
    protocol_error: bool = False  # answered as a JSON-RPC error, not a tool result (the server is shutting down)


def clip(text: str, limit: int = MAX_REASON_CHARS) -> str:
    """`text` cut to `limit` characters, saying how long it was: a client's value echoed in an error or a log line
    (a 3 MB string sent for an integer) stays short."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text)} characters in all)"


def short_interface(name: str) -> str:
    """`example:tools/text@0.1.0` -> `text`."""
    return name.rsplit("/", 1)[-1].split("@", 1)[0]


def tool_names(entries: list[tuple[str, ExportedFunction]]) -> list[str]:
    """Each (component, function) entry's tool name: the function's name, qualified by its interface where two
    would clash (`text_summarize`), and by its component where that still clashes."""

    plain = Counter(function.name for _, function in entries)
    names = [
        f"{short_interface(f.interface)}_{f.name}" if plain[f.name] > 1 and f.interface else f.name for _, f in entries
    ]
    qualified = Counter(names)
    return [
        f"{component}_{name}" if qualified[name] > 1 else name
        for (component, _), name in zip(entries, names, strict=True)
    ]


def _cache_path(cache_file: Path | None) -> Path | None:
    if cache_file is None:
        return None
    stem = cache_file.name.removesuffix(".cwasm").removesuffix(".winch")
    return cache_file.with_name(f"{stem}.tools.json")


def describe(linked: LinkedComponent, source: Path) -> tuple[list[ExportedFunction], dict[str, str]]:
    """The component's tools (exported functions) and their doc comments, from the cache beside its compiled code
    when there, else from its type (no instance) and the docs section `llmhost build` wrote."""
    cache = _cache_path(linked.cache_file)
    if cache is not None and cache.is_file():
        try:
            data = json.loads(cache.read_text())
            if data.get("format") == TOOLS_CACHE_FORMAT:
                return [ExportedFunction.from_json(f) for f in data["functions"]], dict(data["docs"])
        except (OSError, ValueError, KeyError, TypeError):
            pass  # described again below
    functions, unsupported = exported_functions(linked.component, linked.engine, ENTRY_EXPORTS)
    functions = [f for f in functions if not (f.interface or "").startswith("wasi:")]
    for name in unsupported:
        _log.warning("%s: %s is not a tool: a parameter or its result has no JSON form (a resource?)", source, name)
    docs = read_docs(source.read_bytes())
    if cache is not None:
        payload = {"format": TOOLS_CACHE_FORMAT, "functions": [f.to_json() for f in functions], "docs": docs}
        with contextlib.suppress(OSError):  # a read-only cache: described again next time
            store_file(cache, json.dumps(payload).encode())
    return functions, docs


def doc_of(function: ExportedFunction, docs: dict[str, str]) -> str | None:
    if function.interface is None:
        return docs.get(function.name)
    return docs.get(f"{short_interface(function.interface)}#{function.name}")


def lower_arguments(function: ExportedFunction, arguments: dict[str, Any] | None) -> list[Any]:
    """The call's arguments as wasmtime-py values, checked against the parameter types (`ArgumentError` names
    the argument or field): every parameter is required but `option<T>` ones; unknown names are refused."""
    record = lower(arguments or {}, {"kind": "record", "fields": function.params}, "")
    return [getattr(record, name) for name, _ in function.params]


def answer(function: ExportedFunction, value: Any) -> ToolAnswer:
    """A returned value as the tool's answer: `err` of a `result` is a tool error with E's text; a structured
    answer is also given as structured content."""
    ok, is_result = answer_type(function.result)
    data = lift(value, function.result) if function.result is not None else None
    if is_result:
        assert isinstance(data, dict)
        if "err" in data:
            return ToolAnswer(_text(data["err"]), is_error=True)
        data = data["ok"]
    return ToolAnswer(_text(data), structured(ok, data))


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value)


class ToolComponent:
    """One component: linked once (with its model allow-list), instantiated afresh for every call."""

    def __init__(self, host: Host, settings: ComponentSettings) -> None:
        self.settings = settings
        self.name = settings.name
        self.linked = host.link(
            settings.source,
            allowed_models=settings.allowed_models,
            allowed_key=settings.key(f"components.{settings.name}.{ALLOWED_MODELS_KEY}"),
            grants=settings.grants,
        )
        self.functions, self.docs = describe(self.linked, settings.source)

    def call(
        self,
        function: ExportedFunction,
        arguments: dict[str, Any] | None,
        scope: RunScope,
        request_id: str,
        max_log_bytes: int,
        on_log_dropped: Callable[[], None] = lambda: None,
    ) -> ToolAnswer:
        """Run `function` in a fresh instance on the calling thread, within the component's deadline and memory."""
        try:
            values = lower_arguments(function, arguments)
        except ArgumentError as error:  # never reaches the guest
            scope.close()
            where = clip(error.path, MAX_REASON_CHARS // 3)  # a path names the client's keys
            return ToolAnswer(f"invalid arguments: {where}: {clip(error.message)}", is_error=True, status=400)
        output = GuestOutput(self.name, request_id, max_log_bytes)
        store: Store | None = None
        try:
            store = new_store(
                self.linked.engine,
                self.settings.sandbox,  # its `timeout-s` is the component's deadline
                [self.name],
                stdout=output.stdout,
                stderr=output.stderr,
                scope=scope,
            )
            try:
                instance = self.linked.linker.instantiate(store, self.linked.component)
            except WasmtimeError as error:
                failure = GuestFailure(500, f"{self.name} cannot be instantiated: {wasm_cause(str(error))}", TRAP)
                return ToolAnswer(failure.reason, is_error=True, failure=failure.kind, status=failure.status)
            func = instance.get_func(store, export_index(self.linked.component, function))
            assert func is not None  # described from this component's type
            try:
                value = telemetry.call(f"component {self.name}", {"llmhost.component": self.name}, func, store, *values)
                func.post_return(store)
            except WasmtimeError as error:
                failure = guest_failure(self.settings, str(error), output.stderr_text())
                return ToolAnswer(failure.reason, is_error=True, failure=failure.kind, status=failure.status)
            return answer(function, value)
        finally:
            scope.close()  # what the guest still holds is freed before the next call is admitted
            if store is not None:
                store.close()
            if output.log():
                on_log_dropped()


def tool_specs(components: Iterable[ToolComponent]) -> list[ToolSpec]:
    entries = [(component, function) for component in components for function in component.functions]
    names = tool_names([(component.name, function) for component, function in entries])
    return [
        ToolSpec(
            name,
            component.name,
            function,
            doc_of(function, component.docs) or f"`{function.name}`, exported by the component {component.name}",
        )
        for name, (component, function) in zip(names, entries, strict=True)
    ]
