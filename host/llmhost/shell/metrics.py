"""`llmhost serve`'s Prometheus metrics: the families, in a registry of their own (two servers in one process do not
clash), fed by the server (requests, guest failures) and by each model's observer (engine/observer.py).

Cost: nothing per token. A request costs a counter and a histogram observation, a generation three observations,
all on children bound once per label set; what the engine keeps as plain numbers (slots in use, the admission
queue, decode steps and rows, swapped bytes) is read only when Prometheus scrapes. `prometheus_client` is imported
only when metrics are on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from llmhost.domain.limits import ADMISSION_WAIT_BUCKETS, FIRST_TOKEN_BUCKETS, REQUEST_DURATION_BUCKETS
from llmhost.engine.observer import ModelGauges, ModelObserver
from llmhost.shell.guest import FAILURE_KINDS

# The component label of a request no route matched (Prometheus reads an empty label as no label).
NO_COMPONENT = ""


class RequestObserver:
    """What the server reports per request; this base ignores everything (metrics off)."""

    def request(self, component: str, status: int, seconds: float) -> None:
        """A request ended with `status` (499: its client left first) after `seconds`."""

    def failure(self, component: str, kind: str) -> None:
        """A request's guest failed: `kind` is one of `component.FAILURE_KINDS`."""


class ServeMetrics(RequestObserver):
    """Every family of the server; `observer(model)` is each model's engine observer."""

    def __init__(self, components: Iterable[str], models: Iterable[str]) -> None:
        import prometheus_client as prom

        names = list(components)
        # `_created` series (one more per labelled child) say when a child appeared, which no dashboard here needs.
        prom.disable_created_metrics()
        self.registry = registry = prom.CollectorRegistry()
        self._requests = prom.Counter(
            "llmhost_requests_total", "Requests answered, by component and HTTP status (499: the client left first).",
            ["component", "status"], registry=registry,
        )  # fmt: skip
        self._duration = prom.Histogram(
            "llmhost_request_duration_seconds", "Time from a request's arrival to the end of its response.",
            ["component"], buckets=REQUEST_DURATION_BUCKETS, registry=registry,
        )  # fmt: skip
        self._failures = prom.Counter(
            "llmhost_guest_failures_total", "Requests whose guest trapped, ran past its deadline, ran out of memory, "
            "or logged more than max-log-bytes.", ["component", "kind"], registry=registry,
        )  # fmt: skip
        self.prompt_tokens = prom.Counter(
            "llmhost_prompt_tokens_total", "Prompt tokens of the generations and embeddings calls that ran.", ["model"],
            registry=registry,
        )  # fmt: skip
        self.generated_tokens = prom.Counter(
            "llmhost_generated_tokens_total", "Tokens generated (sampled), as in the responses' usage.", ["model"],
            registry=registry,
        )  # fmt: skip
        self.first_token = prom.Histogram(
            "llmhost_time_to_first_token_seconds", "Time from a generation's submission to its first token "
            "(admission wait and prefill).", ["model"], buckets=FIRST_TOKEN_BUCKETS, registry=registry,
        )  # fmt: skip
        self.admission_wait = prom.Histogram(
            "llmhost_admission_wait_seconds", "Time work waited in its model's admission queue for a slot.",
            ["model"], buckets=ADMISSION_WAIT_BUCKETS, registry=registry,
        )  # fmt: skip
        self.residency = _ResidencyFamilies(prom, registry)
        self._lock = threading.Lock()
        # Children bound once: a request looks up one dict entry, a generation none.
        self._request_children: dict[tuple[str, int], Any] = {}
        self._duration_children = {c: self._duration.labels(component=c) for c in [*names, NO_COMPONENT]}
        self._failure_children = {
            (c, k): self._failures.labels(component=c, kind=k) for c in names for k in FAILURE_KINDS
        }
        self._models = {name: _ModelMetrics(self, name) for name in models}
        registry.register(_EngineCollector(self._models))

    def observer(self, model: str) -> ModelObserver:
        """`model`'s observer (engine.observer.Observers): bound to the model's children."""
        with self._lock:
            if model not in self._models:
                self._models[model] = _ModelMetrics(self, model)
            return self._models[model]

    def request(self, component: str, status: int, seconds: float) -> None:
        child = self._request_children.get((component, status))
        if child is None:
            with self._lock:
                child = self._request_children.setdefault(
                    (component, status), self._requests.labels(component=component, status=str(status))
                )
        child.inc()
        duration = self._duration_children.get(component)
        if duration is not None:
            duration.observe(seconds)

    def failure(self, component: str, kind: str) -> None:
        child = self._failure_children.get((component, kind))
        if child is not None:
            child.inc()

    def exposition(self) -> bytes:
        """The text format, as /metrics serves it (tests, benchmarks)."""
        import prometheus_client as prom

        return bytes(prom.generate_latest(self.registry))


