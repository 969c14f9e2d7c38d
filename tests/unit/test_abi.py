"""abi and interfaces.llm_values: WIT values <-> domain types, result/error encoding from real WIT types, and host
functions that never raise."""

from __future__ import annotations

import math
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from wasmtime import Engine
from wasmtime.component import Component, FuncType, Record, Variant

from llmhost.domain.errors import EngineError, InvalidInput, LlmError, ModelNotSupported
from llmhost.domain.limits import U32_MAX, U64_MAX
from llmhost.domain.types import (
    DEFAULT_PARAMS,
    EmbeddingsResult,
    FinishReason,
    InferenceResult,
    InferencingParams,
    ModelInfo,
    Usage,
)
from llmhost.interfaces import llm_values
from llmhost.runtime import abi

# A component that only imports (no code): its import types are the real wasmtime types for these WIT shapes.
TYPES_WAT = """
(component
  (import "llmhost:llm/llm@0.1.0" (instance
    (type $error (variant (case "model-not-supported") (case "runtime-error" string) (case "invalid-input" string)))
    (export "error" (type $e (eq $error)))
    (type $info (record (field "name" string) (field "context-length" u32) (field "vocab-size" u32)))
    (export "model-info" (type $i (eq $info)))
    (export "tokenize" (func (param "model" string) (param "text" string) (result (result (list u32) (error $e)))))
    (export "get-model-info" (func (param "model" string) (result (result $i (error $e)))))
    (export "error-or-error" (func (result (result $e (error $e)))))
    (export "string-error" (func (result (result string (error string)))))
  ))
)
"""


@pytest.fixture(scope="module")
def wit_functions() -> dict[str, FuncType]:
    engine = Engine()
    return abi.imported_functions(Component(engine, TYPES_WAT), engine, "llmhost:llm/llm@0.1.0")


def wit_params(**overrides: object) -> Record:
    return llm_values.params_to_wit(DEFAULT_PARAMS.model_copy(update=overrides))


