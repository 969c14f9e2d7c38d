"""A guest directory built as the CLI builds a DIR (`serve DIR`, an app config's `source`, `Host.load(DIR)`,
`component_app(host, DIR)`): its content-keyed build, written to one file per directory in the cache's `dev/`."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

from llmhost.config import ConfigError

# The command that serves each world, named when a guest of another world is given.
COMMAND_OF_WORLD = {"http-app": "serve", "command": "run"}


def output_for(app_dir: Path, cache_dir: Path) -> Path:
    """Where a guest directory's component is written: one file per directory (its name, and a digest of its path
    so that two `app/` folders never share one)."""
    resolved = app_dir.resolve()
    digest = hashlib.sha256(str(resolved).encode()).hexdigest()[:10]
    return cache_dir / "dev" / f"{resolved.name or 'app'}-{digest}.wasm"


def build_guest(app_dir: Path, world: str | None, cache_dir: Path, note: Callable[[str], None] | None) -> Path:
    """Build the guest in `app_dir` when its sources changed (else the cached build); returns the component.
    `world`: the one the command serves (None: `mcp`, whose guests declare their own). Raises `BuildError` (its text
    names the file and line of a syntax or import error) or `ConfigError` (a guest of another world)."""
    from llmhost.toolchains import build_component, detect_world, is_js
    from llmhost.toolchains.world import check_sources

    if not is_js(app_dir):
        check_sources(app_dir)  # a syntax error as `llmhost build` reports it (file:line:column), before app.py is read
    found = detect_world(app_dir)
    if world is not None and found != world:
        command = COMMAND_OF_WORLD.get(found, "mcp")
        raise ConfigError(f"{app_dir} is a guest of the `{found}` world; use `llmhost {command}`")
    return build_component(app_dir, output_for(app_dir, cache_dir), found, cache_dir=cache_dir, note=note)
