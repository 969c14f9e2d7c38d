"""Fast conversion of WIT lists of numbers between wasmtime's C values and Python (wasmtime-py 50).

wasmtime-py converts a list element by element, a ctypes call each: ~0.5 µs a byte, so a 1 MiB request body took
0.65 s to reach a guest and a 64 MiB response body ~30 s to leave one. The C API hands a list over as an array of
`wasmtime_component_val_t` (a kind byte, then the payload at a fixed offset), so a list of bytes, u32s or f32s is
read or written with a few strided slices instead: the same values, in milliseconds.

`install()` replaces `ListType.convert_to_c` / `convert_from_c` (calls of exports) for those element types only (every
other list goes through wasmtime-py's own code), after checking the layout it relies on; host functions
(runtime/host_funcs.py) use `lower_numbers` / `lift_numbers` the same way. tests/unit/test_wasm_lists.py checks the
values against wasmtime-py's own conversion.
"""

from __future__ import annotations

import ctypes
import sys
from array import array
from typing import Any

from wasmtime import _ffi as ffi
from wasmtime.component import _types

_VAL = ffi.wasmtime_component_val_t
_VAL_SIZE = ctypes.sizeof(_VAL)
_PAYLOAD = _VAL.of.offset  # where a value's payload starts, after its kind byte
# Element type -> (its value kind, the `array` type code of its payload).
_NUMBERS: dict[type, tuple[int, str]] = {
    _types.U8: (ffi.WASMTIME_COMPONENT_U8.value, "B"),
    _types.U32: (ffi.WASMTIME_COMPONENT_U32.value, "I"),
    _types.F32: (ffi.WASMTIME_COMPONENT_F32.value, "f"),
}
_original = (_types.ListType.convert_to_c, _types.ListType.convert_from_c)


def number_kind(element: Any) -> tuple[int, str] | None:
    """(value kind, `array` type code) of a list element type the fast path converts (u8, u32, f32), else None."""
    return _NUMBERS.get(type(element))


def lower_numbers(value: Any, number: tuple[int, str], out: Any) -> None:
    """Write `value` (bytes for u8, else a list of numbers) into `out`, a `wasmtime_component_val_t`, as a list."""
    kind, code = number
    if code == "B":
        if not isinstance(value, bytes):
            raise TypeError("expected bytes value")
        payload = value
    else:
        if not isinstance(value, list):
            raise TypeError("expected list value")
        payload = array(code, value).tobytes()  # the C cast wasmtime-py's element setter does; OverflowError for u32
    size = array(code).itemsize
    count = len(payload) // size
    raw = ffi.wasmtime_component_vallist_t()
    ffi.wasmtime_component_vallist_new_uninit(raw, count)
    if count:
        # Written in place into wasmtime's new array (32 bytes a value): no second copy of it in Python's memory,
        # which for a 10 MiB body would be another 320 MiB at once.
        address = ctypes.cast(raw.data, ctypes.c_void_p).value
        assert address is not None  # wasmtime aborts the process rather than return a null array
        values = memoryview((ctypes.c_char * (count * _VAL_SIZE)).from_address(address)).cast("B")
        values[0::_VAL_SIZE] = bytes([kind]) * count
        for k in range(size):
            values[_PAYLOAD + k :: _VAL_SIZE] = payload[k::size]
        values.release()
    out.of.list = raw
    out.kind = ffi.WASMTIME_COMPONENT_LIST.value


def lift_numbers(c: Any, number: tuple[int, str]) -> Any:
    """The list value `c` (a `wasmtime_component_val_t` of u8, u32 or f32 elements) as bytes or a list, freed."""
    assert c.kind == ffi.WASMTIME_COMPONENT_LIST.value
    kind, code = number
    size = array(code).itemsize
    try:
        count = int(c.of.list.size)
        values = ctypes.string_at(c.of.list.data, count * _VAL_SIZE) if count else b""
        if count and values[0] != kind:
            raise TypeError(f"a list element of kind {values[0]}, expected {kind}")
        if code == "B":
            return values[_PAYLOAD::_VAL_SIZE]
        payload = bytearray(count * size)
        for k in range(size):
            payload[k::size] = values[_PAYLOAD + k :: _VAL_SIZE]
        return array(code, payload).tolist()
    finally:  # numbers own nothing: the list's own storage is all there is to free
        ffi.wasmtime_component_vallist_delete(ctypes.byref(c.of.list))


def _to_c(self: Any, store: Any, val: Any, ptr: Any) -> None:
    number = number_kind(self.element)
    if number is None:
        _original[0](self, store, val, ptr)
    else:
        lower_numbers(val, number, ptr.contents)


def _from_c(self: Any, c: Any) -> Any:
    number = number_kind(self.element)
    return _original[1](self, c) if number is None else lift_numbers(c, number)


def layout_ok() -> bool:
    """Whether the C layout is the one the fast path assumes (a little-endian machine, 32-byte values with the
    payload at offset 8, 4-byte u32 and f32 arrays); else wasmtime-py's own conversion stays."""
    return (
        sys.byteorder == "little"
        and (_VAL_SIZE, _PAYLOAD) == (32, 8)
        and array("I").itemsize == 4
        and array("f").itemsize == 4
    )


FAST = layout_ok()


def install() -> bool:
    """Use the fast conversion for lists of u8, u32 and f32 (idempotent); returns whether it is in use."""
    if not FAST:
        return False
    _types.ListType.convert_to_c = _to_c  # type: ignore[method-assign]
    _types.ListType.convert_from_c = _from_c  # type: ignore[method-assign]
    return True


def uninstall() -> None:
    """wasmtime-py's own conversion again (tests compare the two)."""
    _types.ListType.convert_to_c, _types.ListType.convert_from_c = _original  # type: ignore[method-assign]
