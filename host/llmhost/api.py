"""The public Python API: a `Host` (config, engine, compiled-component cache) and the `App`s it loads.

with Host(load_config("llmhost.toml")) as host:
    app = host.load("hello.wasm")
    exit_code = app.run(["The capital of France is"])
    result = host.infer("gemma-3-270m", "Hello", InferencingParams(max_tokens=8))
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from wasmtime import Engine as WasmEngine
from wasmtime import Store, WasmtimeError
from wasmtime.component import Component, FuncType, Instance, Linker

from llmhost.chat.openai_shape import MessageLike, ToolChoiceLike, ToolLike, chat_messages, chat_tools
from llmhost.chat.openai_shape import tool_choice as chat_tool_choice
from llmhost.chat.service import ChatGeneration, collect_chat
from llmhost.config import ConfigError, EnvValue, HostConfig, alias_map
from llmhost.domain import types as dt
from llmhost.domain.limits import MAX_LIFTED_ITEMS
from llmhost.domain.signatures import arguments_of
from llmhost.engine.base import Engine, Generation, TokenSequence, collect
from llmhost.engine.registry import Registry, create_registry
from llmhost.grants import Grants, GrantServices
from llmhost.interfaces.linker import GRANT_INTERFACES, InterfaceDefiner, build_linker
from llmhost.interfaces.llm import INTERFACES as LLM_INTERFACES
from llmhost.interfaces.sequences import INTERFACES as SEQUENCES_INTERFACES
from llmhost.run.scope import RunScope
from llmhost.run.service import LlmService, ScopeLimits
from llmhost.runtime.components import ComponentCache, LoadedComponent, create_wasmtime_engine, stderr_note
from llmhost.runtime.sandbox import CapturedOutput, EpochTicker, OutputSink, new_store, sandbox_problems

RUN_EXPORT = "run"
# Imports the host satisfies: WASI 0.2 (any minor version wasmtime supports) and the llm interface.
PROVIDED_IMPORT_PREFIXES = ("wasi:",)


class HostError(Exception):
    """A failure the CLI reports as one line (no traceback)."""


class LoadError(HostError):
    """The file is not a component this host can run."""


class GuestTrap(HostError):
    """The guest trapped (e.g. an uncaught exception in a Python guest). The host stays usable."""

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(message)
        self.details = details  # wasmtime's full message, with the wasm backtrace
        # What the guest wrote before trapping, when `App.run_captured` collected it.
        self.stdout = b""
        self.stderr = b""


class GuestTimeout(GuestTrap):
    """The guest ran past `sandbox.timeout-s`."""


@dataclass(frozen=True)
class ModelSummary:
    """A configured model, as the config describes it (listing models loads none of them)."""

    name: str
    context_length: int
    path: Path | None  # None: the built-in default model
    aliases: tuple[str, ...] = ()  # other names it answers to (`models.NAME.aliases`)


@dataclass(frozen=True)
class LinkedComponent:
    """A compiled component and a linker wired for its imports (see `Host.link`)."""

    engine: WasmEngine
    component: Component
    linker: Linker
    compiled: bool  # whether loading it compiled (False: served from the cache)
    cache_file: Path | None = None  # where the compiled code is cached (what is derived from it can sit beside)


@dataclass(frozen=True)
class CompletedRun:
    exit_code: int
    stdout: bytes
    stderr: bytes


class Host:
    """Runs components against one engine. Create one per process and reuse it: it caches compiled code.

    `engine` defaults to the one `config.engine` names, created on first use (loading models is slow) and closed
    by `close()`; an engine passed in stays the caller's to close. `note` receives one-line progress messages
    (default: stderr). Apps of one Host may run on several threads at once (each run has its own store).
    """

    def __init__(
        self,
        config: HostConfig | None = None,
        engine: Engine | Registry | None = None,
        *,
        note: Callable[[str], None] = stderr_note,
    ) -> None:
        self.config = config if config is not None else HostConfig()
        self._registry = engine if engine is None or isinstance(engine, Registry) else Registry.of(engine)
        self._owns_engine = engine is None  # close only the engines this Host created
        self._note = note
        self._lock = threading.Lock()
        self._wasm_engine: WasmEngine | None = None
        self._components: ComponentCache | None = None
        self._tickers: dict[int, EpochTicker] = {}
        self._closed = False
        self._llm = LlmService(self._get_registry)
        # Key-value stores (shared by every component), each component's outbound HTTP client and the host's budget for
        # bytes handed into guests; closed with the Host.
        self.grant_services = GrantServices(self.config.key_value, self.config.data_dir, self.config.transfer_memory_mb)
        sandbox = self.config.sandbox
        self.limits = ScopeLimits(
            sandbox.stream_idle_timeout_s,
            sandbox.max_open_streams,
            sandbox.max_open_sequences,
            sandbox.max_sequence_mb * 1024 * 1024,
        )

    # -- engine and wasmtime, created on first use ------------------------------------------------------

    @property
    def engine(self) -> Registry:
        """Each model's engine (`engine.engine(model)`); created on first use."""
        return self._get_registry()

    def _get_registry(self) -> Registry:
        with self._lock:
            self._check_open()
            if self._registry is None:
                self._registry = create_registry(self.config, note=self._note)
            return self._registry

    def _wasm(self) -> tuple[WasmEngine, ComponentCache]:
        with self._lock:
            self._check_open()
            if self._wasm_engine is None or self._components is None:
                self._wasm_engine = create_wasmtime_engine()
                strategy = self.config.compile_strategy
                fast = create_wasmtime_engine("winch") if strategy != "optimized" else None
                self._components = ComponentCache(
                    self._wasm_engine,
                    self.config.cache_dir / "components",
                    note=self._note,
                    fast=fast,
                    optimize_later=strategy == "fast-first",
                )
            return self._wasm_engine, self._components

    def _start_ticker(self, engine: WasmEngine) -> None:
        """Epochs advance on every engine whose stores have deadlines (the Cranelift and the Winch one)."""
        with self._lock:
            if id(engine) not in self._tickers:
                self._tickers[id(engine)] = EpochTicker(engine)

    def _check_open(self) -> None:
        if self._closed:
            raise HostError("this Host is closed")

    # -- components -------------------------------------------------------------------------------------

    def load(
        self,
        path: str | Path,
        *,
        allowed_models: Iterable[str] | None = None,
        key_value_stores: Iterable[str] | None = None,
        config: Mapping[str, str | EnvValue] | None = None,
        allowed_outbound_hosts: Iterable[str] | None = None,
    ) -> App:
        """Load (compiling on first use) a component of the `command` world: a .wasm, or a guest directory (app.py
        or app.js), built as `llmhost run DIR` builds it, through the toolchain's content-keyed cache (a `BuildError`
        names the file and line of what fails).

        `allowed_models`: the models this component may use, by name or alias (None: every configured model).
        `key_value_stores`, `config`, `allowed_outbound_hosts`: the component's grants (docs/grants.md), each in
        place of the `[sandbox]` key of the same name when given; the config's `[sandbox]` values otherwise.
        """
        path = self._component_of(Path(path), "command")
        problems = sandbox_problems(self.config.sandbox)
        if problems:
            raise HostError("; ".join(problems))
        grants = self.grants(
            key_value_stores=key_value_stores, config=config, allowed_outbound_hosts=allowed_outbound_hosts
        )
        wasm_engine, loaded = self._load_component(path)
        _check_component(path, loaded.component, wasm_engine)
        if self.config.sandbox.timeout_s is not None:
            self._start_ticker(wasm_engine)
        allowed = self._allowed(allowed_models)
        linker = build_linker(
            wasm_engine,
            loaded.component,
            self._llm.restricted_to(allowed),
            self.limits,
            grants=grants,
            services=self.grant_services,
        )
        return App(self, path, loaded, linker, wasm_engine)

    def _component_of(self, path: Path, world: str) -> Path:
        """`path` itself, or the component of the guest directory `path` (a guest of `world`), built when its
        sources changed into the cache's `dev/` folder, as the CLI builds a DIR."""
        if not path.is_dir():
            return path
        from llmhost.toolchains.guest_dirs import build_guest

        try:
            return build_guest(path, world, self.config.cache_dir, self._note)
        except ConfigError as error:  # a guest of another world
            raise LoadError(str(error)) from None

    def grants(
        self,
        *,
        key_value_stores: Iterable[str] | None = None,
        config: Mapping[str, str | EnvValue] | None = None,
        allowed_outbound_hosts: Iterable[str] | None = None,
    ) -> Grants:
        """The `[sandbox]` grants, with the given ones in place of theirs; errors (a bad host pattern, an unset
        environment variable) are `HostError`s naming the key."""
        update: dict[str, object] = {}
        if key_value_stores is not None:
            update["key_value_stores"] = tuple(key_value_stores)
        if config is not None:
            update["config"] = dict(config)
        if allowed_outbound_hosts is not None:
            update["allowed_outbound_hosts"] = tuple(allowed_outbound_hosts)
        try:
            sandbox = self.config.sandbox.model_validate({**self.config.sandbox.model_dump(), **update})
            return Grants.from_config(sandbox, "sandbox")
        except (ValueError, ConfigError) as error:
            raise HostError(str(error)) from None

    def link(
        self,
        path: str | Path,
        *,
        allowed_models: Iterable[str] | None = None,
        allowed_key: str | None = None,
        grants: Grants | None = None,
        extra: Mapping[str, InterfaceDefiner] | None = None,
    ) -> LinkedComponent:
        """Load (compiling on first use) a component of any world, and a linker providing WASI, the host's
        interfaces and the `extra` ones (name -> definer). The caller checks the exports it needs and creates its
        own stores (`runtime.sandbox.new_store`) with their own deadlines, so this also starts the epoch ticker
        that makes store deadlines expire. `llmhost serve` uses it for the `http-app` world."""
        path = Path(path)
        wasm_engine, loaded = self._load_component(path)
        self._start_ticker(wasm_engine)
        # `allowed_key`: the config key that grants the models, named when a model is refused.
        llm = self._llm.restricted_to(self._allowed(allowed_models), allowed_key)
        # `grants`: the component's (`[components.NAME]`); None: nothing beyond the model.
        linker = build_linker(
            wasm_engine,
            loaded.component,
            llm,
            self.limits,
            grants=grants if grants is not None else Grants(),
            services=self.grant_services,
            extra=extra,
        )
        return LinkedComponent(wasm_engine, loaded.component, linker, loaded.compiled, loaded.cache_file)

    def _allowed(self, models: Iterable[str] | None) -> frozenset[str] | None:
        """An allow-list as the service checks it: an alias (`models.NAME.aliases`) grants its model."""
        if models is None:
            return None
        aliases = alias_map(self.config.models)
        return frozenset(aliases.get(model, model) for model in models)

    def _load_component(self, path: Path) -> tuple[WasmEngine, LoadedComponent]:
        if not path.is_file():
            raise LoadError(f"{path}: no such file (build one with `llmhost build DIR -o {path.name}`)")
        wasm_engine, components = self._wasm()
        try:
            loaded = components.load(path)
            return loaded.engine or wasm_engine, loaded
        except WasmtimeError as error:
            raise LoadError(f"{path}: not a valid WebAssembly component: {wasm_cause(str(error))}") from None

    # -- the llm interface, for host-side callers ---------------------------------------------------------

    def infer(
        self,
        model: str,
        prompt: str,
        params: dt.InferencingParams | None = None,
        *,
        on_chunk: Callable[[dt.StreamChunk], None] | None = None,
    ) -> dt.InferenceResult:
        """Generate a completion. `on_chunk` is called with each chunk as soon as its text is certain."""
        dt.check_text(prompt, "prompt")  # as every text of the Python API: a lone surrogate is InvalidInput
        params = params if params is not None else dt.DEFAULT_PARAMS
        if on_chunk is None:
            return self._llm.infer(model, prompt, params)
        return collect(self._llm.infer_stream(model, prompt, params), on_chunk)

    def infer_stream(self, model: str, prompt: str, params: dt.InferencingParams | None = None) -> Generation:
        """The same generation as `infer`, as an iterator of `StreamChunk`s ending with one `StreamDone`.

        Input errors are raised here, before any token is generated. `close()` cancels the generation and
        frees its engine slot.
        """
        dt.check_text(prompt, "prompt")
        return self._llm.infer_stream(model, prompt, params if params is not None else dt.DEFAULT_PARAMS)

    def chat_stream(
        self,
        model: str,
        messages: Iterable[MessageLike],
        params: dt.InferencingParams | None = None,
        tools: Iterable[ToolLike] | None = None,
        tool_choice: ToolChoiceLike | None = None,
    ) -> ChatGeneration:
        """The same chat as `chat`, as an iterator of `StreamChunk`s (text), `ToolCallDelta`s, then one
        `StreamDone`. Input errors are raised here; `close()` cancels it and frees its slot."""
        chat_params = dt.ChatParams(
            inferencing=params if params is not None else dt.DEFAULT_PARAMS,
            tools=chat_tools(tools),
            tool_choice=chat_tool_choice(tool_choice),
        )
        return self._llm.chat_stream(model, chat_messages(messages), chat_params)

    @arguments_of(chat_stream)
    def chat(self, *args: Any, **kwargs: Any) -> dt.ChatResult:
        """The WIT `chat`: a reply rendered with the model's template, text or tool calls (`result.message`).

        `messages`: `ChatMessage`s or OpenAI-shaped dicts (`{"role": "user", "content": "..."}`); `tools`: `Tool`s or
        OpenAI function dicts; `tool_choice`: `"auto"`, `"none"`, `"required"`, a named function or a `ToolChoice`.
        """
        return collect_chat(self.chat_stream(*args, **kwargs))

    def apply_chat_template(
        self,
        model: str,
        messages: Iterable[MessageLike],
        tools: Iterable[ToolLike] | None = None,
        *,
        add_generation_prompt: bool = True,
    ) -> str:
        """The prompt `chat` would generate from (the WIT `apply-chat-template`)."""
        return self._llm.apply_chat_template(model, chat_messages(messages), chat_tools(tools), add_generation_prompt)

    def open_sequence(self, model: str) -> TokenSequence:
        """A new, empty `TokenSequence` (the WIT `sequences.sequence`); `close()` frees it."""
        return self._llm.open_sequence(model)

    def tokenize(self, model: str, text: str) -> list[int]:
        dt.check_text(text, "text")
        return self._llm.tokenize(model, text)

    def model_info(self, model: str) -> dt.ModelInfo:
        return self._llm.model_info(model)

    def embeddings(self, model: str, texts: Sequence[dt.EmbeddingInput]) -> dt.EmbeddingsResult:
        """One vector per text, or per token-id list (its ids as they are: no beginning-of-sequence token added).
        `texts` is a list (or tuple) of those; anything else is `InvalidInput` saying what was expected."""
        return self._llm.embeddings(model, dt.embedding_inputs(texts))

    def models(self) -> list[ModelSummary]:
        return [
            ModelSummary(name=name, context_length=model.context_length, path=model.path, aliases=model.aliases)
            for name, model in self.config.models.items()
        ]

    # -- lifetime -----------------------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            tickers, engine = list(self._tickers.values()), self._registry if self._owns_engine else None
            self._tickers = {}
        for ticker in tickers:
            ticker.stop()
        self.grant_services.close()
        if engine is not None:
            engine.close()

    def __enter__(self) -> Host:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class App:
    """One loaded component. Every `run` gets a fresh store and instance: runs share no guest state."""

    def __init__(self, host: Host, path: Path, loaded: LoadedComponent, linker: Linker, engine: WasmEngine) -> None:
        self.host = host
        self.strategy = loaded.strategy  # "winch" on a fast first run, else "cranelift"
        self._engine = engine
        self.path = path
        self.name = path.name
        self.compiled = loaded.compiled  # whether loading it compiled (False: served from the cache)
        self.cache_file = loaded.cache_file
        self._component: Component = loaded.component
        self._linker = linker

    def instantiate(
        self,
        args: Sequence[str] = (),
        *,
        stdout: CapturedOutput | None = None,
        stderr: CapturedOutput | None = None,
        scope: RunScope,
    ) -> tuple[Store, Instance]:
        """A fresh sandboxed store and instance of this component (what every `run` starts with). What the
        guest opens belongs to `scope`, the caller's: close it, then the store, to free it all."""
        store = new_store(self._engine, self.host.config.sandbox, [self.name, *args], stdout, stderr, scope=scope)
        try:
            return store, self._linker.instantiate(store, self._component)
        except WasmtimeError as error:
            raise LoadError(f"{self.name} cannot be instantiated on this host: {wasm_cause(str(error))}") from None

    def run(
        self,
        args: Sequence[str],
        *,
        stdout: OutputSink | None = None,
        stderr: OutputSink | None = None,
        scope: RunScope | None = None,
    ) -> int:
        """Call the guest's `run(args)` in a fresh instance and return its exit status.

        The guest's stdout/stderr go to this process's file descriptors 1 and 2, or, when `stdout`/`stderr`
        callbacks are given, to them, once, when the run ends (trap included). Raises `GuestTrap` (or
        `GuestTimeout`) when the guest traps. `scope`: the run's (a fresh one when None); `scope.cancel(reason)`
        from another thread ends its generations and fails its further model calls with `reason`.
        """
        args = list(args)
        captured = [CapturedOutput(sink) if sink is not None else None for sink in (stdout, stderr)]
        scope = scope if scope is not None else RunScope(f"run of {self.name}")
        timeout_s = self.host.config.sandbox.timeout_s
        if timeout_s is not None:
            # At the deadline a host call waiting (a generation, a remote request) ends too, not just the guest.
            reason = f"{self.name} ran past its time limit of {timeout_s} s (raise `sandbox.timeout-s` in the config)"
            scope.set_deadline(time.monotonic() + timeout_s, reason)
        store: Store | None = None
        try:
            store, instance = self.instantiate(args, stdout=captured[0], stderr=captured[1], scope=scope)
            run = instance.get_func(store, RUN_EXPORT)
            if run is None:  # checked at load; kept for a clear message should it ever happen
                raise LoadError(f"{self.name} does not export `{RUN_EXPORT}`")
            try:
                exit_code = run(store, args)
                run.post_return(store)
            except WasmtimeError as error:
                raise self._trap(str(error)) from None
            return int(exit_code)
        finally:
            # Everything the guest still holds (streams, sequences: kept in globals, or lost in an exception's
            # reference cycle) is freed now, and so is the instance's memory: closing the store does not wait
            # for the garbage collector to break the cycle a trap leaves behind.
            scope.close()
            if store is not None:
                store.close()
            for output in captured:
                if output is not None:
                    output.deliver()

    def run_captured(self, args: Sequence[str]) -> CompletedRun:
        """`run`, collecting the guest's stdout and stderr instead of passing them through."""
        out: list[bytes] = []
        err: list[bytes] = []
        try:
            exit_code = self.run(args, stdout=out.append, stderr=err.append)
        except GuestTrap as trap:
            trap.stdout, trap.stderr = b"".join(out), b"".join(err)
            raise
        return CompletedRun(exit_code, b"".join(out), b"".join(err))

    def _trap(self, message: str) -> GuestTrap:
        cause = wasm_cause(message)
        if "wasm trap: interrupt" in cause:
            limit = self.host.config.sandbox.timeout_s
            return GuestTimeout(
                f"{self.name} ran past its time limit of {limit} s (raise `sandbox.timeout-s` in the config)",
                message,
            )
        hint = ""
        if "unreachable" in cause:
            hint = " (usually an uncaught exception in the guest; its traceback is on the guest's stderr)"
        return GuestTrap(f"{self.name} trapped: {cause}{hint}", message)


