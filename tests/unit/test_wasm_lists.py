"""runtime/lists.py: lists of u8, u32 and f32 cross between host and guest with the values wasmtime-py's own
conversion gives, both ways; and the data sizes wasmtime allows per call (domain/limits.py MAX_LIFTED_ITEMS: only
what leaves a guest is counted), measured on a real component: a hand-written one (core wasm with a bump allocator)
whose exports call host functions, so every conversion runs (export arguments and host-call results into the
guest, host-call arguments and export results out of it)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from wasmtime import Engine, Store, WasmtimeError
from wasmtime.component import Component, Linker

from llmhost.domain.limits import HOSTCALL_FUEL_BYTES, LIFTED_ITEM_BYTES, MAX_LIFTED_ITEMS
from llmhost.runtime import abi, lists
from llmhost.runtime.host_funcs import add_func

# Each echoes its argument through the host function of the same name: the host gets it, and returns its answer.
ECHOES = {"bytes": "(list u8)", "floats": "(list f32)", "ids": "(list (list u32))", "words": "(list string)"}
CANON = '(memory (core memory $libc "mem")) (realloc (core func $libc "realloc"))'


def component_wat() -> str:
    imports = "".join(f'(import "{n}" (func ${n} (param "x" {t}) (result {t})))\n' for n, t in ECHOES.items())
    lowered = "".join(f"(core func $low-{n} (canon lower (func ${n}) {CANON}))\n" for n in ECHOES)
    core_imports = "".join(f'(import "host" "{n}" (func $h-{n} (param i32 i32 i32)))\n' for n in ECHOES)
    core_funcs = "".join(
        f'(func (export "{n}") (param i32 i32) (result i32) (call $h-{n} (local.get 0) (local.get 1) (i32.const 16))'
        " (i32.const 16))\n"
        for n in ECHOES
    )
    host = " ".join(f'(export "{n}" (func $low-{n}))' for n in [*ECHOES, "make"])
    lifted = "".join(
        f'(func (export "{n}") (param "x" {t}) (result {t}) (canon lift (core func $main "{n}") {CANON}))\n'
        for n, t in ECHOES.items()
    )
    return f"""(component
{imports}(import "make" (func $make (param "n" u32) (result (list u8))))
(core module $Libc
  (memory (export "mem") 1)
  (global $bump (mut i32) (i32.const 1024))
  (func (export "realloc") (param i32 i32 i32 i32) (result i32)
    (local $p i32)
    (local.set $p (i32.and (i32.add (global.get $bump) (i32.const 7)) (i32.const -8)))
    (global.set $bump (i32.add (local.get $p) (local.get 3)))
    (block $ok
      (loop $grow
        (br_if $ok (i32.le_u (global.get $bump) (i32.mul (memory.size) (i32.const 65536))))
        (if (i32.lt_s (memory.grow (i32.const 256)) (i32.const 0)) (then unreachable))
        (br $grow)))
    (local.get $p)))
(core instance $libc (instantiate $Libc))
{lowered}(core func $low-make (canon lower (func $make) {CANON}))
(core module $Main
  (import "libc" "mem" (memory 1))
  {core_imports}(import "host" "make" (func $h-make (param i32 i32)))
  {core_funcs}
  (func (export "length") (param i32 i32) (result i32) (local.get 1))
  (func (export "made") (param i32) (result i32) (call $h-make (local.get 0) (i32.const 16)) (i32.load (i32.const 20)))
)
(core instance $main (instantiate $Main (with "libc" (instance $libc)) (with "host" (instance {host}))))
{lifted}(func (export "length") (param "x" (list u8)) (result u32) (canon lift (core func $main "length") {CANON}))
(func (export "made") (param "n" u32) (result u32) (canon lift (core func $main "made") {CANON}))
)"""


class Echo:
    """The component, and what its host functions received. `host_funcs`: the functions are defined as the host
    defines its own (runtime/host_funcs.py, types read once), else with wasmtime-py's `add_func`."""

    def __init__(self, host_funcs: bool = False) -> None:
        self.engine = Engine()
        self.component = Component(self.engine, component_wat())
        received: list[Any] = []  # the functions hold this, not `self`: the linker is freed with the Echo
        self.received = received
        self.linker = Linker(self.engine)
        answers: dict[str, Callable[[Any], Any]] = {
            "bytes": lambda x: x[::-1],
            "floats": lambda x: [v * 2 for v in x],
            "ids": lambda x: [v[::-1] for v in x],
            "words": lambda x: [w.upper() for w in x],
        }
        functions: dict[str, Callable[..., Any]] = {
            name: lambda _store, x, answer=answer: (received.append(x), answer(x))[1]
            for name, answer in answers.items()
        }
        functions["make"] = lambda _store, n: bytes(n)
        types = {name: item.ty for name, item in self.component.type.imports(self.engine).items()}
        with self.linker.root() as root:
            for name, function in functions.items():
                if host_funcs:
                    add_func(root, name, function, types[name])
                else:
                    root.add_func(name, function)

    def call(self, name: str, *args: Any) -> Any:
        store = Store(self.engine)
        function = self.linker.instantiate(store, self.component).get_func(store, name)
        assert function is not None
        result = function(store, *args)
        function.post_return(store)
        return result


