"""wasmtime plumbing: compiled-component cache, per-store sandbox, linker wiring."""
