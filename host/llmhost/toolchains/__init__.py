"""Guest toolchains, one module per language: Python guests (`app.py`) with componentize-py (`python`), JavaScript
guests (`app.js`) with componentize-js (`javascript`); what a guest directory says about itself (`world`), and the
templates of `llmhost new` (`templates`). Stands apart from the runtime. A directory's language is the entry file it
holds."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def is_js(app_dir: Path) -> bool:
    """A JavaScript guest: `app.js` and no `app.py`."""
    return (app_dir / "app.js").is_file() and not (app_dir / "app.py").is_file()


def build_component(
    app_dir: str | Path,
    output: str | Path,
    world: str | None = None,
    *,
    cache_dir: Path | None = None,
    note: Callable[[str], None] | None = None,
    wit: Path | None = None,
    upgrade: bool = False,
) -> Path:
    """Build the guest in `app_dir` (app.py or app.js) into the component `output`, cached by content. `world`:
    `command` or `http-app`; None reads it from the guest. `upgrade`: resolve a Python guest's dependencies again."""
    from llmhost.toolchains.python import build_python, wit_dir

    app_dir, output = Path(app_dir), Path(output)
    if is_js(app_dir):
        from llmhost.toolchains import javascript

        # A source importing an earlier version (`from "llmhost:llm/llm@0.2.1"`) builds against that version's WIT.
        wit = wit or javascript.source_wit(app_dir, wit_dir())
        return javascript.build_component(app_dir, output, world, wit, cache_dir, note)
    return build_python(app_dir, output, world, wit, cache_dir, note, upgrade)


def detect_world(app_dir: Path) -> str:
    if is_js(app_dir):
        from llmhost.toolchains import javascript

        return javascript.detect_world(app_dir)
    from llmhost.toolchains.world import detect_world as detect_python_world

    return detect_python_world(app_dir)


def bindings(app_dir: Path, output: Path, world: str | None = None, cache_dir: Path | None = None) -> Path:
    """Editor bindings of the guest's world: the `wit_world` Python package, or TypeScript declarations."""
    from llmhost.toolchains.python import bindings as python_bindings
    from llmhost.toolchains.python import wit_dir

    if is_js(app_dir):
        from llmhost.toolchains import javascript

        return javascript.bindings(app_dir, output, world, javascript.source_wit(app_dir, wit_dir()), cache_dir)
    return python_bindings(app_dir, output, world)
