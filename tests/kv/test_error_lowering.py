"""Every error a host function returns reaches the guest as that error, never as a host exception (issue 54, defect
1): through the real lowering (`runtime/host_funcs`), for every function of every interface these guests import,
and through a guest's raw bindings for the inputs that used to end the run."""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wasmtime import Store
from wasmtime import _ffi as ffi
from wasmtime.component import Component, ResultType, Variant

from llmhost import Host, HostConfig
from llmhost.domain.errors import LlmError
from llmhost.runtime.abi import ResultEncoder, imported_functions
from llmhost.runtime.components import create_wasmtime_engine
from llmhost.runtime.host_funcs import snapshot

from .test_kv_guests import config_file, llmhost_run, load, steps

pytestmark = pytest.mark.wasm
HOST_INTERFACES = ("llmhost:", "wasi:keyvalue/", "wasi:config/")  # what the host implements itself


def _error_results(wasm: Path) -> dict[str, ResultType]:
    """Every imported function of `wasm` whose result is `result<T, error>` (`error`: a variant of messages)."""
    engine = create_wasmtime_engine("winch")  # only its types are read: Winch compiles it 5x faster
    component = Component.from_file(engine, str(wasm))
    found = {}
    for interface in component.type.imports(engine):
        if not interface.startswith(HOST_INTERFACES):
            continue  # wasmtime's own WASI
        for name, func_type in imported_functions(component, engine, interface).items():
            result = func_type.result
            if isinstance(result, ResultType) and result.err is not None:
                try:
                    ResultEncoder.from_wit(result)
                except TypeError:
                    continue  # not the plain `error` type (swap's cas-error: its own encoder, tested with it)
                found[f"{interface}#{name}"] = result
    return found


def test_every_error_case_of_every_function_lowers_as_the_error(kv_wasm: dict[str, Path]) -> None:
    results = _error_results(kv_wasm["kv_probe"])
    names = set(results)
    # The three untagged `result<option<T>, error>` shapes are among them: they took errors for `ok`.
    assert {"wasi:keyvalue/store@0.2.0-draft2#[method]bucket.get", "wasi:config/store@0.2.0-draft#get"} <= names
    assert any(n.endswith("cas.current") for n in names), names

    @settings(max_examples=200, deadline=None)
    @given(st.sampled_from(sorted(results)), st.text(max_size=40), st.data())
    def check(name: str, message: str, data: st.DataObject) -> None:
        result = results[name]
        encoder = ResultEncoder.from_wit(result)
        cases = [case for case, _ in result.err.cases]  # type: ignore[union-attr]
        kind = data.draw(st.sampled_from(cases))
        error = LlmError(message)
        error.kind = kind  # type: ignore[attr-defined]
        value = encoder.err(error)
        raw = ffi.wasmtime_component_val_t()
        snapshot(result).convert_to_c(Store(), value, ctypes.pointer(raw))  # raised before the fix
        assert raw.kind == ffi.WASMTIME_COMPONENT_RESULT.value and not raw.of.result.is_ok
        lifted = result.convert_from_c(raw)
        tag = lifted.payload.tag if isinstance(lifted, Variant) and lifted.tag == "err" else lifted.tag
        assert tag in cases

    check()


@pytest.mark.parametrize("store", ("default", "shared"))
def test_a_failing_get_reaches_the_guest_as_other(kv_config: HostConfig, kv_wasm: dict[str, Path], store: str) -> None:
    with Host(kv_config) as host:
        app = load(host, kv_wasm["kv_probe"])
        results = steps(
            app, store, ["get", ""], ["get", "a\u0000b"], ["get", "k" * 4097], ["set", "k", "v"], ["get", "k"]
        )
    for result in results[:3]:
        assert set(result) == {"err"} and result["err"]["kind"] == "other", results
    assert results[4] == {"ok": "v"}  # and the run went on


def test_a_failing_get_through_llmhost_run_is_a_value(
    tmp_path: Path, kv_config: HostConfig, kv_wasm: dict[str, Path]
) -> None:
    config = config_file(tmp_path, kv_config)
    outcome = llmhost_run(config, kv_wasm["kv_probe"], "wit", "default", '[["get", ""], ["get", "ok"]]')
    assert outcome.exit_code == 0 and "Traceback" not in outcome.stderr, outcome.stderr
    assert outcome.value[0]["err"]["kind"] == "other" and outcome.value[1] == {"ok": None}


# Keys a hostile guest sends: empty, NUL, long, non-BMP, lone-surrogate-free odd text, and ordinary ones.
KEYS = st.one_of(
    st.sampled_from(["", "a\u0000b", "k" * 4097, "k" * 4096, "🫎", "ok", "n"]),
    st.text(max_size=12),
)
STEPS = st.one_of(
    st.tuples(st.sampled_from(["get", "delete", "exists", "get-size"]), KEYS).map(list),
    st.tuples(st.just("set"), KEYS, st.text(max_size=8)).map(list),
    st.tuples(st.just("incr"), KEYS, st.integers(-(2**63), 2**63 - 1)).map(list),
    st.tuples(st.just("cas"), KEYS, st.text(max_size=8)).map(list),
    st.tuples(st.just("list"), st.none() | st.text(max_size=8)).map(list),
    st.tuples(st.just("get-many"), st.lists(KEYS, max_size=3)).map(list),
    st.tuples(st.just("set-many"), st.lists(st.tuples(KEYS, st.text(max_size=4)).map(list), max_size=3)).map(list),
    st.tuples(st.just("delete-many"), st.lists(KEYS, max_size=3)).map(list),
)


@pytest.mark.parametrize("store", ("default", "shared"))
def test_no_input_a_guest_controls_ends_its_run(kv_config: HostConfig, kv_wasm: dict[str, Path], store: str) -> None:
    # Through the raw bindings, every call returns a value (`ok` or a WIT error): never a trap, whatever the keys.
    with Host(kv_config) as host:
        app = load(host, kv_wasm["kv_probe"])

        @settings(max_examples=25, deadline=None)
        @given(st.lists(STEPS, min_size=1, max_size=6))
        def check(script: list[list[Any]]) -> None:
            results = steps(app, store, *script)  # asserts exit 0 and one result per step
            assert len(results) == len(script)
            for result in results:
                assert set(result) in ({"ok"}, {"err"}), result
                if "err" in result:
                    assert result["err"]["kind"] in ("other", "cas-failed"), result

        check()
