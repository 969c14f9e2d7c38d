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
import threading
from collections.abc import Callable
from ctypes import (
    CFUNCTYPE,
    POINTER,
    byref,
    c_char,
    c_char_p,
    c_size_t,
    c_void_p,
    cast,
    create_string_buffer,
    pointer,
)
from typing import Any

from wasmtime import WasmtimeError
from wasmtime import _ffi as ffi
from wasmtime.component import (
    Bool,
    EnumType,
    FuncType,
    LinkerInstance,
    ListType,
    OptionType,
    RecordType,
    ResultType,
    String,
    TupleType,
    Variant,
)
from wasmtime.component import VariantType as _VariantType
from wasmtime.component._enter import catch_exceptions
from wasmtime.component._types import VariantLikeType

from llmhost.runtime import lists
from llmhost.runtime.numbers import NUMBER_TYPES
from llmhost.runtime.sandbox import scope_of

# Lowering: every `lower(store, value, out)` writes `value` into `out` (a `wasmtime_component_val_t`) whole, or
# raises and leaves `out` as it was, so that a failed lowering never leaves wasmtime a half-built value to free.
# Names (record fields, variant cases) are encoded once; each string wasmtime will own takes one C call.
_BOOL = ffi.WASMTIME_COMPONENT_BOOL.value
_byte_vec_new = ffi.dll["wasm_byte_vec_new"]  # our own prototype of it (indexing makes a new one): takes bytes
_byte_vec_new.restype = None
_byte_vec_new.argtypes = [POINTER(ffi.wasm_byte_vec_t), c_size_t, c_char_p]


def _new_name(vec: Any, encoded: bytes) -> None:
    _byte_vec_new(byref(vec), len(encoded), encoded)


def _boxed(store: Any, node: Any, value: Any) -> Any:
    """A variant-like payload: lowered into a new heap value (None for a case without payload)."""
    if node is None:
        return None
    raw = ffi.wasmtime_component_val_t()
    node.lower(store, value, raw)
    return ffi.wasmtime_component_val_new(byref(raw))


class _Node:
    """A converter: lifting is wasmtime-py's own code, lowering ours; `convert_to_c` as wasmtime-py calls it."""

    def lower(self, store: Any, value: Any, out: Any) -> None:
        raise NotImplementedError

    def convert_to_c(self, store: Any, value: Any, ptr: Any) -> None:
        self.lower(store, value, ptr.contents)


# Each scalar type: its field of the C value's union (named as the WIT type, but for `boolean`), the Python type
# it takes, and its C kind.
_SCALARS: dict[type, tuple[str, type, int]] = {
    Bool: ("boolean", bool, ffi.WASMTIME_COMPONENT_BOOL.value),
    **{
        ty: (name, float if name.startswith("f") else int, getattr(ffi, f"WASMTIME_COMPONENT_{name.upper()}").value)
        for ty, name in NUMBER_TYPES.items()
    },
}


def _lift_string(c: Any) -> str:
    """A string argument, decoded straight from wasmtime's copy of it, which is then freed. wasmtime-py makes a
    `bytes` copy first: for a prompt of many megabytes that is one more copy of it in host memory at once."""
    vec = c.of.string
    try:
        if not vec.size:
            return ""
        address = cast(vec.data, c_void_p).value
        return str(memoryview((c_char * vec.size).from_address(address)), "utf-8")
    finally:
        ffi.wasm_byte_vec_delete(byref(vec))


class _Leaf(_Node):
    """A type without nested types. Numbers, strings and enums are lowered here; the rest (chars, flags,
    resource handles) by wasmtime-py. Which way is chosen once, here, not on every value."""

    def __init__(self, ty: Any) -> None:
        self.ty = ty
        self.convert_from_c = ty.convert_from_c
        self.add_classes = ty.add_classes
        self.scalar = _SCALARS.get(type(ty))
        if self.scalar is not None:
            self.lower = self._lower_scalar  # type: ignore[method-assign]
        elif isinstance(ty, String):
            self.lower = self._lower_string  # type: ignore[method-assign]
            self.convert_from_c = _lift_string
        elif isinstance(ty, EnumType):
            self.lower = self._lower_enum  # type: ignore[method-assign]

    def lower(self, store: Any, value: Any, out: Any) -> None:
        self.ty.convert_to_c(store, value, pointer(out))

    def _lower_scalar(self, store: Any, value: Any, out: Any) -> None:
        assert self.scalar is not None
        field, python_type, kind = self.scalar
        if not isinstance(value, python_type):
            raise TypeError(f"expected {python_type.__name__} for {type(self.ty).__name__} type")
        setattr(out.of, field, value)
        out.kind = kind

    def _lower_string(self, store: Any, value: Any, out: Any) -> None:
        if not isinstance(value, str):
            raise TypeError("expected string type")
        _new_name(out.of.string, value.encode())
        out.kind = ffi.WASMTIME_COMPONENT_STRING.value

    def _lower_enum(self, store: Any, value: Any, out: Any) -> None:
        if not isinstance(value, str):
            raise TypeError("expected str type")
        _new_name(out.of.enumeration, value.encode())
        out.kind = ffi.WASMTIME_COMPONENT_ENUM.value


