"""runtime/host_funcs: host functions convert values on type snapshots read once, exactly as wasmtime-py does."""

from __future__ import annotations

import ctypes
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from wasmtime import Store
from wasmtime import _ffi as ffi
from wasmtime.component import (
    F32,
    F64,
    U8,
    U32,
    U64,
    BorrowType,
    Component,
    EnumType,
    ListType,
    OptionType,
    OwnType,
    Record,
    RecordType,
    ResultType,
    String,
    Variant,
    VariantType,
)

from llmhost import FakeEngineConfig, Host, HostConfig
from llmhost.domain.errors import InvalidInput, ModelNotSupported
from llmhost.domain.types import FinishReason, InferencingParams, StreamChunk, StreamDone, Usage
from llmhost.interfaces.llm import INTERFACE
from llmhost.interfaces.llm_values import params_to_wit, stream_event_to_wit
from llmhost.interfaces.sequences import INTERFACE as SEQUENCES_INTERFACE
from llmhost.runtime.abi import ResultEncoder, imported_functions
from llmhost.runtime.components import create_wasmtime_engine
from llmhost.runtime.host_funcs import snapshot
from probe_driver import run_probe

pytestmark = pytest.mark.wasm
MODEL = "gemma-3-270m"


@pytest.fixture(scope="module")
def llm_types(probe_wasm: Path) -> dict[str, Any]:
    engine = create_wasmtime_engine("winch")  # only its types are read: Winch compiles it 5x faster
    component = Component.from_file(engine, str(probe_wasm))
    return imported_functions(component, engine, INTERFACE)


def _round_trip(lower_with: Any, lift_with: Any, value: Any) -> Any:
    raw = ffi.wasmtime_component_val_t()
    lower_with.convert_to_c(Store(), value, ctypes.pointer(raw))
    return lift_with.convert_from_c(raw)


def _next_results(encoder: ResultEncoder) -> Iterator[Any]:
    usage = Usage(prompt_token_count=3, generated_token_count=2)
    yield encoder.ok(stream_event_to_wit(StreamChunk(text="hé", token_ids=(7, 8), usage=usage)))
    yield encoder.ok(stream_event_to_wit(StreamDone(finish_reason=FinishReason.LENGTH, usage=usage)))
    yield encoder.ok(stream_event_to_wit(None))
    yield encoder.err(InvalidInput("top-p must be in (0, 1]"))
    yield encoder.err(ModelNotSupported("no"))


def test_snapshot_lowers_stream_events_as_wasmtime_py_lifts_them(llm_types: dict[str, Any]) -> None:
    result_type = llm_types["[method]inference-stream.next"].result
    for value in _next_results(ResultEncoder.from_wit(result_type)):
        assert _round_trip(snapshot(result_type), result_type, value) == value
        assert _round_trip(result_type, snapshot(result_type), value) == value


def test_snapshot_lifts_params_as_wasmtime_py_lowers_them(llm_types: dict[str, Any]) -> None:
    (_, model), (_, prompt), (_, params) = llm_types["infer"].params
    # f32 fields hold values that f32 represents exactly, so that the round trip can compare equal
    exact = InferencingParams(
        max_tokens=5, repeat_penalty=1.25, temperature=0.5, top_p=0.75, stop=["\n", "end"], seed=42
    )
    record = params_to_wit(exact)
    for ty, value in ((model, "m"), (prompt, "p"), (params, record), (params, None)):
        assert _round_trip(ty, snapshot(ty), value) == value