def wasm_cause(message: str) -> str:
    """The root cause of a wasmtime error: the last line after "Caused by:", without the wasm backtrace."""
    _, _, tail = message.rpartition("Caused by:")
    lines = [line.strip() for line in (tail or message).strip().splitlines() if line.strip()]
    if not lines:
        return message.strip()
    # Nested causes are numbered ("0: ...", "1: ..."); keep them all on one line.
    cause = "; ".join(line.split(": ", 1)[1] if line[:1].isdigit() and ": " in line else line for line in lines)
    if "fuel allocated for hostcalls" in cause:  # wasmtime's cap on one call's data out of a guest: say what it is
        cause += (
            f" (one call copies at most {MAX_LIFTED_ITEMS} list items out of a guest: send a larger body through "
            "response-writer.write in pieces, as the guest SDK's http.respond does)"
        )
    return cause


def _check_component(path: Path, component: Component, engine: WasmEngine) -> None:
    """Fail at load, with a message naming the fix, for components that could never run here."""
    exports = component.type.exports(engine)
    if RUN_EXPORT not in exports or not isinstance(exports[RUN_EXPORT].ty, FuncType):
        raise LoadError(
            f"{path}: the component does not export `{RUN_EXPORT}` (it must target the `command` world of "
            "wit/llm.wit; build it with `llmhost build`)"
        )
    check_imports(path, component, engine, (*LLM_INTERFACES, *SEQUENCES_INTERFACES, *GRANT_INTERFACES))


def check_imports(path: object, component: Component, engine: WasmEngine, provided: Sequence[str]) -> None:
    """Fail at load, naming them, when a component imports interfaces this host does not provide."""
    unknown = [
        name
        for name in component.type.imports(engine)
        if name not in provided and not name.startswith(PROVIDED_IMPORT_PREFIXES)
    ]
    if unknown:
        raise LoadError(
            f"{path}: the component imports {', '.join(unknown)}, which this host does not provide "
            f"(it provides WASI 0.2, {', '.join(provided)})"
        )
