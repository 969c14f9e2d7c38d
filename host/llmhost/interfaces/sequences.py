"""The host side of the WIT interface `llmhost:llm/sequences` (wit/sequences.wit), every served version."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from wasmtime.component import FuncType, LinkerInstance, Record, ResourceHost, ResourceType

from llmhost import telemetry
from llmhost.domain.errors import InvalidInput
from llmhost.domain.limits import MAX_OPEN_SEQUENCES_KEY, MAX_SEQUENCE_MB_KEY
from llmhost.domain.types import BeamParams
from llmhost.engine.base import TokenSequence
from llmhost.interfaces import llm_values
from llmhost.interfaces.streams import STREAM_TYPE_ID, scope_streams
from llmhost.interfaces.versions import current, interface_names
from llmhost.run.scope import HandleTable
from llmhost.run.service import LlmService, ScopeLimits
from llmhost.runtime import abi
from llmhost.runtime.abi import define_functions
from llmhost.runtime.sandbox import scope_of

_log = logging.getLogger(__name__)

INTERFACES = interface_names("sequences")
INTERFACE = current("sequences")
SEQUENCE_TYPE_ID = 2


def _close_all(table: HandleTable[TokenSequence]) -> None:
    for sequence in table.drain():
        sequence.close()


def scope_sequences(store: Any, limits: ScopeLimits) -> HandleTable[TokenSequence]:
    """The sequences of the run `store` belongs to (closed, freeing slots and saved KV, when the run ends)."""
    return scope_of(store).table(
        "sequences",
        lambda: HandleTable[TokenSequence]("sequence", limits.max_open_sequences, MAX_OPEN_SEQUENCES_KEY),
        _close_all,
    )


def define_sequences(
    instance: LinkerInstance, service: LlmService, limits: ScopeLimits, imported: dict[str, FuncType]
) -> None:
    """Register the `sequence` resource and the functions the component imports (see `define_llm`)."""

    def own(store: Any, sequence: TokenSequence) -> Any:
        return abi.own_resource(scope_sequences(store, limits).add(sequence), SEQUENCE_TYPE_ID)

    def opening(create: Callable[..., TokenSequence], borrows: bool = False) -> Callable[..., Any]:
        # The quotas are checked before the sequence exists, so a refused open/fork costs nothing. A method's
        # borrowed handle is resolved first: a call that returns with a borrow unconsumed traps the guest.
        def call(store: Any, *args: Any) -> Any:
            if borrows:
                args = (scope_sequences(store, limits).get(abi.resource_rep(store, args[0])), *args[1:])
            table = scope_sequences(store, limits)
            table.check_room()
            check_memory(table)
            return own(store, create(store, *args))

        return call

    def check_memory(table: HandleTable[TokenSequence]) -> None:
        held = sum(sequence.host_bytes() for sequence in table.values())
        if held >= limits.max_sequence_bytes:
            raise InvalidInput(
                f"this run's sequences hold {held / 2**20:.1f} MB of host memory, its limit (close some, or "
                f"raise `{MAX_SEQUENCE_MB_KEY}` in the config)"
            )

    def method(call: Callable[..., Any]) -> Callable[..., Any]:
        # A method's first WIT argument is the borrowed handle: resolve it (consuming the borrow) first.
        return lambda store, this, *args: call(scope_sequences(store, limits).get(abi.resource_rep(store, this)), *args)

    def nothing(_: Any) -> None:
        return None

    def identity(value: Any) -> Any:
        return value

    def beam_search(store: Any, this: Any, params: Any) -> Any:
        table = scope_sequences(store, limits)
        sequence = table.get(abi.resource_rep(store, this))
        beam_params = beam_params_from_wit(params)
        if len(table) + beam_params.width > limits.max_open_sequences:
            table.check_room()  # names the quota key
            raise InvalidInput(
                f"beam search of width {beam_params.width} would exceed this run's limit of "
                f"{limits.max_open_sequences} open sequences (`{MAX_OPEN_SEQUENCES_KEY}`)"
            )
        check_memory(table)
        beams = sequence.beam_search(beam_params)
        return [beam_to_wit(own(store, beam), score) for beam, score in beams]

    def generate_stream(store: Any, this: Any, params: Any) -> int:
        sequence = scope_sequences(store, limits).get(abi.resource_rep(store, this))
        streams = scope_streams(store, limits)
        streams.check_room()
        opened = lambda: sequence.generate_stream(llm_values.params_from_wit(params))  # noqa: E731
        return streams.open(telemetry.stream("sequence.generate-stream", "", params, opened))

    # Functions returning result<T, error>: failures become `err` values.
    fallible: dict[str, tuple[Callable[..., Any], Callable[[Any], Any]]] = {
        "[static]sequence.open": (
            opening(lambda store, model: service.open_sequence(model, scope_of(store))),
            identity,
        ),
        "[method]sequence.append": (method(lambda s, text: s.append(text)), nothing),
        "[method]sequence.append-tokens": (method(lambda s, tokens: s.append_tokens(list(tokens))), nothing),
        "[method]sequence.generate": (
            method(lambda s, params: s.generate(llm_values.params_from_wit(params))),
            llm_values.inference_result_to_wit,
        ),
        "[method]sequence.generate-stream": (generate_stream, lambda rep: abi.own_resource(rep, STREAM_TYPE_ID)),
        "[method]sequence.truncate": (method(lambda s, count: s.truncate(count)), nothing),
        "[method]sequence.score": (
            method(lambda s, continuations: s.score([str(c) for c in continuations])),
            lambda scores: [float(x) for x in scores],
        ),
        "[method]sequence.beam-search": (beam_search, identity),
        "[method]sequence.append-tokens-with-logprobs": (
            method(lambda s, tokens, top: s.append_tokens_with_logprobs(list(tokens), top)),
            llm_values.optional_logprobs_to_wit,
        ),
        "[method]sequence.next-token-logprobs": (
            method(lambda s, top: s.next_token_logprobs(top)),
            llm_values.top_logprobs_to_wit,
        ),
        "[method]sequence.fork": (
            opening(lambda _store, sequence: sequence.fork(), borrows=True),
            identity,
        ),
    }
    # Plain getters: they cannot fail on a live handle.
    getters: dict[str, Callable[[TokenSequence], Any]] = {
        "[method]sequence.text": lambda s: abi.string_to_wit(s.text()),
        "[method]sequence.token-ids": lambda s: llm_values.tokens_to_wit(s.token_ids()),
        "[method]sequence.len": lambda s: len(s),
        "[method]sequence.logprobs": lambda s: s.logprobs(),
        "[method]sequence.log-likelihood": lambda s: s.log_likelihood(),
        "[method]sequence.evaluated-token-count": lambda s: s.evaluated_token_count(),
    }
    if not any(name in imported for name in (*fallible, *getters)):
        return
    instance.add_resource("sequence", ResourceType.host(SEQUENCE_TYPE_ID), _dropped(limits))
    define_functions(instance, imported, fallible, {name: method(get) for name, get in getters.items()}, traced="llm")


def _dropped(limits: ScopeLimits) -> Callable[[Any, int], None]:
    def destructor(store: Any, rep: int) -> None:
        try:
            sequence = scope_sequences(store, limits).pop(rep)
            if sequence is not None:
                sequence.close()
        except Exception:  # freeing must not trap the guest that dropped the handle
            _log.exception("closing sequence %d failed", rep)

    return destructor


def beam_params_from_wit(value: Any) -> BeamParams:
    """Validated (`check_beam_params`): raises `InvalidInput` naming the field."""
    return BeamParams(
        width=int(value.width),
        max_tokens=int(getattr(value, "max-tokens")),
        stop=tuple(str(s) for s in value.stop),
        length_penalty=llm_values.shortest_f32(float(getattr(value, "length-penalty"))),
    )


def beam_to_wit(sequence: ResourceHost, score: float) -> Record:
    return abi.record({"sequence": sequence, "score": float(score)})
