"""runtime/host_funcs: host functions convert values on type snapshots read once, exactly as wasmtime-py does."""

from __future__ import annotations

import ctypes
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from wasmtime import Engine, Store
from wasmtime import _ffi as ffi
from wasmtime.component import Component, Record, RecordType, Variant, VariantType

from llmhost import FakeEngineConfig, Host, HostConfig
from llmhost.abi import ResultEncoder, imported_functions, params_to_wit, stream_event_to_wit
from llmhost.interfaces.llm import INTERFACE
from llmhost.runtime.host_funcs import snapshot
from llmhost.types import (
    FinishReason,
    InferencingParams,
    InvalidInput,
    ModelNotSupported,
    StreamChunk,
    StreamDone,
    Usage,
)
from probe_driver import run_probe

pytestmark = pytest.mark.wasm
MODEL = "gemma-3-270m"


@pytest.fixture(scope="module")
def llm_types(probe_wasm: Path) -> dict[str, Any]:
    engine = Engine()
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
