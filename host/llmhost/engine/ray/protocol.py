"""What the host and a model's replicas exchange over Ray, and the constants both sides share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmhost.config import EngineConfig, ModelConfig
from llmhost.domain.errors import LlmError

# Ray Serve application names: one per model, so that each model is deployed, shared and removed on its own
# (`serve.delete("llmhost-model-NAME")`). The ingress app (`llmhost.ray:app`) is `llmhost-app` by default.
MODEL_APP_PREFIX = "llmhost-model-"
DEPLOYMENT = "ModelReplica"
NAMESPACE = "serve"  # Serve's own: `serve status` and `serve.delete` see these apps
ROUTER_CLASS = "llmhost.engine.ray.router:AffinityRouter"

# A replica answers a call on a sequence it does not hold with this: the host then sends the tokens to rebuild it.
LOST = "llmhost-sequence-lost"
# A sequence no host touched for this long is closed on its replica (its host is gone).
SEQUENCE_IDLE_S = 3600.0
# Stream events sent in one Ray message at most (a burst: what a replica generated while the host read the last).
STREAM_BURST_MAX = 64
# Requests whose prompts start with the same this-many characters share an affinity key (router.py).
AFFINITY_PREFIX_CHARS = 256

Fingerprint = dict[str, Any]  # {"model": ..., "engine": ...}: what a deployment was made from


@dataclass
class Outcome:
    """A replica's answer: a value, or the `LlmError` the local engine raised; `replica` names who answered;
    `tokens` is the sequence's token ids after a call that changed them (the host keeps them to rebuild it)."""

    value: Any = None
    error: LlmError | None = None
    replica: str = ""
    tokens: list[int] | None = None


def app_name(model: str) -> str:
    return MODEL_APP_PREFIX + model


def fingerprint(model: ModelConfig, engine: EngineConfig) -> Fingerprint:
    """The config a model's deployment is made from: hosts with equal fingerprints share it (a fleet)."""
    # Keys at their defaults are left out: the replica validates the model again from this (as a config file's).
    return {
        "model": model.model_dump(mode="json", by_alias=True, exclude_defaults=True),
        "engine": engine.model_dump(mode="json", by_alias=True, exclude_defaults=True) | {"kind": engine.kind},
    }


def differing_keys(ours: Fingerprint, theirs: Fingerprint) -> list[str]:
    keys = []
    for section in ("model", "engine"):
        a, b = ours.get(section, {}), theirs.get(section, {})
        prefix = "engine." if section == "engine" else ""
        keys += [prefix + key for key in sorted(set(a) | set(b)) if a.get(key) != b.get(key)]
    return keys


def local_model_config(model: ModelConfig) -> ModelConfig:
    """The model as its replicas run it: the local engine, with the same keys."""
    return model.model_copy(update={"backend": "llama-cpp"})


def affinity_key(prompt: str) -> str:
    return prompt[:AFFINITY_PREFIX_CHARS]
