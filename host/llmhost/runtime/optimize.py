"""`python -m llmhost.runtime.optimize WASM CACHE_FILE LOCK`: compile WASM with Cranelift into CACHE_FILE.

Started in the background by `components.start_optimizing` after a fast (Winch) first compile; removes LOCK
when done, whether it succeeded or not.
"""

from __future__ import annotations

import sys
from pathlib import Path

from wasmtime.component import Component

from llmhost.runtime.components import create_wasmtime_engine, store_file


def main(argv: list[str]) -> int:
    wasm, cache_file, lock = Path(argv[0]), Path(argv[1]), Path(argv[2])
    try:
        data = wasm.read_bytes()
        component = Component(create_wasmtime_engine("cranelift"), data)
        store_file(cache_file, bytes(component.serialize()))
        return 0
    finally:
        lock.unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
