"""Each model's residency now, as guests (WIT `list-model-status`, 0.2.5), openai-compat's `/v1/models`, the metrics
listener's `/models` and `llmhost models --server` show it: loaded or not, the memory it holds, its last use, when it
unloads. Read from the local engine's model pool (engine/local/model_pool.py) without loading or touching any model.

A model served elsewhere (`backend = "openai"`: another server; `"ray"`: a Ray Serve deployment, whose replicas load
it when deployed) is `remote`: that server loads and unloads it and this host holds none of its memory, and nothing
is asked of the server, so a status never blocks. An engine that keeps its models with no residency to report (the
deterministic fake) shows them `loaded`, holding nothing, for good.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

from llmhost.config import KEEP_ALIVE_FOREVER

if TYPE_CHECKING:
    from llmhost.engine.local.model_pool import ModelState
    from llmhost.engine.registry import Registry

StatusState = Literal["unloaded", "loading", "loaded", "unloading", "remote"]
STATES: tuple[StatusState, ...] = ("unloaded", "loading", "loaded", "unloading", "remote")
REMOTE_BACKENDS = ("openai", "ray")


@dataclass(frozen=True)
class ModelStatus:
    name: str
    state: StatusState
    memory_bytes: int  # while loaded (or reserved while loading or unloading), else 0
    in_use: int  # generations, open sequences and calls that pin it now
    idle_s: float | None  # since its last use, while loaded and not in use
    keep_alive_s: float | None  # None: kept until the host stops, or remote

    @property
    def loaded(self) -> bool:
        return self.state == "loaded"

    @property
    def unload_in_s(self) -> float | None:
        """Seconds until it unloads if it stays idle (sooner when another model needs its room)."""
        if self.idle_s is None or self.keep_alive_s is None:
            return None
        return max(0.0, self.keep_alive_s - self.idle_s)

    def to_json(self) -> dict[str, Any]:
        """The metrics listener's `/models` entry (what `llmhost models --server` reads back with `from_json`)."""
        return {
            "name": self.name,
            "state": self.state,
            "loaded": self.loaded,
            "memory_bytes": self.memory_bytes,
            "in_use": self.in_use,
            "idle_s": self.idle_s,
            "keep_alive_s": self.keep_alive_s,
            "unload_in_s": self.unload_in_s,
        }

    @classmethod
    def from_json(cls, entry: Mapping[str, Any]) -> ModelStatus:
        """An entry of `/models`; `ValueError` naming what is wrong in one that is not (another server's answer)."""
        state = entry.get("state")
        if not isinstance(entry.get("name"), str) or state not in STATES:
            raise ValueError(f"not a model status: {dict(entry)!r:.200}")
        return cls(
            name=entry["name"],
            state=cast(StatusState, state),
            memory_bytes=int(entry.get("memory_bytes") or 0),
            in_use=int(entry.get("in_use") or 0),
            idle_s=_seconds(entry.get("idle_s")),
            keep_alive_s=_seconds(entry.get("keep_alive_s")),
        )


def _seconds(value: Any) -> float | None:
    return None if value is None else float(value)


def from_pool(state: ModelState) -> ModelStatus:
    keep = None if state.keep_alive_s == KEEP_ALIVE_FOREVER else state.keep_alive_s
    return ModelStatus(state.name, state.state, state.bytes, state.pins, state.idle_s, keep)


def model_statuses(registry: Registry) -> list[ModelStatus]:
    """Every model of `registry`, in its order; each engine's residency read once."""
    pools: dict[int, dict[str, ModelState]] = {}
    statuses = []
    for name in registry.model_names():
        engine = registry.engine(name)
        residency = getattr(engine, "residency", None)  # the local engine's; a remote engine has none
        if registry.config(name).backend in REMOTE_BACKENDS:
            statuses.append(ModelStatus(name, "remote", 0, 0, None, None))
        elif residency is None:
            statuses.append(ModelStatus(name, "loaded", 0, 0, None, None))
        else:
            if id(engine) not in pools:
                pools[id(engine)] = {state.name: state for state in residency()}
            statuses.append(from_pool(pools[id(engine)][name]))
    return statuses
