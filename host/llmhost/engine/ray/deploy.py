"""Deploying a `backend = "ray"` model, or attaching to the deployment another host made with the same config.

A deployment outlives the host that made it: every host attached to the cluster with the same model config shares
it (a fleet). A host with another config for the model is refused, naming the keys that differ; it never redeploys
another host's model. `serve.delete("llmhost-model-NAME")` removes one (Ray's CLI has no per-app delete)."""

from __future__ import annotations

import asyncio
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from llmhost.config import ConfigError, EngineConfig, ModelConfig
from llmhost.engine.ray.protocol import DEPLOYMENT, ROUTER_CLASS, Fingerprint, app_name, differing_keys, fingerprint

# Serve's own logs of every call would cost the replicas time per token: warnings only.
REPLICA_LOGGING = {"log_level": "WARNING", "enable_access_log": False}
# A replica that stops answering Serve's health check is replaced (Ray's defaults: every 10 s, 30 s timeout).
HEALTH_CHECK_PERIOD_S = 2.0
HEALTH_CHECK_TIMEOUT_S = 10.0
GRACEFUL_SHUTDOWN_S = 5.0
MIN_LOOK_BACK_S, MAX_LOOK_BACK_S = 1.0, 30.0


def deployment_options(model: ModelConfig) -> dict[str, Any]:
    """The model's keys as Ray Serve deployment options."""
    from ray.serve.config import RequestRouterConfig

    options: dict[str, Any] = {
        "name": DEPLOYMENT,
        "max_ongoing_requests": model.slots,
        "ray_actor_options": {"num_cpus": model.replica_cpus, "num_gpus": model.replica_gpus},
        "request_router_config": RequestRouterConfig(request_router_class=ROUTER_CLASS),  # type: ignore[arg-type]
        "health_check_period_s": HEALTH_CHECK_PERIOD_S,
        "health_check_timeout_s": HEALTH_CHECK_TIMEOUT_S,
        "graceful_shutdown_timeout_s": GRACEFUL_SHUTDOWN_S,
    }
    if model.replicas is None and (model.min_replicas is not None or model.max_replicas is not None):
        low = model.min_replicas if model.min_replicas is not None else 1
        look_back = min(max(model.upscale_delay_s, MIN_LOOK_BACK_S), MAX_LOOK_BACK_S)
        options["autoscaling_config"] = {
            "min_replicas": low,
            "initial_replicas": max(low, 1),
            "max_replicas": model.max_replicas if model.max_replicas is not None else max(low, 1),
            "target_ongoing_requests": model.target_ongoing_requests or model.slots,
            "upscale_delay_s": model.upscale_delay_s,
            # Load is averaged over this window: as long as the upscale delay, within Ray's bounds of sense.
            "look_back_period_s": look_back,
            "metrics_interval_s": look_back / 2,  # Ray wants at least two samples in the window
            "downscale_delay_s": model.downscale_delay_s,
        }
    else:
        options["num_replicas"] = model.replicas or 1
    return options


def deploy_or_attach(name: str, model: ModelConfig, engine: EngineConfig, timeout_s: float) -> Any:
    """The model's deployment handle: attached when the cluster runs it with this config, else deployed now (and
    waited for: its replicas load the model)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _deploy_or_attach(name, model, engine, timeout_s)
    # On an event loop's thread (a host made in `llmhost.ray:app`'s ingress replica, whose constructor Serve runs
    # on its loop), Serve refuses blocking calls: they are made from another thread, and waited for here.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="llmhost-ray-deploy") as pool:
        return pool.submit(_deploy_or_attach, name, model, engine, timeout_s).result()


def _deploy_or_attach(name: str, model: ModelConfig, engine: EngineConfig, timeout_s: float) -> Any:
    from ray import serve

    from llmhost.engine.ray.replica import ModelReplica

    app = app_name(name)
    ours = fingerprint(model, engine)
    if app in serve.status().applications:
        handle = serve.get_app_handle(app)
        theirs: Fingerprint = handle.fingerprint.remote().result(timeout_s=timeout_s)
        differing = differing_keys(ours, theirs)
        if differing:
            raise ConfigError(
                f"model {name!r}: the Ray cluster already runs it as {app!r} with another config (differing: "
                f"{', '.join(differing)}); use the same config, another model name, or remove it (Ray's Python API: "
                f'`serve.delete("{app}")`, docs/scale-out.md)'
            )
        return handle
    deployment = serve.deployment(ModelReplica).options(**deployment_options(model))  # type: ignore[attr-defined]
    try:
        return serve.run(deployment.bind(name, ours), name=app, route_prefix=None, logging_config=REPLICA_LOGGING)
    except Exception as e:  # noqa: BLE001 (Ray's errors carry the replica's traceback: one line, and no leftovers)
        reason = failure_reason(app) or str(e)
        serve.delete(app)
        raise ConfigError(f"model {name!r}: its Ray deployment failed: {last_error_line(reason)}") from None


_ERROR_LINE = re.compile(r"^(?:[\w.]+\.)?(\w+(?:Error|Exception)): (.+)$")


def failure_reason(app: str) -> str:
    """The replica's traceback, as Serve's status keeps it."""
    from ray import serve

    found = serve.status().applications.get(app)
    if found is None:
        return ""
    return "\n".join(d.message for d in found.deployments.values() if d.message) or found.message


def last_error_line(text: str) -> str:
    """The exception line of a traceback (its last `Name: message` line), without the module path."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        matched = _ERROR_LINE.match(line)
        if matched:
            return f"{matched.group(1)}: {matched.group(2)}"
    return lines[-1] if lines else "unknown error"
