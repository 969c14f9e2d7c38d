"""`llmhost.ray:app`: an app config as a Ray Serve application.

    serve run llmhost.ray:app config=APP.toml                  # Ray's CLI; or, in a Serve config file:
    applications: [{name: llmhost-app, import_path: "llmhost.ray:app", args: {config: /srv/APP.toml}}]

`llmhost serve -c APP.toml --ray` deploys the same app on the config's `[cluster] ray-address` (llmhost/serve_ray)."""

from __future__ import annotations

from typing import Any

from llmhost.serve_ray.build import build


def app(args: dict[str, Any]) -> Any:
    """The bound application of `args["config"]` (Ray calls a builder with the `key=value` arguments as a dict)."""
    return build(args)