@pytest.fixture(scope="module", params=[False, True], ids=["wasmtime-py-functions", "host-functions"])
def echo(request: pytest.FixtureRequest) -> Iterator[Echo]:
    assert abi.FAST_LISTS, "the fast list conversion is not in use: its layout check failed"
    yield Echo(host_funcs=request.param)
    lists.install()


@pytest.fixture(scope="module")
def reference() -> Echo:
    """Values as wasmtime-py's own conversion gives them (read with the fast path uninstalled)."""
    return Echo()


CASES = [
    ("bytes", bytes(range(256)) * 5),
    ("bytes", b""),
    ("floats", [0.1, -1e30, float("inf"), float("-inf"), 3.0, 1e300, -0.0, 1.5e-45]),
    ("floats", []),
    ("ids", [[1, 2, 4294967295], [], [7, 0]]),
    ("words", ["a", "", "héllo"]),
]


@pytest.mark.parametrize(("name", "value"), CASES)
def test_the_fast_conversion_gives_wasmtime_pys_values(echo: Echo, reference: Echo, name: str, value: Any) -> None:
    lists.uninstall()
    try:
        want = reference.call(name, value), reference.received[-1]
    finally:
        lists.install()
    got = echo.call(name, value), echo.received[-1]
    assert repr(got) == repr(want)  # repr: -0.0, inf and the f32 rounding of 0.1 compare exactly
    assert type(got[0]) is type(want[0]) and type(got[1]) is type(want[1])


def test_wrong_python_types_are_refused_as_wasmtime_py_refuses_them(echo: Echo) -> None:
    with pytest.raises(TypeError, match="expected bytes"):
        echo.call("bytes", [1, 2])
    with pytest.raises(TypeError, match="expected list"):
        echo.call("floats", (1.0, 2.0))
    with pytest.raises(OverflowError):  # wasmtime-py would have wrapped it silently
        echo.call("ids", [[2**32]])


def test_what_leaves_a_guest_is_capped_per_call_and_what_enters_it_is_not() -> None:
    echo = Echo(host_funcs=True)
    assert MAX_LIFTED_ITEMS == HOSTCALL_FUEL_BYTES // LIFTED_ITEM_BYTES == 2_796_202
    # Out of the guest, twice per echo (the host call's argument, the export's result): the limit is exact.
    assert len(echo.call("bytes", bytes(MAX_LIFTED_ITEMS))) == MAX_LIFTED_ITEMS
    with pytest.raises(WasmtimeError, match="fuel allocated for hostcalls has been exhausted"):
        echo.call("bytes", bytes(MAX_LIFTED_ITEMS + 1))
    # A list of strings: 48 bytes each, plus their text.
    words = ["x" * 1000] * (HOSTCALL_FUEL_BYTES // (LIFTED_ITEM_BYTES + 1000) + 10)
    with pytest.raises(WasmtimeError, match="fuel"):
        echo.call("words", words)
    # Into the guest (an export's argument, a host call's result), three times the limit passes.
    assert echo.call("length", bytes(3 * MAX_LIFTED_ITEMS)) == 3 * MAX_LIFTED_ITEMS
    assert echo.call("made", 3 * MAX_LIFTED_ITEMS) == 3 * MAX_LIFTED_ITEMS