def f32(x: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


# -- params -------------------------------------------------------------------------------------------------


def test_params_none_means_the_documented_defaults() -> None:
    assert llm_values.params_from_wit(None) == DEFAULT_PARAMS


def test_params_read_kebab_case_fields() -> None:
    record = Record()
    for name, value in {
        "max-tokens": 7,
        "repeat-penalty": f32(1.3),
        "repeat-penalty-last-n-token-count": 3,
        "stop": ["\n", "END"],
        "temperature": f32(0.7),
        "top-k": 5,
        "top-p": f32(0.95),
        "seed": 2**64 - 1,
    }.items():
        setattr(record, name, value)
    params = llm_values.params_from_wit(record)
    assert params == InferencingParams(
        max_tokens=7,
        repeat_penalty=1.3,  # the guest wrote 1.3; the f32 that arrives (1.2999999523...) is shown as 1.3
        repeat_penalty_last_n_token_count=3,
        stop=("\n", "END"),
        temperature=0.7,
        top_k=5,
        top_p=0.95,
        seed=2**64 - 1,
    )


@given(
    max_tokens=st.none() | st.integers(1, U32_MAX),
    floats=st.tuples(
        st.floats(min_value=0, max_value=1e6, exclude_min=True, width=32),
        st.floats(min_value=0, max_value=1e6, width=32),
        st.floats(min_value=0, max_value=1, exclude_min=True, width=32),
    ),
    stop=st.lists(st.text(min_size=1, max_size=5), max_size=3),
    seed=st.none() | st.integers(0, U64_MAX),
)
def test_params_round_trip_keeps_every_f32_value(
    max_tokens: int | None, floats: tuple[float, float, float], stop: list[str], seed: int | None
) -> None:
    repeat_penalty, temperature, top_p = floats
    params = InferencingParams(
        max_tokens=max_tokens,
        repeat_penalty=repeat_penalty,
        temperature=temperature,
        top_p=top_p,
        stop=tuple(stop),
        seed=seed,
    )
    back = llm_values.params_from_wit(llm_values.params_to_wit(params))
    assert back.model_dump(exclude={"repeat_penalty", "temperature", "top_p"}) == params.model_dump(
        exclude={"repeat_penalty", "temperature", "top_p"}
    )
    for name in ("repeat_penalty", "temperature", "top_p"):
        assert f32(getattr(back, name)) == f32(getattr(params, name)), name


@pytest.mark.parametrize(
    ("field_name", "value"),
    [("temperature", math.nan), ("temperature", math.inf), ("top-p", 0.0), ("repeat-penalty", math.inf)],
)
def test_bad_params_fail_conversion_naming_the_field(field_name: str, value: float) -> None:
    # Guest params are validated once, where they cross the WIT boundary.
    with pytest.raises(InvalidInput, match=field_name):
        llm_values.params_from_wit(wit_params(**{field_name.replace("-", "_"): value}))


# -- results --------------------------------------------------------------------------------------------------


def field(record: Any, name: str) -> Any:
    """A record's field by its WIT name (kebab-case names are not Python identifiers)."""
    return getattr(record, name)


def test_inference_result_uses_wit_names_and_enum_strings() -> None:
    result = InferenceResult(
        finish_reason=FinishReason.CONTENT_FILTER,
        text="héllo",
        usage=Usage(prompt_token_count=3, generated_token_count=4),
    )
    record = llm_values.inference_result_to_wit(result)
    assert field(record, "finish-reason") == "content-filter"
    assert field(record, "text") == "héllo"
    usage = field(record, "usage")
    assert (field(usage, "prompt-token-count"), field(usage, "generated-token-count")) == (3, 4)


def test_model_info_embeddings_and_tokens() -> None:
    info = llm_values.model_info_to_wit(ModelInfo(name="m", context_length=4096, vocab_size=262144))
    assert [field(info, f) for f in ("name", "context-length", "vocab-size")] == ["m", 4096, 262144]
    embeddings = llm_values.embeddings_to_wit(
        EmbeddingsResult(embeddings=[[1.0, 0.5], [0.0, -1.0]], prompt_token_count=9)
    )
    assert field(embeddings, "embeddings") == [[1.0, 0.5], [0.0, -1.0]]
    assert field(field(embeddings, "usage"), "prompt-token-count") == 9
    assert llm_values.tokens_to_wit((1, 2, U32_MAX)) == [1, 2, U32_MAX]


@pytest.mark.parametrize("bad", [-1, U32_MAX + 1])
def test_values_that_cannot_be_lowered_are_rejected_before_wasmtime(bad: int) -> None:
    with pytest.raises(ValueError, match="u32"):
        llm_values.tokens_to_wit([bad])


# -- result and error encoding, from real WIT types -------------------------------------------------------------


def test_llm_results_are_untagged_so_payloads_go_bare(wit_functions: dict[str, FuncType]) -> None:
    for name in ("tokenize", "get-model-info"):
        encoder = abi.ResultEncoder.from_wit(wit_functions[name].result)
        assert not encoder.tagged
        assert encoder.ok([1, 2]) == [1, 2]
        assert encoder.err(InvalidInput("bad")) == Variant("invalid-input", "bad")


def test_overlapping_cases_are_tagged(wit_functions: dict[str, FuncType]) -> None:
    encoder = abi.ResultEncoder.from_wit(wit_functions["error-or-error"].result)
    assert encoder.tagged
    assert encoder.ok(Variant("model-not-supported")) == Variant("ok", Variant("model-not-supported"))
    assert encoder.err(ModelNotSupported("no")) == Variant("err", Variant("model-not-supported"))


def test_error_cases_follow_the_wit_payloads() -> None:
    errors = abi.ErrorEncoder()
    assert errors.encode(ModelNotSupported("not configured")) == Variant("model-not-supported")
    assert errors.encode(InvalidInput("top-p")) == Variant("invalid-input", "top-p")
    assert errors.encode(EngineError("boom")) == Variant("runtime-error", "boom")
    assert errors.encode(LlmError("plain")) == Variant("runtime-error", "plain")
    assert errors.encode(EngineError("bad \udc80 surrogate")) == Variant("runtime-error", "bad ? surrogate")


def test_a_non_variant_error_type_is_refused_at_link_time(wit_functions: dict[str, FuncType]) -> None:
    with pytest.raises(TypeError, match="error"):
        abi.ResultEncoder.from_wit(wit_functions["string-error"].result)


def test_imported_functions_is_empty_for_an_interface_not_imported() -> None:
    engine = Engine()
    assert abi.imported_functions(Component(engine, "(component)"), engine, "llmhost:llm/llm@0.1.0") == {}


def test_error_values_read_back() -> None:
    assert abi.error_tag_and_message(Variant("invalid-input", "x")) == ("invalid-input", "x")
    assert abi.error_tag_and_message(Variant("err", Variant("model-not-supported"))) == ("model-not-supported", None)


# -- host functions never raise --------------------------------------------------------------------------------


def encoder() -> abi.ResultEncoder:
    return abi.ResultEncoder(tagged=False)


def test_guarded_returns_the_converted_value() -> None:
    host_function = abi.guarded(lambda a, b: a + b, lambda x: x * 10, encoder())
    assert host_function(object(), 1, 2) == 30


def test_guarded_turns_llm_errors_into_err_values() -> None:
    def fails(model: str) -> None:
        raise ModelNotSupported(f"{model} is not configured")

    assert abi.guarded(fails, lambda x: x, encoder())(object(), "m") == Variant("model-not-supported")


def test_guarded_turns_any_other_exception_into_runtime_error(caplog: pytest.LogCaptureFixture) -> None:
    def buggy() -> None:
        raise KeyError("slot")

    value = abi.guarded(buggy, lambda x: x, encoder())(object())
    assert value == Variant("runtime-error", "internal host error: KeyError: 'slot'")
    assert "KeyError" in caplog.text  # a host bug is logged with its traceback


def test_guarded_catches_conversion_failures_too() -> None:
    text_with_surrogate = InferenceResult(
        finish_reason=FinishReason.STOP, text="\udc80", usage=Usage(prompt_token_count=1, generated_token_count=1)
    )
    value = abi.guarded(lambda: text_with_surrogate, llm_values.inference_result_to_wit, encoder())(object())
    assert isinstance(value, Variant) and value.tag == "runtime-error"
