"""The host side of the WIT interface `llmhost:llm/sequences@0.1.0` (wit/sequences.wit)."""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from typing import Any

from wasmtime.component import FuncType, LinkerInstance, ResourceType

from .. import abi
from ..engine.base import TokenSequence
from ..runtime.host_funcs import add_func
from ..types import EngineError
from .llm import STREAM_TYPE_ID, LlmService
from .streams import StreamTable

_log = logging.getLogger(__name__)

INTERFACE = "llmhost:llm/sequences@0.1.0"
SEQUENCE_TYPE_ID = 2


class SequenceTable:
    """Sequences guests hold, by handle. Dropping a handle closes the sequence (frees its slot and saved KV)."""

    def __init__(self) -> None:
        self._sequences: dict[int, TokenSequence] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._sequences)

    def add(self, sequence: TokenSequence) -> int:
        with self._lock:
            rep = next(self._ids)
            self._sequences[rep] = sequence
            return rep

    def get(self, rep: int) -> TokenSequence:
        with self._lock:
            sequence = self._sequences.get(rep)
        if sequence is None:
            raise EngineError("this sequence was already dropped")
        return sequence

    def drop(self, rep: int) -> None:
        with self._lock:
            sequence = self._sequences.pop(rep, None)
        if sequence is not None:
            sequence.close()

    def close(self) -> None:
        with self._lock:
            sequences, self._sequences = list(self._sequences.values()), {}
        for sequence in sequences:
            sequence.close()


def define_sequences(
    instance: LinkerInstance,
    service: LlmService,
    sequences: SequenceTable,
    streams: StreamTable,
    imported: dict[str, FuncType],
) -> None:
    """Register the `sequence` resource and the functions the component imports (see `define_llm`)."""

    def own(sequence: TokenSequence) -> Any:
        return abi.own_resource(sequences.add(sequence), SEQUENCE_TYPE_ID)

    def method(call: Callable[..., Any]) -> Callable[..., Any]:
        # A method's first WIT argument is the borrowed handle: resolve it (consuming the borrow) first.
        return lambda store, this, *args: call(sequences.get(abi.resource_rep(store, this)), *args)

    def nothing(_: Any) -> None:
        return None

    # Functions returning result<T, error>: failures become `err` values.
    fallible: dict[str, tuple[Callable[..., Any], Callable[[Any], Any], bool]] = {
        "[static]sequence.open": (service.open_sequence, own, False),
        "[method]sequence.append": (method(lambda s, text: s.append(text)), nothing, True),
        "[method]sequence.append-tokens": (method(lambda s, tokens: s.append_tokens(list(tokens))), nothing, True),
        "[method]sequence.generate": (
            method(lambda s, params: s.generate(abi.params_from_wit(params))),
            abi.inference_result_to_wit,
            True,
        ),
        "[method]sequence.generate-stream": (
            method(lambda s, params: streams.open(s.generate_stream(abi.params_from_wit(params)))),
            lambda rep: abi.own_resource(rep, STREAM_TYPE_ID),
            True,
        ),
        "[method]sequence.truncate": (method(lambda s, count: s.truncate(count)), nothing, True),
        "[method]sequence.fork": (method(lambda s: s.fork()), own, True),
    }
    # Plain getters: they cannot fail on a live handle.
    getters: dict[str, Callable[[TokenSequence], Any]] = {
        "[method]sequence.text": lambda s: abi.string_to_wit(s.text()),
        "[method]sequence.token-ids": lambda s: abi.tokens_to_wit(s.token_ids()),
        "[method]sequence.len": lambda s: len(s),
        "[method]sequence.logprobs": lambda s: s.logprobs(),
        "[method]sequence.log-likelihood": lambda s: s.log_likelihood(),
        "[method]sequence.evaluated-token-count": lambda s: s.evaluated_token_count(),
    }
    if not any(name in imported for name in (*fallible, *getters)):
        return
    instance.add_resource("sequence", ResourceType.host(SEQUENCE_TYPE_ID), _dropped(sequences))
    for name, func_type in imported.items():
        if name in fallible:
            function, to_wit, with_store = fallible[name]
            encoder = abi.ResultEncoder.from_wit(func_type.result)
            add_func(instance, name, abi.guarded(function, to_wit, encoder, with_store=with_store), func_type)
        elif name in getters:
            add_func(instance, name, method(getters[name]), func_type)


def _dropped(sequences: SequenceTable) -> Callable[[Any, int], None]:
    def destructor(_store: Any, rep: int) -> None:
        try:
            sequences.drop(rep)
        except Exception:  # freeing must not trap the guest that dropped the handle
            _log.exception("closing sequence %d failed", rep)

    return destructor
