"""The pure-Python parts of the guest SDK (llmhost_guest) without wasm: the generated bindings (`wit_world`,
`componentize_py_types`) are faked with small stand-ins shaped like componentize-py's output."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import pytest

from llmhost.build.compile import guest_sdk_dir


class Err(Exception):
    def __init__(self, value: Any) -> None:
        super().__init__(value)
        self.value = value


@dataclass
class Error_InvalidInput:  # noqa: N801 (the generated bindings' names)
    value: str


@dataclass
class Error_ModelNotSupported:  # noqa: N801
    pass


@dataclass
class Error_RuntimeError:  # noqa: N801
    value: str


@dataclass
class InferencingParams:
    max_tokens: int | None
    repeat_penalty: float
    repeat_penalty_last_n_token_count: int
    stop: list[str]
    temperature: float
    top_k: int
    top_p: float
    seed: int | None
    constraint: Any
    logprobs: int | None
    frequency_penalty: float
    presence_penalty: float
    logit_bias: list[Any]


@dataclass
class LogitBias:
    token_id: int
    bias: float


@dataclass
class Constraint_JsonSchema:  # noqa: N801
    value: str


@dataclass
class Constraint_Regex:  # noqa: N801
    value: str


@dataclass
class Constraint_Choice:  # noqa: N801
    value: list[str]


class FinishReason(Enum):
    STOP = 0
    LENGTH = 1


@dataclass
class Usage:
    prompt_token_count: int = 3
    generated_token_count: int = 2


@dataclass
class Result:
    text: str
    finish_reason: FinishReason = FinishReason.STOP
    usage: Usage = field(default_factory=Usage)
    logprobs: list[Any] = field(default_factory=list)


@dataclass
class StreamEvent_Chunk:  # noqa: N801
    value: Any


@dataclass
class StreamEvent_Done:  # noqa: N801
    value: Any


@dataclass
class Chunk:
    text: str
    token_ids: list[int]
    usage: Usage = field(default_factory=Usage)
    logprobs: list[Any] = field(default_factory=list)


@dataclass
class Done:
    finish_reason: FinishReason = FinishReason.LENGTH
    usage: Usage = field(default_factory=Usage)


class FakeStream:
    def __init__(self, events: list[Any]) -> None:
        self.events = events
        self.dropped = False

    def next(self) -> Any:
        return self.events.pop(0) if self.events else None

    def __exit__(self, *_: object) -> None:
        self.dropped = True


class FakeLlm(types.ModuleType):
    """`wit_world.imports.llm`: records calls; `fail` makes the next call return that error."""

    def __init__(self) -> None:
        super().__init__("wit_world.imports.llm")
        self.calls: list[tuple[Any, ...]] = []
        self.fail: Any = None
        self.host_defaults: InferencingParams | None = None
        for cls in (
            InferencingParams, LogitBias, Constraint_JsonSchema, Constraint_Regex, Constraint_Choice,
            StreamEvent_Chunk, StreamEvent_Done, Error_InvalidInput, Error_ModelNotSupported, Error_RuntimeError,
        ):  # fmt: skip
            setattr(self, cls.__name__, cls)

    def default_params(self, model: str) -> InferencingParams:
        """The host's defaults (here: the WIT's documented ones, or `host_defaults` when a test sets them)."""
        self.calls.append(("default-params", model))
        return self.host_defaults or InferencingParams(
            max_tokens=100, repeat_penalty=1.1, repeat_penalty_last_n_token_count=64, stop=[], temperature=0.8,
            top_k=40, top_p=0.9, seed=None, constraint=None, logprobs=None, frequency_penalty=0.0,
            presence_penalty=0.0, logit_bias=[],
        )  # fmt: skip

    def infer(self, model: str, prompt: str, params: Any) -> Result:
        self.calls.append(("infer", model, prompt, params))
        if self.fail is not None:
            raise Err(self.fail)
        return Result(text="generated")

    def infer_stream(self, model: str, prompt: str, params: Any) -> FakeStream:
        self.calls.append(("infer-stream", model, prompt, params))
        return FakeStream(
            [StreamEvent_Chunk(Chunk("a", [5])), StreamEvent_Chunk(Chunk("b", [6])), StreamEvent_Done(Done())]
        )


@pytest.fixture
def sdk(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, FakeLlm]]:
    fake = FakeLlm()
    world = types.ModuleType("wit_world")
    imports = types.ModuleType("wit_world.imports")
    imports.llm = fake  # type: ignore[attr-defined]
    world.imports = imports  # type: ignore[attr-defined]
    cpt = types.ModuleType("componentize_py_types")
    cpt.Err = Err  # type: ignore[attr-defined]
    for name, module in {
        "wit_world": world, "wit_world.imports": imports, "wit_world.imports.llm": fake, "componentize_py_types": cpt
    }.items():  # fmt: skip
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.syspath_prepend(str(guest_sdk_dir()))
    for name in [m for m in sys.modules if m.startswith("llmhost_guest")]:
        monkeypatch.delitem(sys.modules, name)
    import llmhost_guest

    yield llmhost_guest, fake


def test_infer_defaults_are_the_wits(sdk: tuple[Any, FakeLlm]) -> None:
    guest, fake = sdk
    result = guest.llm.infer("Hi")
    assert result == "generated" and result.text == "generated" and isinstance(result, str)
    assert result.finish_reason == "stop" and result.usage.generated_tokens == 2
    _, model, prompt, params = fake.calls[-1]
    assert (model, prompt) == ("gemma-3-270m", "Hi")
    assert params == InferencingParams(
        max_tokens=100, repeat_penalty=1.1, repeat_penalty_last_n_token_count=64, stop=[], temperature=0.8,
        top_k=40, top_p=0.9, seed=None, constraint=None, logprobs=None, frequency_penalty=0.0,
        presence_penalty=0.0, logit_bias=[],
    )  # fmt: skip


def test_defaults_come_from_the_host_once_per_model(sdk: tuple[Any, FakeLlm]) -> None:
    guest, fake = sdk
    fake.host_defaults = InferencingParams(
        max_tokens=7, repeat_penalty=1.0, repeat_penalty_last_n_token_count=0, stop=["END"], temperature=0.25,
        top_k=3, top_p=0.5, seed=None, constraint=None, logprobs=None, frequency_penalty=0.0, presence_penalty=0.0,
        logit_bias=[LogitBias(9, -5.0)],
    )  # fmt: skip
    guest.llm.infer("Hi")
    guest.llm.infer("Again", temperature=1.0)
    asked = [call for call in fake.calls if call[0] == "default-params"]
    assert asked == [("default-params", "gemma-3-270m")]  # asked once, then kept in the guest
    first, second = (call[3] for call in fake.calls if call[0] == "infer")
    assert first == fake.host_defaults
    assert second.temperature == 1.0 and second.max_tokens == 7 and second.stop == ["END"]
    assert second.logit_bias == [LogitBias(9, -5.0)]
    assert guest.defaults()["top_k"] == 3
    guest.llm.infer("Elsewhere", model="other")
    assert ("default-params", "other") in fake.calls


def test_infer_keywords(sdk: tuple[Any, FakeLlm]) -> None:
    guest, fake = sdk
    guest.llm.infer("Hi", model="other", max_tokens=None, stop="\n", temperature=0, seed=7, logit_bias={3: -100})
    _, model, _, params = fake.calls[-1]
    assert model == "other" and params.max_tokens is None and params.stop == ["\n"] and params.seed == 7
    assert params.temperature == 0.0 and params.logit_bias == [LogitBias(3, -100.0)]
    with pytest.raises(TypeError, match="max_token"):
        guest.llm.infer("Hi", max_token=3)


def test_structured_output_keywords(sdk: tuple[Any, FakeLlm]) -> None:
    guest, fake = sdk
    guest.llm.infer("Hi", json_schema={"type": "object"})
    assert fake.calls[-1][3].constraint == Constraint_JsonSchema('{"type": "object"}')

    class Model:  # shaped like a pydantic model class
        @classmethod
        def model_json_schema(cls) -> dict[str, Any]:
            return {"type": "integer"}

    guest.llm.infer("Hi", json_schema=Model)
    assert fake.calls[-1][3].constraint == Constraint_JsonSchema('{"type": "integer"}')
    guest.llm.infer("Hi", regex="[0-9]+")
    assert fake.calls[-1][3].constraint == Constraint_Regex("[0-9]+")
    guest.llm.infer("Hi", choice=("yes", "no"))
    assert fake.calls[-1][3].constraint == Constraint_Choice(["yes", "no"])
    with pytest.raises(guest.InvalidInput, match="at most one"):
        guest.llm.infer("Hi", regex="a", choice=["a"])


def test_errors_map_to_typed_exceptions(sdk: tuple[Any, FakeLlm]) -> None:
    guest, fake = sdk
    fake.fail = Error_InvalidInput("temperature must be >= 0")
    with pytest.raises(guest.InvalidInput, match="temperature must be >= 0") as caught:
        guest.llm.infer("Hi")
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, guest.LlmError)
    assert caught.value.message == "temperature must be >= 0"
    fake.fail = Error_ModelNotSupported()
    with pytest.raises(guest.ModelNotSupported):
        guest.llm.infer("Hi", model="nope")
    fake.fail = Error_RuntimeError("decode failed")
    with pytest.raises(guest.RuntimeError_, match="decode failed") as failed:
        guest.llm.infer("Hi")
    assert isinstance(failed.value, RuntimeError)


def test_stream_yields_chunks_then_exposes_done(sdk: tuple[Any, FakeLlm]) -> None:
    guest, _ = sdk
    with guest.llm.stream("Hi", max_tokens=2) as stream:
        chunks = list(stream)
        assert [c.text for c in chunks] == ["a", "b"] and chunks[1].token_ids == [6]
        assert stream.text == "ab"
        assert stream.done is not None and stream.done.finish_reason == "length"
    assert stream._handle is None  # dropped on leaving the block


def test_build_puts_the_sdk_on_the_module_path() -> None:
    assert (guest_sdk_dir() / "llmhost_guest" / "__init__.py").is_file()
