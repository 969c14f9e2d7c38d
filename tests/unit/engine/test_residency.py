"""Models load on demand and unload when idle (engine/local/residency.py, model_pool.py), on the local engine over
the fake decoder: the policy against a brute-force reference, keep-alive, the memory budget's LRU eviction, what
pins a model, one load for concurrent first uses, the budget's wait and its error, the metrics' families, the
config keys and `serve --preload`'s readiness."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from llmhost.config import FakeDecoderEngineConfig, HostConfig, ModelConfig
from llmhost.domain.errors import EngineError
from llmhost.domain.types import InferencingParams
from llmhost.engine.local.engine import LlamaCppEngine
from llmhost.engine.local.fake_decoder import FakeDecoder
from llmhost.engine.local.model import EngineModel
from llmhost.engine.local.residency import KEEP_FOREVER, Resident, evictions, expired, lru_order, next_expiry
from llmhost.engine.observer import Observers, no_observers
from llmhost.shell.metrics import ServeMetrics
from llmhost.shell.probes import Readiness

MB = 1024 * 1024
GREEDY = InferencingParams(max_tokens=4, temperature=0.0, repeat_penalty=1.0)
WAIT_S = 5.0  # the longest any test here waits for a background unload


# --- the pure policy ------------------------------------------------------------------------------------------------
residents = st.lists(
    st.builds(
        Resident,
        name=st.sampled_from("abcdefg"),
        bytes=st.integers(0, 100),
        pins=st.integers(0, 2),
        last_use=st.integers(0, 20).map(float),
        keep_alive_s=st.sampled_from([KEEP_FOREVER, 0.0, 5.0, 10.0]),
        settled=st.booleans(),
    ),
    max_size=6,
    unique_by=lambda r: r.name,
)


@given(residents, st.integers(0, 150), st.integers(0, 400))
def test_evictions_are_the_shortest_lru_run_that_makes_room(found: list[Resident], need: int, budget: int) -> None:
    chosen = evictions(found, need, budget)
    evictable = [r for r in found if r.idle and r.keep_alive_s != KEEP_FOREVER]
    used = sum(r.bytes for r in found)

    def fits(removed: set[str]) -> bool:
        return used - sum(r.bytes for r in found if r.name in removed) + need <= budget

    # Brute force over every set of evictable models: some set fits exactly when the policy finds one.
    some_set_fits = any(
        fits({r.name for r in subset})
        for k in range(len(evictable) + 1)
        for subset in itertools.combinations(evictable, k)
    )
    assert (chosen is not None) == some_set_fits
    if chosen is None:
        return
    assert fits(set(chosen))
    assert set(chosen) <= {r.name for r in evictable}  # never a pinned, loading or kept-forever model
    order = [r.name for r in lru_order(found)]
    assert chosen == order[: len(chosen)]  # least recently used first, no newer one before an older one
    assert not chosen or not fits(set(chosen[:-1]))  # and no more than needed


@given(residents, st.integers(0, 30).map(float))
def test_expired_models_are_the_idle_ones_past_their_keep_alive(found: list[Resident], now: float) -> None:
    names = expired(found, now)
    for r in found:
        due = r.pins == 0 and r.settled and r.keep_alive_s != KEEP_FOREVER and now - r.last_use >= r.keep_alive_s
        assert (r.name in names) == due
    ends = next_expiry(found)
    idle_timed = [r for r in found if r.idle and r.keep_alive_s != KEEP_FOREVER]
    assert ends == (min(r.last_use + r.keep_alive_s for r in idle_timed) if idle_timed else None)


# --- the engine over the fake decoder ---------------------------------------------------------------------------------
class Loads:
    """A fake `load` that counts loads and closes per model, optionally slow."""

    def __init__(self, delay_s: float = 0.0, observers: Observers = no_observers) -> None:
        self.delay_s = delay_s
        self.observers = observers
        self.loads: dict[str, int] = {}
        self.closed: dict[str, int] = {}
        self.lock = threading.Lock()

    def __call__(self, name: str, config: ModelConfig) -> EngineModel:
        time.sleep(self.delay_s)
        with self.lock:
            self.loads[name] = self.loads.get(name, 0) + 1
        decoder = FakeDecoder(n_ctx=64, n_batch=8, n_slots=2)
        closing = decoder.close

        def close() -> None:
            with self.lock:
                self.closed[name] = self.closed.get(name, 0) + 1
            closing()

        decoder.close = close  # type: ignore[method-assign]
        return EngineModel(name, config, decoder, self.observers(name))


def engine_of(
    names: str,
    loads: Loads,
    keep_alive_s: float = 300.0,
    budget_mb: int | None = None,
    observers: Observers = no_observers,
    wait_s: float = WAIT_S,
) -> LlamaCppEngine:
    """Models named by the letters of `names`, 100 MB each."""
    config = ModelConfig(slots=2, context_length=64, batch_size=8, keep_alive_s=keep_alive_s)
    return LlamaCppEngine(
        dict.fromkeys(names, config),
        Path("/nonexistent"),
        load=loads,
        observers=observers,
        memory_budget_mb=budget_mb,
        size=lambda name, config: 100 * MB,
        wait_s=wait_s,
    )


def loaded(engine: LlamaCppEngine) -> set[str]:
    return {s.name for s in engine.residency() if s.state == "loaded"}


def wait_until(condition: Callable[[], bool]) -> bool:
    ends = time.monotonic() + WAIT_S
    while time.monotonic() < ends:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def test_a_model_loads_at_first_use_and_unloads_after_its_keep_alive() -> None:
    loads = Loads()
    engine = engine_of("a", loads, keep_alive_s=0.3)
    try:
        assert loaded(engine) == set() and loads.loads == {}  # nothing at start
        first = engine.infer("a", "hello", GREEDY).text
        assert loaded(engine) == {"a"}
        started = time.monotonic()
        assert wait_until(lambda: loaded(engine) == set())
        assert time.monotonic() - started >= 0.25  # not before its keep-alive
        assert loads.closed == {"a": 1}  # the decoder was closed
        assert engine.infer("a", "hello", GREEDY).text == first  # loaded again, the same output
        assert loads.loads == {"a": 2}
        assert engine.list_models()[0].vocab_size > 0  # still known while unloaded
    finally:
        engine.close()


def test_keep_alive_zero_unloads_at_once_and_minus_one_never() -> None:
    loads = Loads()
    engine = engine_of("a", loads, keep_alive_s=0.0)
    forever = engine_of("b", Loads(), keep_alive_s=KEEP_FOREVER)
    try:
        engine.infer("a", "hi", GREEDY)
        assert wait_until(lambda: loaded(engine) == set())
        forever.infer("b", "hi", GREEDY)
        time.sleep(0.2)
        assert loaded(forever) == {"b"} and forever.unload_idle() == []
    finally:
        engine.close()
        forever.close()


def test_a_budget_for_two_of_three_models_unloads_the_least_recently_used() -> None:
    loads = Loads()
    engine = engine_of("abc", loads, budget_mb=250)
    try:
        engine.infer("a", "x", GREEDY)
        engine.infer("b", "x", GREEDY)
        engine.infer("a", "x", GREEDY)  # a is now the more recent
        engine.infer("c", "x", GREEDY)  # no room for c: b goes
        assert loaded(engine) == {"a", "c"} and loads.closed == {"b": 1}
        engine.infer("b", "x", GREEDY)  # and a goes for b
        assert loaded(engine) == {"b", "c"} and loads.closed == {"a": 1, "b": 1}
    finally:
        engine.close()


def test_an_open_sequence_pins_its_model_until_closed() -> None:
    loads = Loads()
    engine = engine_of("ab", loads, keep_alive_s=0.0, budget_mb=150, wait_s=0.3)
    try:
        sequence = engine.open_sequence("a")
        sequence.append("abc")
        fork = sequence.fork()
        sequence.close()
        time.sleep(0.1)
        assert loaded(engine) == {"a"}  # keep-alive 0, yet its fork still pins it
        with pytest.raises(EngineError) as refused:  # and b cannot take its room: it waits, then fails
            engine.infer("b", "x", GREEDY)
        message = str(refused.value)
        assert "memory-budget-mb = 150" in message and "a (100 MB, 1 in use)" in message, message
        fork.close()
        assert wait_until(lambda: loaded(engine) == set())
        engine.infer("b", "x", GREEDY)
        assert loads.loads == {"a": 1, "b": 1}
    finally:
        engine.close()


def test_a_request_waiting_for_room_runs_once_a_holder_goes_idle() -> None:
    engine = engine_of("ab", Loads(), budget_mb=150)
    try:
        sequence = engine.open_sequence("a")
        threading.Timer(0.3, sequence.close).start()
        started = time.monotonic()
        assert engine.infer("b", "x", GREEDY).finish_reason
        assert time.monotonic() - started >= 0.25 and loaded(engine) == {"b"}
    finally:
        engine.close()


def test_a_model_larger_than_the_whole_budget_fails_at_once() -> None:
    engine = engine_of("a", Loads(), budget_mb=50)
    try:
        with pytest.raises(EngineError, match=r"more than the whole `\[engine\] memory-budget-mb = 50`"):
            engine.infer("a", "x", GREEDY)
    finally:
        engine.close()


def test_concurrent_first_requests_load_the_model_once() -> None:
    loads = Loads(delay_s=0.3)
    engine = engine_of("a", loads)
    try:
        results: list[str] = []
        threads = [
            threading.Thread(target=lambda: results.append(engine.infer("a", "hi", GREEDY).text)) for _ in range(8)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=WAIT_S)
        assert len(results) == 8 and len(set(results)) == 1
        assert loads.loads == {"a": 1}
    finally:
        engine.close()


def test_metrics_show_loaded_memory_loads_and_unloads() -> None:
    metrics = ServeMetrics(["app"], ["a"])
    engine = engine_of("a", Loads(observers=metrics.observer), observers=metrics.observer)

    def sample(name: str) -> float:
        text = metrics.exposition().decode()
        found = {
            s.name: s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.labels == {"model": "a"}
        }
        return found[name]

    try:
        assert sample("llmhost_model_loaded") == 0 and sample("llmhost_model_memory_bytes") == 0  # there from the start
        engine.infer("a", "x", GREEDY)
        assert sample("llmhost_model_loaded") == 1 and sample("llmhost_model_memory_bytes") == 100 * MB
        assert sample("llmhost_slots") == 2  # the loaded model's gauges are read
        assert engine.unload_idle(["a"]) == ["a"]
        assert sample("llmhost_model_loaded") == 0 and sample("llmhost_model_memory_bytes") == 0
        assert sample("llmhost_model_loads_total") == 1 and sample("llmhost_model_unloads_total") == 1
        text = metrics.exposition().decode()
        assert 'llmhost_slots{model="a"}' not in text  # an unloaded model's engine gauges are gone
    finally:
        engine.close()


def test_the_config_keys_parse_and_refuse_bad_values() -> None:
    assert ModelConfig().keep_alive_s == 300
    assert ModelConfig.model_validate({"keep-alive-s": -1}).keep_alive_s == KEEP_FOREVER
    with pytest.raises(ValueError, match="keep-alive-s"):
        ModelConfig.model_validate({"keep-alive-s": -0.5})
    config = HostConfig.model_validate({"engine": {"kind": "llama-cpp", "memory-budget-mb": 512}})
    assert config.engine.memory_budget_mb == 512  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="memory_budget_mb|memory-budget-mb"):
        HostConfig.model_validate({"engine": {"kind": "llama-cpp", "memory-budget-mb": 0}})


def test_preload_loads_before_ready_and_readyz_names_what_loads(tmp_path: Path) -> None:
    from llmhost.engine.registry import create_registry
    from llmhost.serve.server import _preload, preload_problem
    from llmhost.shell.config import ServeSettings

    engine = FakeDecoderEngineConfig()
    host = HostConfig(engine=engine, models={"a": ModelConfig(aliases=("alias-a",)), "b": ModelConfig()})
    settings = ServeSettings(host, ("127.0.0.1", 0), 1, 1.0, components={}, routes={})
    assert preload_problem(settings, ["a", "alias-a"]) is None
    assert "'zzz' is not a configured model (known: a, b)" in (preload_problem(settings, ["zzz"]) or "")
    registry = create_registry(host)
    readiness = Readiness()
    seen: list[str] = []
    local = registry.engine("a")
    assert isinstance(local, LlamaCppEngine)
    original = local._load_model

    def watched(name: str, config: ModelConfig) -> EngineModel:
        seen.append(readiness.not_ready())
        return original(name, config)

    local._pool._load = watched
    try:
        _preload(settings, registry, readiness, ["alias-a", "b"])
        assert seen == ["not ready: loading a, b\n", "not ready: loading b\n"]
        assert readiness.loading == [] and loaded(local) == {"a", "b"}
    finally:
        registry.close()