class _ModelMetrics(ModelObserver):
    """One model's observer: the children of its label value, bound once."""

    def __init__(self, metrics: ServeMetrics, model: str) -> None:
        self._prompt = metrics.prompt_tokens.labels(model=model)
        self._generated = metrics.generated_tokens.labels(model=model)
        self._first = metrics.first_token.labels(model=model)
        self._wait = metrics.admission_wait.labels(model=model)
        self.read: Callable[[], ModelGauges] | None = None  # set when the model is loaded
        self._residency = metrics.residency.bound(model)

    def admission_wait(self, seconds: float) -> None:
        self._wait.observe(seconds)

    def first_token(self, seconds: float) -> None:
        self._first.observe(seconds)

    def generation_done(self, prompt_tokens: int, generated_tokens: int) -> None:
        self._prompt.inc(prompt_tokens)
        self._generated.inc(generated_tokens)

    def embeddings_done(self, prompt_tokens: int) -> None:
        self._prompt.inc(prompt_tokens)

    def attach(self, read: Callable[[], ModelGauges]) -> None:
        self.read = read

    def loaded(self, memory_bytes: int) -> None:
        self._residency.loaded(memory_bytes)

    def unloaded(self) -> None:
        self.read = None  # the closed model's gauges are not read again
        self._residency.unloaded()


class _ResidencyFamilies:
    """Which models are loaded and what they hold (engine/local/model_pool.py): set when a model loads or unloads,
    so a scrape reads plain values."""

    def __init__(self, prom: Any, registry: Any) -> None:
        self.loaded = prom.Gauge(
            "llmhost_model_loaded", "1 while the model is loaded, else 0 (models load on first use and unload when "
            "idle past keep-alive-s, or for room under memory-budget-mb).", ["model"], registry=registry,
        )  # fmt: skip
        self.memory = prom.Gauge(
            "llmhost_model_memory_bytes", "Memory the loaded model holds: its GGUF file plus its KV cache "
            "(an estimate; 0 while unloaded).", ["model"], registry=registry,
        )  # fmt: skip
        self.loads = prom.Counter(
            "llmhost_model_loads", "Times the model was loaded.", ["model"], registry=registry
        )  # fmt: skip
        self.unloads = prom.Counter(
            "llmhost_model_unloads", "Times the model was unloaded (idle past keep-alive-s, or for room under "
            "memory-budget-mb).", ["model"], registry=registry,
        )  # fmt: skip

    def bound(self, model: str) -> _ModelResidency:
        return _ModelResidency(self, model)


class _ModelResidency:
    def __init__(self, families: _ResidencyFamilies, model: str) -> None:
        self._loaded = families.loaded.labels(model=model)
        self._memory = families.memory.labels(model=model)
        self._loads = families.loads.labels(model=model)
        self._unloads = families.unloads.labels(model=model)

    def loaded(self, memory_bytes: int) -> None:
        self._loaded.set(1)
        self._memory.set(memory_bytes)
        self._loads.inc()

    def unloaded(self) -> None:
        self._loaded.set(0)
        self._memory.set(0)
        self._unloads.inc()


# The families read from the engine when scraped: (name, help, kind, the field of `ModelGauges`).
_ENGINE_FAMILIES = (
    ("llmhost_admission_waiting", "Work waiting in the model's admission queue now.", "gauge", "admission_waiting"),
    ("llmhost_slots_busy", "Slots held by a generating (or reserved) sequence now.", "gauge", "slots_busy"),
    ("llmhost_slots", "Slots configured (models.NAME.slots).", "gauge", "slots"),
    ("llmhost_swapped_bytes", "KV state of swapped-out sequences in host memory now.", "gauge", "swapped_bytes"),
    ("llmhost_decode_steps", "Decode steps run (one batch each).", "counter", "decode_steps"),
    ("llmhost_decode_rows", "Sequences decoded over all steps (rows / steps: the mean batch size).", "counter",
     "decode_rows"),
)  # fmt: skip


class _EngineCollector:
    """The engine's gauges and step counters, read from each loaded model at scrape time (a model not loaded yet
    has no samples)."""

    def __init__(self, models: dict[str, _ModelMetrics]) -> None:
        self._models = models

    def describe(self) -> list[Any]:
        return list(self._families({}))

    def collect(self) -> Iterator[Any]:
        gauges = {name: m.read() for name, m in list(self._models.items()) if m.read is not None}
        yield from self._families(gauges)

    @staticmethod
    def _families(gauges: dict[str, ModelGauges]) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        for name, text, kind, field in _ENGINE_FAMILIES:
            family_type = GaugeMetricFamily if kind == "gauge" else CounterMetricFamily
            family = family_type(name, text, labels=["model"])
            for model, values in gauges.items():
                family.add_metric([model], getattr(values, field))
            yield family
