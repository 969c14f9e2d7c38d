"""wasmtime-py's number types by their WIT names: one table for exports.py (JSON descriptions of a component's
types) and host_funcs.py (lowering values straight into wasmtime's C values)."""

from __future__ import annotations

from wasmtime.component import F32, F64, S8, S16, S32, S64, U8, U16, U32, U64

NUMBER_TYPES: dict[type, str] = {
    U8: "u8",
    U16: "u16",
    U32: "u32",
    U64: "u64",
    S8: "s8",
    S16: "s16",
    S32: "s32",
    S64: "s64",
    F32: "f32",
    F64: "f64",
}