def _count_type_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count every read of a variant's cases or a record's fields from the C API."""
    reads = [0]
    for cls, name in ((VariantType, "cases"), (RecordType, "fields")):
        original = getattr(cls, name)

        def counted(self: Any, _original: Any = original) -> Any:
            reads[0] += 1
            return _original.fget(self)

        monkeypatch.setattr(cls, name, property(counted))
    return reads


def test_a_streamed_token_costs_no_type_reads(
    make_host: Callable[..., Host], probe_wasm: Path, llmhost_cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = make_host(
        HostConfig(engine=FakeEngineConfig(script="x" * 200, context_length=512), cache_dir=llmhost_cache_dir)
    )
    app = host.load(probe_wasm)
    reads = _count_type_reads(monkeypatch)
    counts = []
    for tokens in (4, 150):
        before = reads[0]
        outcome = run_probe(app, "stream", MODEL, "hi", json.dumps({"max-tokens": tokens}))
        assert len(outcome.value["events"]) == tokens + 1  # one chunk per token, then done
        counts.append(reads[0] - before)
    # The guest export's own call reads its types (wasmtime-py); the `next()` calls read none, however many.
    assert counts[0] == counts[1]


def test_a_variant_snapshot_keeps_tags_and_records(llm_types: dict[str, Any]) -> None:
    result_type = llm_types["[method]inference-stream.next"].result
    lifted = _round_trip(snapshot(result_type), result_type, Variant("err", Variant("runtime-error", "boom")))
    assert lifted == Variant("err", Variant("runtime-error", "boom"))
    chunk = _round_trip(snapshot(result_type), result_type, next(_next_results(ResultEncoder.from_wit(result_type))))
    assert isinstance(chunk.payload, Variant) and isinstance(chunk.payload.payload, Record)


def _samples(ty: Any) -> list[Any]:
    """Values of WIT type `ty` (wasmtime-py's), covering every case of every variant, empty and longer lists."""
    if isinstance(ty, String):
        return ["hé\n", ""]
    if isinstance(ty, (U32, U64)):
        return [0, 4_000_000_000]
    if isinstance(ty, U8):
        return [0, 255]
    if isinstance(ty, F32):
        return [0.5]
    if isinstance(ty, F64):
        return [-1.25]
    if isinstance(ty, EnumType):
        return list(ty.names)
    if isinstance(ty, ListType) and ty._is_bytes():
        return [b"", b"\x00\xff\xc3"]  # list<u8> is lifted as bytes (token bytes need not be UTF-8)
    if isinstance(ty, ListType):
        element = _samples(ty.element)
        return [[], element[:1], element * 2]
    if isinstance(ty, RecordType):
        fields = [(name, _samples(field)) for name, field in ty.fields]
        records = []
        for i in range(max(len(values) for _, values in fields)):
            record = Record()
            for name, values in fields:
                setattr(record, name, values[i % len(values)])
            records.append(record)
        return records
    if isinstance(ty, (VariantType, OptionType, ResultType)):
        values = []
        for name, case in ty._cases():
            payloads = [None] if case is None else _samples(case)
            values += [Variant(name, p) if ty._tagged() else p for p in payloads]
        return values
    raise AssertionError(f"no samples for {ty}")


def _has_handles(ty: Any) -> bool:
    if isinstance(ty, (OwnType, BorrowType)):
        return True
    if isinstance(ty, ListType):
        return _has_handles(ty.element)
    if isinstance(ty, RecordType):
        return any(_has_handles(field) for _, field in ty.fields)
    if isinstance(ty, (VariantType, OptionType, ResultType)):
        return any(case is not None and _has_handles(case) for _, case in ty._cases())
    return False


def test_snapshot_lowers_every_result_of_llm_and_sequences_as_wasmtime_py_lifts_it(probe_wasm: Path) -> None:
    engine = create_wasmtime_engine("winch")  # only its types are read: Winch compiles it 5x faster
    component = Component.from_file(engine, str(probe_wasm))
    checked = 0
    for interface in (INTERFACE, SEQUENCES_INTERFACE):
        for name, func_type in imported_functions(component, engine, interface).items():
            result = func_type.result
            if result is None or _has_handles(result):
                continue
            for value in _samples(result):
                assert _round_trip(snapshot(result), result, value) == value, (name, value)
                checked += 1
    assert checked > 30


def test_a_value_that_fails_to_lower_leaves_nothing_behind(llm_types: dict[str, Any]) -> None:
    # A field of the wrong type deep inside: lowering raises (the guest traps), and the value wasmtime would
    # otherwise free is left untouched, not half-built.
    result_type = llm_types["infer"].result
    usage = Record()
    setattr(usage, "prompt-token-count", 3)
    setattr(usage, "generated-token-count", "two")
    bad = Record()
    for field, value in (("finish-reason", "stop"), ("text", "hi"), ("usage", usage)):
        setattr(bad, field, value)
    raw = ffi.wasmtime_component_val_t()
    with pytest.raises(TypeError):
        snapshot(result_type).convert_to_c(Store(), ResultEncoder.from_wit(result_type).ok(bad), ctypes.pointer(raw))
    assert raw.kind == ffi.WASMTIME_COMPONENT_BOOL.value
