"""The host side of the WIT interface `llmhost:llm/llm` (wit/llm.wit), every served version."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from wasmtime.component import FuncType, LinkerInstance, ResourceType

from llmhost import telemetry
from llmhost.interfaces.llm_values import (
    embeddings_to_wit,
    inference_result_to_wit,
    model_info_to_wit,
    model_status_to_wit,
    params_from_wit,
    params_to_wit,
    stream_event_to_wit,
    tokens_to_wit,
)
from llmhost.interfaces.streams import STREAM_TYPE_ID, scope_streams, stream_dropped
from llmhost.interfaces.versions import current, interface_names
from llmhost.run.service import LlmService, ScopeLimits
from llmhost.runtime import abi
from llmhost.runtime.abi import define_functions
from llmhost.runtime.sandbox import scope_of

_log = logging.getLogger(__name__)

INTERFACES = interface_names("llm")
INTERFACE = current("llm")
T = TypeVar("T")


def define_llm(
    instance: LinkerInstance, service: LlmService, limits: ScopeLimits, imported: dict[str, FuncType]
) -> None:
    """Register the functions a component imports, typed by its own WIT import types (see `abi.ResultEncoder`).

    A function the component imports but this host does not know is left undefined: instantiation then fails
    with wasmtime's message naming it. Handles go to the calling run's scope (`runtime.scope`).
    """

    def open_stream(store: Any, model: str, prompt: str, params: Any) -> int:
        streams = scope_streams(store, limits)
        streams.check_room()
        opened = lambda: service.infer_stream(model, prompt, params_from_wit(params), scope_of(store))  # noqa: E731
        return streams.open(telemetry.stream("infer-stream", model, params, opened))

    bindings: dict[str, tuple[Callable[..., Any], Callable[[Any], Any]]] = {
        "infer": (
            lambda store, model, prompt, params: service.infer(model, prompt, params_from_wit(params), scope_of(store)),
            inference_result_to_wit,
        ),
        "tokenize": (lambda store, model, text: service.tokenize(model, text, scope_of(store)), tokens_to_wit),
        "get-model-info": (lambda store, model: service.model_info(model, scope_of(store)), model_info_to_wit),
        "default-params": (lambda store, model: service.default_params(model, scope_of(store)), params_to_wit),
        "get-model-kind": (lambda store, model: service.model_kind(model, scope_of(store)), str),
        "generate-embeddings": (
            lambda store, model, texts: service.embeddings(model, texts, scope_of(store)),
            embeddings_to_wit,
        ),
        "generate-embeddings-for-tokens": (
            lambda store, model, inputs: service.embeddings(model, [list(i) for i in inputs], scope_of(store)),
            embeddings_to_wit,
        ),
        "infer-stream": (open_stream, lambda rep: abi.own_resource(rep, STREAM_TYPE_ID)),
        "[method]inference-stream.next": (
            lambda store, this: scope_streams(store, limits).next(abi.resource_rep(store, this)),
            stream_event_to_wit,
        ),
    }
    # Functions that cannot fail (no result type): a host error here would trap, so they must not raise.
    infallible: dict[str, Callable[[Any], Any]] = {
        "list-models": lambda _store: [model_info_to_wit(i) for i in _listed(service.list_models, "models")],
        "list-model-status": lambda _store: [
            model_status_to_wit(s) for s in _listed(service.model_status, "model status")
        ],
    }
    if "infer-stream" in imported or "[method]inference-stream.next" in imported:
        instance.add_resource("inference-stream", ResourceType.host(STREAM_TYPE_ID), stream_dropped(limits, "stream"))
    define_functions(instance, imported, bindings, infallible, traced="llm")


def _listed(read: Callable[[], list[T]], what: str) -> list[T]:
    try:
        return read()
    except Exception:  # the list functions have no error case: an engine failure lists nothing rather than trapping
        _log.exception("listing %s failed", what)
        return []
