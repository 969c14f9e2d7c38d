"""Guest directories as component sources: `serve DIR`, and `[components.NAME] source = "."` in an app config.

Each is built through the toolchains (`llmhost build`'s, with its content-keyed build cache) into the cache's
`dev/` folder before the server loads it; `--watch` builds it again the same way when its sources change.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from llmhost.config import ConfigError
from llmhost.toolchains.guest_dirs import build_guest


def build_sources(
    sources: Mapping[str, Path],
    cache_dir: Path,
    origin: str,
    world: str | None,
    note: Callable[[str], None] | None = None,
    single: bool = False,
) -> dict[str, Path]:
    """Build every component whose source (`sources`: name -> `source`) is a guest directory; returns each such
    component's name -> its built component. `single`: the one-component form (`serve DIR`), whose errors name no
    config key."""
    built: dict[str, Path] = {}
    for name, source in sources.items():
        if not source.is_dir():
            continue
        try:
            built[name] = build_guest(source, world, cache_dir, note)
        except ConfigError as error:
            if single:
                raise
            raise ConfigError(f"{origin}: `components.{name}.source`: {error}") from None
    return built
