"""Host functions whose WIT types are read once, when they are defined, instead of on every call.

wasmtime-py (pinned: 50.0.1) rebuilds a host function's parameter and result types from the C API on every call,
and its converters walk a variant's cases again at every level they lower (`_tagged` recursion): about 0.5 ms to
return `inference-stream.next`'s `result<option<stream-event>, error>`, once per token. That guest-side time runs
beside llama.cpp's decode threads, so on a machine whose cores all decode it slows the decode itself.

`add_func` registers the function with its own C callback. Each function holds a snapshot of its types from the
component's import (every case, field and element list read once, `_tagged` computed once) and converts values
with wasmtime-py's own `convert_to_c` / `convert_from_c` code running on that snapshot, so values map exactly as
they do in wasmtime-py. The types come from the import of the component the linker is built for (`runtime.linker`
builds one linker per component). They are not compared with the caller's types on each call: wasmtime's type
comparison panics (aborting the process) between a component's static types and an instance's runtime types
that hold resources. A caller that imported the name under another type still cannot read memory wrongly: every
converter checks the kind of each value before reading it, and wasmtime type-checks the values it is handed, so
such a call traps with a type error.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from ctypes import CFUNCTYPE, c_void_p, create_string_buffer
from typing import Any

from wasmtime import WasmtimeError
from wasmtime import _ffi as ffi
from wasmtime.component import FuncType, LinkerInstance, ListType, OptionType, RecordType, ResultType, TupleType
from wasmtime.component import VariantType as _VariantType
from wasmtime.component._enter import catch_exceptions
from wasmtime.component._types import VariantLikeType


class _Record:
    convert_to_c = RecordType.convert_to_c
    convert_from_c = RecordType.convert_from_c
    add_classes = RecordType.add_classes

    def __init__(self, fields: list[tuple[str, Any]]) -> None:
        self.fields = fields


class _Tuple:
    convert_to_c = TupleType.convert_to_c
    convert_from_c = TupleType.convert_from_c
    add_classes = TupleType.add_classes

    def __init__(self, elements: list[Any]) -> None:
        self.elements = elements


class _List:
    convert_to_c = ListType.convert_to_c
    convert_from_c = ListType.convert_from_c
    add_classes = ListType.add_classes

    def __init__(self, element: Any, is_bytes: bool) -> None:
        self.element = element
        self.bytes = is_bytes

    def _is_bytes(self) -> bool:
        return self.bytes


_variant_like: Any = VariantLikeType  # its methods run on the snapshot below, which is not a subclass


class _VariantLike:
    """Cases read once; whether values are tagged (`Variant`) and the classes it accepts, computed once."""

    _lower = VariantLikeType._lower
    _lift = VariantLikeType._lift

    def __init__(self, cases: list[tuple[str, Any]]) -> None:
        self.case_list = cases
        self.tagged = _variant_like._tagged(self)
        self.classes: set[type] = set()
        _variant_like.add_classes(self, self.classes)

    def _cases(self) -> list[tuple[str, Any]]:
        return self.case_list

    def _tagged(self) -> bool:
        return self.tagged

    def add_classes(self, s: set[type]) -> None:
        s.update(self.classes)


class _Variant(_VariantLike):
    convert_to_c = _VariantType.convert_to_c
    convert_from_c = _VariantType.convert_from_c


class _Option(_VariantLike):
    convert_to_c = OptionType.convert_to_c
    convert_from_c = OptionType.convert_from_c


class _Result(_VariantLike):
    convert_to_c = ResultType.convert_to_c
    convert_from_c = ResultType.convert_from_c


def snapshot(ty: Any) -> Any:
    """A converter for `ty` (a wasmtime-py `ValType`) that never goes back to the C API for type information.
    Types without nested types (numbers, strings, enums, flags, handles) are used as they are."""
    if ty is None:
        return None
    if isinstance(ty, RecordType):
        return _Record([(name, snapshot(field)) for name, field in ty.fields])
    if isinstance(ty, TupleType):
        return _Tuple([snapshot(element) for element in ty.elements])
    if isinstance(ty, ListType):
        return _List(snapshot(ty.element), ty._is_bytes())
    if isinstance(ty, _VariantType):
        return _Variant([(name, snapshot(case)) for name, case in ty.cases])
    if isinstance(ty, OptionType):
        return _Option([("none", None), ("some", snapshot(ty.payload))])
    if isinstance(ty, ResultType):
        return _Result([("ok", snapshot(ty.ok)), ("err", snapshot(ty.err))])
    return ty


class _Signature:
    """Converters for a function's parameters and result, from its WIT type."""

    def __init__(self, func_type: FuncType) -> None:
        self.params = [snapshot(ty) for _, ty in func_type.params]
        self.result = snapshot(func_type.result)


_functions: dict[int, tuple[Callable[..., Any], _Signature]] = {}
_ids = itertools.count(1)  # never 0: the id travels through a C `void *`, and a null one reads back as None


@ffi.wasmtime_component_func_callback_t
def _call(fid: int | None, context: Any, _ty: Any, args: Any, nargs: int, results: Any, nresults: int) -> Any:
    def run(store: Any) -> None:
        func, signature = _functions[fid or 0]
        if len(signature.params) != nargs or nresults != (0 if signature.result is None else 1):
            raise TypeError("the caller imported this function with another type than the one it was defined for")
        result = func(store, *[ty.convert_from_c(args[i]) for i, ty in enumerate(signature.params)])
        if signature.result is not None:
            signature.result.convert_to_c(store, result, results)

    return catch_exceptions(context, run)


@CFUNCTYPE(None, c_void_p)
def _finalize(fid: int | None) -> None:
    _functions.pop(fid or 0, None)


def add_func(instance: LinkerInstance, name: str, func: Callable[..., Any], func_type: FuncType) -> None:
    """Like `LinkerInstance.add_func` (`func(store, *args)`), with the types of `func_type` (the component's
    import of `name`) read once."""
    instance._assert_not_locked()
    fid = next(_ids)
    _functions[fid] = (func, _Signature(func_type))
    name_bytes = name.encode()
    error = ffi.wasmtime_component_linker_instance_add_func(
        instance.ptr(), create_string_buffer(name_bytes), len(name_bytes), _call, fid, _finalize
    )
    if error:
        _functions.pop(fid, None)
        raise WasmtimeError._from_ptr(error)
