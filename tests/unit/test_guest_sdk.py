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
from hypothesis import given, settings
from hypothesis import strategies as st

from llmhost.toolchains.python import guest_sdk_dir


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


# -- chat streams, tool choice, embeddings' usage, interleaved streams ------------------------------------------------


class ChatRole(Enum):
    SYSTEM = 0
    USER = 1
    ASSISTANT = 2
    TOOL = 3


@dataclass
class ChatMessage:
    role: ChatRole
    content: str | None
    tool_calls: list[Any]
    tool_call_id: str | None


@dataclass
class ToolSpec:
    name: str
    description: str | None
    parameters: str


@dataclass
class ToolChoice_Auto:  # noqa: N801
    pass


@dataclass
class ToolChoice_Named:  # noqa: N801
    value: str


@dataclass
class ChatParams:
    inferencing: Any
    tools: list[Any]
    tool_choice: Any


@dataclass
class ChatEvent_Content:  # noqa: N801
    value: Any


@dataclass
class ChatEvent_ToolCall:  # noqa: N801
    value: Any


@dataclass
class ChatEvent_Done:  # noqa: N801
    value: Any


@dataclass
class ToolCallDeltaRecord:
    index: int
    id: str | None
    name: str | None
    arguments: str


@pytest.fixture
def chat_sdk(sdk: tuple[Any, FakeLlm]) -> tuple[Any, FakeLlm]:
    guest, fake = sdk
    for cls in (ChatRole, ChatMessage, ChatParams, ToolChoice_Auto, ToolChoice_Named, ChatEvent_Content,
                ChatEvent_ToolCall, ChatEvent_Done):  # fmt: skip
        setattr(fake, cls.__name__, cls)
    fake.Tool = ToolSpec  # type: ignore[attr-defined]

    def chat_stream(model: str, messages: list[Any], params: Any) -> FakeStream:
        fake.calls.append(("chat-stream", model, messages, params))
        return FakeStream(
            [
                ChatEvent_Content(Chunk("Let me check. ", [1])),
                ChatEvent_ToolCall(ToolCallDeltaRecord(0, "call_1", "weather", "")),
                ChatEvent_ToolCall(ToolCallDeltaRecord(0, None, None, '{"city": "Paris"}')),
                ChatEvent_Done(Done(FinishReason.STOP)),
            ]
        )

    fake.chat_stream = chat_stream  # type: ignore[attr-defined]
    return guest, fake


def test_chat_stream_yields_content_and_tool_call_deltas(chat_sdk: tuple[Any, FakeLlm]) -> None:
    guest, fake = chat_sdk
    tool = {"name": "weather", "parameters": {"type": "object"}}
    with guest.llm.chat_stream([("user", "Weather?")], tools=[tool], tool_choice={"name": "auto"}, seed=1) as stream:
        items = list(stream)
    assert [type(i).__name__ for i in items] == ["Chunk", "ToolCallDelta", "ToolCallDelta"]
    assert items[1] == guest.llm.ToolCallDelta(0, "call_1", "weather", "")
    assert "".join(i.arguments for i in items[1:]) == '{"city": "Paris"}'
    assert stream.text == "Let me check. " and stream.done.finish_reason == "stop"
    assert stream._handle is None
    _, model, messages, params = fake.calls[-1]
    # Chat defaults to the built-in instruct model; completion keeps Gemma 3 270M, a base model.
    assert model == "smollm2-135m" and messages[0] == ChatMessage(ChatRole.USER, "Weather?", [], None)
    # {"name": ...} names a tool whatever its name ("auto" included); plain strings keep their meaning.
    assert params.tool_choice == ToolChoice_Named("auto") and params.inferencing.seed == 1
    assert params.tools == [ToolSpec("weather", None, '{"type": "object"}')]


def test_chat_and_infer_have_their_own_default_models(chat_sdk: tuple[Any, FakeLlm]) -> None:
    guest, fake = chat_sdk
    guest.llm.infer("Once upon a time")
    assert fake.calls[-1][:2] == ("infer", guest.DEFAULT_MODEL) and guest.DEFAULT_MODEL == "gemma-3-270m"
    with guest.llm.chat_stream([("user", "hi")]) as stream:
        list(stream)
    assert fake.calls[-1][:2] == ("chat-stream", guest.DEFAULT_CHAT_MODEL)
    assert guest.DEFAULT_CHAT_MODEL == "smollm2-135m"


class ModelKind(Enum):
    BASE = 0
    INSTRUCT = 1
    EMBEDDING = 2


def test_model_kind_names_the_wit_enum_case(sdk: tuple[Any, FakeLlm]) -> None:
    guest, fake = sdk
    fake.get_model_kind = lambda model: {"smollm2-135m": ModelKind.INSTRUCT}.get(model, ModelKind.BASE)  # type: ignore[attr-defined]
    assert guest.llm.model_kind("smollm2-135m") == "instruct"
    assert guest.llm.model_kind() == "base"


class ModelState(Enum):
    LOADED = 2
    REMOTE = 4


def test_list_model_status_converts_the_record_and_falls_back_on_an_earlier_wit(sdk: tuple[Any, FakeLlm]) -> None:
    guest, fake = sdk
    fake.list_models = lambda: [types.SimpleNamespace(name="a"), types.SimpleNamespace(name="b")]  # type: ignore[attr-defined]
    # Built against 0.2.4: no `list_model_status` in the bindings; each model is listed, its state unknown.
    assert [(s.name, s.state, s.loaded) for s in guest.llm.list_model_status()] == [
        ("a", "unknown", False), ("b", "unknown", False),
    ]  # fmt: skip
    record = types.SimpleNamespace(
        name="a", state=ModelState.LOADED, memory_bytes=5, in_use=0, idle_ms=1500, keep_alive_ms=None, unload_in_ms=None
    )
    fake.list_model_status = lambda: [record]  # type: ignore[attr-defined]
    (status,) = guest.llm.list_model_status()
    assert status == guest.llm.ModelStatus("a", "loaded", 5, 0, 1.5, None, None) and status.loaded