class _Record(_Node):
    convert_from_c = RecordType.convert_from_c
    add_classes = RecordType.add_classes

    def __init__(self, fields: list[tuple[str, Any]]) -> None:
        self.fields = fields
        self.encoded = [name.encode() for name, _ in fields]

    def lower(self, store: Any, value: Any, out: Any) -> None:
        raw = ffi.wasmtime_component_valrecord_t()
        ffi.wasmtime_component_valrecord_new_uninit(byref(raw), len(self.fields))
        entries = [raw.data[i] for i in range(len(self.fields))]
        for entry, encoded in zip(entries, self.encoded, strict=True):
            entry.val.kind = _BOOL  # until lowered: safe to free
            _new_name(entry.name, encoded)
        try:
            for entry, (name, node) in zip(entries, self.fields, strict=True):
                node.lower(store, getattr(value, name), entry.val)
        except BaseException:
            ffi.wasmtime_component_valrecord_delete(byref(raw))
            raise
        out.of.record = raw
        out.kind = ffi.WASMTIME_COMPONENT_RECORD.value


def _lower_elements(store: Any, nodes: Any, values: Any, raw: Any, new: Any, delete: Any) -> Any:
    """A list or tuple's elements, lowered into `raw`, a new vector (`new`, freed by `delete`)."""
    new(byref(raw), len(values))
    items = [raw.data[i] for i in range(len(values))]
    for item in items:
        item.kind = _BOOL
    try:
        for item, node, element in zip(items, nodes, values, strict=True):
            node.lower(store, element, item)
    except BaseException:
        delete(byref(raw))
        raise
    return raw


class _Tuple(_Node):
    convert_from_c = TupleType.convert_from_c
    add_classes = TupleType.add_classes

    def __init__(self, elements: list[Any]) -> None:
        self.elements = elements

    def lower(self, store: Any, value: Any, out: Any) -> None:
        if not isinstance(value, tuple):
            raise TypeError("expected tuple type")
        if len(value) != len(self.elements):
            raise TypeError("tuple length mismatch")
        raw, new, delete = (
            ffi.wasmtime_component_valtuple_t(),
            ffi.wasmtime_component_valtuple_new_uninit,
            ffi.wasmtime_component_valtuple_delete,
        )
        out.of.tuple = _lower_elements(store, self.elements, value, raw, new, delete)
        out.kind = ffi.WASMTIME_COMPONENT_TUPLE.value


class _List(_Node):
    add_classes = ListType.add_classes

    def __init__(self, element: Any, is_bytes: bool, number: tuple[int, str] | None = None) -> None:
        self.element = element
        self.bytes = is_bytes
        self.number = number  # bytes, u32s, f32s: a few slices, not a C call per element (runtime/lists.py)

    def _is_bytes(self) -> bool:
        return self.bytes

    def convert_from_c(self, c: Any) -> Any:
        if self.number is not None:
            return lists.lift_numbers(c, self.number)
        return ListType.convert_from_c(self, c)  # type: ignore[arg-type]  # it reads only `element`, `_is_bytes`

    def lower(self, store: Any, value: Any, out: Any) -> None:
        if self.number is not None:
            lists.lower_numbers(value, self.number, out)
            return
        if not isinstance(value, bytes if self.bytes else list):
            raise TypeError("expected bytes value" if self.bytes else "expected list value")
        raw, new, delete = (
            ffi.wasmtime_component_vallist_t(),
            ffi.wasmtime_component_vallist_new_uninit,
            ffi.wasmtime_component_vallist_delete,
        )
        elements = itertools.repeat(self.element, len(value))
        out.of.list = _lower_elements(store, elements, value, raw, new, delete)
        out.kind = ffi.WASMTIME_COMPONENT_LIST.value


_variant_like: Any = VariantLikeType  # its methods run on the snapshot below, which is not a subclass


