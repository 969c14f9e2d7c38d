"""Loading components: the compiled-code cache and clear errors for files that cannot run here."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from wasmtime import Engine

from llmhost import Host, HostConfig, LoadError
from llmhost.runtime.components import ComponentCache, create_wasmtime_engine

pytestmark = pytest.mark.wasm  # builds, compiles and runs components

# A component with no code: compiles in milliseconds, so the cache's miss/hit/repair cycle is cheap to test.
EMPTY_COMPONENT = "(component)"


def write_component(path: Path, wat: str) -> Path:
    from wasmtime import wat2wasm

    path.write_bytes(wat2wasm(wat))
    return path


def test_cache_miss_compiles_and_notes_then_hit_deserializes(tmp_path: Path) -> None:
    wasm = write_component(tmp_path / "empty.wasm", EMPTY_COMPONENT)
    notes: list[str] = []
    cache = ComponentCache(create_wasmtime_engine(), tmp_path / "components", note=notes.append)

    first = cache.load(wasm)
    assert first.compiled and first.cache_file.is_file()
    assert notes[0] == "compiling empty.wasm …"
    assert notes[1].startswith("compiled empty.wasm in ") and notes[1].endswith("(cranelift; cached afterwards)")

    again = ComponentCache(create_wasmtime_engine(), tmp_path / "components", note=notes.append).load(wasm)
    assert not again.compiled and again.cache_file == first.cache_file
    assert len(notes) == 2


def test_a_corrupt_cache_file_is_recompiled(tmp_path: Path) -> None:
    wasm = write_component(tmp_path / "empty.wasm", EMPTY_COMPONENT)
    engine = create_wasmtime_engine()
    cache_file = ComponentCache(engine, tmp_path / "components", note=lambda _: None).load(wasm).cache_file
    cache_file.write_bytes(b"not machine code")
    assert ComponentCache(engine, tmp_path / "components", note=lambda _: None).load(wasm).compiled
    assert not ComponentCache(engine, tmp_path / "components", note=lambda _: None).load(wasm).compiled


def test_a_loaded_component_is_reused_from_memory(tmp_path: Path) -> None:
    wasm = write_component(tmp_path / "empty.wasm", EMPTY_COMPONENT)
    cache = ComponentCache(create_wasmtime_engine(), tmp_path / "components", note=lambda _: None)
    first = cache.load(wasm)
    first.cache_file.unlink()  # the second load must not need the file
    second = cache.load(wasm)
    assert second.component is first.component and not second.compiled


def test_the_key_covers_the_bytes_and_the_codegen_settings(tmp_path: Path) -> None:
    cache = ComponentCache(create_wasmtime_engine(), tmp_path, note=lambda _: None)
    assert cache.cache_file(b"a") != cache.cache_file(b"b")
    # Code compiled without epoch interruption must never be loaded into our engine (it has no deadline checks).
    plain = ComponentCache(Engine(), tmp_path, note=lambda _: None)
    wasm = write_component(tmp_path / "empty.wasm", EMPTY_COMPONENT)
    from wasmtime.component import Component

    (tmp_path / "foreign.cwasm").write_bytes(bytes(Component(Engine(), wasm.read_bytes()).serialize()))
    with pytest.raises(Exception, match=r"(?i)compat|config|epoch"):
        Component.deserialize_file(create_wasmtime_engine(), str(tmp_path / "foreign.cwasm"))
    assert plain.cache_file(b"a") == cache.cache_file(b"a")  # same key: the engine settings are fixed by llmhost


def test_probe_is_served_from_the_cache_on_a_second_load(
    fake_config: HostConfig, probe_wasm: Path, make_host: Callable[..., Host], compile_notes: list[str]
) -> None:
    # The session's first load compiled it (unless $LLMHOST_TEST_CACHE_DIR already held it).
    assert all(note.startswith(("compiling ", "fast compile ", "compiled ")) for note in compile_notes)
    notes: list[str] = []
    started = time.monotonic()
    app = make_host(fake_config, note=notes.append).load(probe_wasm)
    elapsed = time.monotonic() - started
    assert not app.compiled and app.cache_file.is_file()
    assert app.cache_file.parent == fake_config.cache_dir / "components"
    assert notes == []
    assert elapsed < 5  # a compile takes ~15-25 s


def test_missing_file(fake_host: Host, tmp_path: Path) -> None:
    with pytest.raises(LoadError, match=r"no such file.*llmhost build"):
        fake_host.load(tmp_path / "missing.wasm")


def test_not_a_component(fake_host: Host, tmp_path: Path) -> None:
    junk = tmp_path / "junk.wasm"
    junk.write_bytes(b"\0asm junk")
    with pytest.raises(LoadError, match="not a valid WebAssembly component"):
        fake_host.load(junk)


def test_a_component_without_run(fake_host: Host, tmp_path: Path) -> None:
    wasm = write_component(tmp_path / "norun.wasm", EMPTY_COMPONENT)
    with pytest.raises(LoadError, match=r"does not export `run`.*command"):
        fake_host.load(wasm)


def test_a_component_importing_what_the_host_lacks(fake_host: Host, tmp_path: Path) -> None:
    wat = """
    (component
      (import "acme:db/query@1.0.0" (instance (export "get" (func (param "k" string) (result string)))))
      (core module $m (func (export "run") (result i32) i32.const 0))
      (core instance $i (instantiate $m))
      (func (export "run") (result s32) (canon lift (core func $i "run")))
    )
    """
    wasm = write_component(tmp_path / "needs-db.wasm", wat)
    with pytest.raises(LoadError, match=r"acme:db/query@1.0.0.*does not provide"):
        fake_host.load(wasm)


def test_a_component_nothing_uses_is_freed_and_loads_again_from_disk(tmp_path: Path) -> None:
    """Issue 66: the memory cache held every component for the process's life (`--watch` kept each version's code);
    it holds them only while something uses them."""
    import weakref

    wasm = write_component(tmp_path / "empty.wasm", EMPTY_COMPONENT)
    cache = ComponentCache(create_wasmtime_engine(), tmp_path / "components", note=lambda _: None)
    first = cache.load(wasm)
    freed = weakref.ref(first.component)
    del first
    assert freed() is None  # by reference counting: nothing else held it
    again = cache.load(wasm)
    assert not again.compiled and again.cache_file.is_file()  # deserialized from the disk cache