def test_embed_returns_vectors_with_their_usage(sdk: tuple[Any, FakeLlm]) -> None:
    guest, fake = sdk

    @dataclass
    class EmbeddingsResult:
        embeddings: list[list[float]]
        usage: Any

    @dataclass
    class EmbeddingsUsage:
        prompt_token_count: int

    models: list[str] = []
    fake.generate_embeddings = lambda model, texts: (  # type: ignore[attr-defined]
        models.append(model) or EmbeddingsResult([[1.0, 0.0] for _ in texts], EmbeddingsUsage(7))
    )
    vectors = guest.llm.embed(["a", "b"])
    assert models == ["all-minilm-l6-v2"]  # the built-in embedding model by default
    assert vectors == [[1.0, 0.0], [1.0, 0.0]] and isinstance(vectors, list)
    assert vectors.usage.prompt_tokens == 7


class Opened:
    """A fake SDK stream: `n` chunks named after it, then its Done."""

    def __init__(self, guest: Any, name: str, n: int, log: list[str]) -> None:
        self.guest, self.name, self.n, self.log = guest, name, n, log
        self.done: Any = None
        self.closed = False
        log.append(f"open {name}")

    def __iter__(self) -> Iterator[Any]:
        for k in range(self.n):
            yield self.guest.Chunk(f"{self.name}{k}", [k], self.guest.Usage(1, k + 1))
        self.done = self.guest.Done("length", self.guest.Usage(1, self.n))

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.log.append(f"close {self.name}")


def test_interleave_reads_streams_in_turn_within_a_window(sdk: tuple[Any, FakeLlm]) -> None:
    guest, _ = sdk
    log: list[str] = []
    streams: dict[str, Opened] = {}

    def opener(name: str, n: int) -> Any:
        def open_it() -> Opened:
            streams[name] = Opened(guest, name, n, log)
            return streams[name]

        return open_it

    events = guest.interleave([opener("a", 2), opener("b", 1), opener("c", 1)], window=2)
    assert log == ["open a", "open b"]  # the first window is opened at once (input errors are raised here)
    got = []
    for index, event in events:
        got.append((index, event.text if isinstance(event, guest.Chunk) else event.finish_reason))
    assert got == [(0, "a0"), (1, "b0"), (0, "a1"), (1, "length"), (2, "c0"), (0, "length"), (2, "length")]
    assert log == ["open a", "open b", "close b", "open c", "close a", "close c"]  # c waited for a free place


def test_interleave_close_drops_every_open_stream(sdk: tuple[Any, FakeLlm]) -> None:
    guest, _ = sdk
    log: list[str] = []
    openers = [lambda name=name: Opened(guest, name, 5, log) for name in "abc"]
    with guest.interleave(openers, window=2) as events:
        assert next(events)[0] == 0
    assert log == ["open a", "open b", "close a", "close b"]  # c never opened
    assert list(events) == []

    def failing() -> Any:
        raise guest.InvalidInput("bad params")

    with pytest.raises(guest.InvalidInput):
        guest.interleave([lambda: Opened(guest, "d", 1, log), failing])
    assert log[-1] == "close d"  # a failed opening closes the streams already open


def _generated_text_module() -> Any:
    """llmhost_guest.processors alone (pure Python: it imports no bindings)."""
    import importlib.util

    path = guest_sdk_dir() / "llmhost_guest" / "processors.py"
    spec = importlib.util.spec_from_file_location("llmhost_guest_processors", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(alphabet="abé€x", max_size=12),
    cuts=st.lists(st.integers(min_value=0, max_value=40), max_size=8),
    stop=st.sampled_from(["", "b", "ab", "é", "€x", "zz"]),
)
def test_generated_text_matches_brute_force(text: str, cuts: list[int], stop: str) -> None:
    """`generate_with`'s text and exact stops against brute force, for tokens that split characters anywhere:
    after each token the text is the whole characters so far, cut before the first stop; once a stop matched,
    no more is fed; `settle` keeps the tokens whose bytes lie inside the text and re-appends the rest of it."""
    data = text.encode()
    bounds = sorted({min(c, len(data)) for c in cuts} | {len(data)})
    pieces = [data[a:b] for a, b in zip([0, *bounds[:-1]], bounds, strict=True) if b > a]
    generated = _generated_text_module().GeneratedText(stop)
    fed: list[bytes] = []
    for piece in pieces:
        fed.append(piece)
        stopped = generated.feed(piece)
        whole = b"".join(fed).decode("utf-8", "ignore")  # a prefix of valid UTF-8: whole characters only
        at = whole.find(stop) if stop else -1
        assert stopped == (at >= 0)
        assert generated.text == (whole[:at] if stopped else whole)
        if stopped:
            break
    keep, tail = generated.settle()
    assert (b"".join(fed[:keep]) + tail.encode()).decode() == generated.text
    # The longest run of tokens inside the text that ends on a character boundary is kept.
    kept = generated.text.encode()
    for more in range(keep + 1, len(fed) + 1):
        end = len(b"".join(fed[:more]))
        assert end > len(kept) or not _ends_on_boundary(kept, end)


def _ends_on_boundary(data: bytes, end: int) -> bool:
    try:
        data[:end].decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