class _VariantLike(_Node):
    """Cases read once; whether values are tagged (`Variant`) and the classes each case accepts, computed once."""

    _lift = VariantLikeType._lift

    def __init__(self, cases: list[tuple[str, Any]]) -> None:
        self.case_list = cases
        self.tagged = _variant_like._tagged(self)
        self.classes: set[type] = set()
        _variant_like.add_classes(self, self.classes)
        self.by_tag = {name: (name, name.encode(), node) for name, node in cases}
        self.untagged: list[tuple[str, bytes, Any, tuple[type, ...]]] = []
        for name, node in cases:
            accepted: set[type] = set()
            if node is not None:
                node.add_classes(accepted)
            # wasmtime-py lets a payload-less case (an option's `none`) stand for `object`, so an untagged
            # `result<option<T>, error>` would take an error value for `ok` and then fail to lower it (a trap). The
            # only value such a case lowers is None: match it by that class. `tagged` is unchanged (wasmtime-py's
            # rule, which the guest's bindings and `ResultEncoder` follow), and sets that were disjoint stay so.
            accepted = {type(None) if cls is object else cls for cls in accepted}
            self.untagged.append((name, name.encode(), node, tuple(accepted)))

    def _cases(self) -> list[tuple[str, Any]]:
        return self.case_list

    def _tagged(self) -> bool:
        return self.tagged

    def add_classes(self, s: set[type]) -> None:
        s.update(self.classes)

    def _case(self, store: Any, value: Any) -> tuple[str, bytes, Any]:
        """The case `value` is (wasmtime-py's rules), its encoded name, and its payload lowered and boxed."""
        if self.tagged:
            if not isinstance(value, Variant):
                raise TypeError("expected Variant type")
            case = self.by_tag.get(value.tag)
            if case is not None:
                name, encoded, node = case
                return name, encoded, _boxed(store, node, value.payload)
        else:
            for name, encoded, node, accepted in self.untagged:
                if node is None:
                    if value is None:
                        return name, encoded, None
                elif isinstance(value, accepted):
                    return name, encoded, _boxed(store, node, value)
        raise ValueError("value not valid for this variant")


class _Variant(_VariantLike):
    convert_from_c = _VariantType.convert_from_c

    def lower(self, store: Any, value: Any, out: Any) -> None:
        _, encoded, payload = self._case(store, value)
        out.of.variant.val = payload
        _new_name(out.of.variant.discriminant, encoded)
        out.kind = ffi.WASMTIME_COMPONENT_VARIANT.value


class _Option(_VariantLike):
    convert_from_c = OptionType.convert_from_c

    def lower(self, store: Any, value: Any, out: Any) -> None:
        _, _, payload = self._case(store, value)
        out.of.option = payload
        out.kind = ffi.WASMTIME_COMPONENT_OPTION.value


class _Result(_VariantLike):
    convert_from_c = ResultType.convert_from_c

    def lower(self, store: Any, value: Any, out: Any) -> None:
        name, _, payload = self._case(store, value)
        out.of.result.is_ok = name == "ok"
        out.of.result.val = payload
        out.kind = ffi.WASMTIME_COMPONENT_RESULT.value


def snapshot(ty: Any) -> Any:
    """A converter for `ty` (a wasmtime-py `ValType`) that never goes back to the C API for type information."""
    if ty is None:
        return None
    if isinstance(ty, RecordType):
        return _Record([(name, snapshot(field)) for name, field in ty.fields])
    if isinstance(ty, TupleType):
        return _Tuple([snapshot(element) for element in ty.elements])
    if isinstance(ty, ListType):
        element = ty.element
        return _List(snapshot(element), ty._is_bytes(), lists.number_kind(element) if lists.FAST else None)
    if isinstance(ty, _VariantType):
        return _Variant([(name, snapshot(case)) for name, case in ty.cases])
    if isinstance(ty, OptionType):
        return _Option([("none", None), ("some", snapshot(ty.payload))])
    if isinstance(ty, ResultType):
        return _Result([("ok", snapshot(ty.ok)), ("err", snapshot(ty.err))])
    return _Leaf(ty)


class _Signature:
    """Converters for a function's parameters and result, from its WIT type."""

    def __init__(self, func_type: FuncType) -> None:
        self.params = [snapshot(ty) for _, ty in func_type.params]
        self.result = snapshot(func_type.result)


# Host memory reserved for values host functions returned (grants/transfers.py), held until wasmtime has copied them
# into the guest. That copy is done when the guest makes its next host call, or when its run ends: released then.
# Keyed by the run scope (the store's data), which a store and the contexts host functions get share.
_held: dict[int, list[Callable[[], None]]] = {}
_held_lock = threading.Lock()


def hold_until_lowered(store: Any, release: Callable[[], None]) -> None:
    """Call `release` once the value the current host function returns is in the guest (or the run is over)."""
    scope = scope_of(store)
    key = id(scope)
    with _held_lock:
        first = key not in _held
        _held.setdefault(key, []).append(release)
    if first:
        scope.table("lowered-holds", lambda: key, _release_held)


def _release_held(key: int) -> None:
    with _held_lock:
        releases = _held.pop(key, ())
    for release in releases:
        release()


_functions: dict[int, tuple[Callable[..., Any], _Signature]] = {}
_ids = itertools.count(1)  # never 0: the id travels through a C `void *`, and a null one reads back as None


@ffi.wasmtime_component_func_callback_t
def _call(fid: int | None, context: Any, _ty: Any, args: Any, nargs: int, results: Any, nresults: int) -> Any:
    def run(store: Any) -> None:
        if _held:  # the guest is running again: what an earlier call of its run handed over is in its memory now
            _release_held(id(scope_of(store)))
        func, signature = _functions[fid or 0]
        if len(signature.params) != nargs or nresults != (0 if signature.result is None else 1):
            raise TypeError("the caller imported this function with another type than the one it was defined for")
        result = func(store, *[ty.convert_from_c(args[i]) for i, ty in enumerate(signature.params)])
        if signature.result is not None:
            signature.result.lower(store, result, results[0])

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
