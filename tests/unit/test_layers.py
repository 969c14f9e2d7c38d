"""The package's layering (docs/architecture.md): every module imports only layers below its own, type-only and
function-local imports included, so there is no import circle and the folders read top-down."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "host" / "llmhost"
# Bottom up. `toolchains` and `guest_sdk` stand apart: only the entry points above `api` use the toolchains.
# `shell` is what the two servers share (config, HTTP front, probes, metrics, watch, guest failures, hosting); above
# it, `serve` (the http-app world, with `asgi`, `serve_ray` and `ray` on it) and `mcp` stand side by side.
LAYERS = [
    *("domain", "config", "telemetry", "engine", "chat", "run", "grants", "runtime", "interfaces"),
    *("api", "aio", "shell", "serve", "asgi", "serve_ray", "ray", "mcp", "cli"),
]
APART = {"toolchains": {"domain", "config"}, "guest_sdk": set()}
USERS_OF_TOOLCHAINS = {"api", "aio", "shell", "asgi", "mcp", "cli"}
# Layers below in LAYERS' order that a layer must not import all the same: `mcp` uses the shell, not the http-app
# world.
BESIDE = {"mcp": {"serve", "asgi", "serve_ray", "ray"}}


def top_of(module: str) -> str:
    """The layer of `llmhost.X.Y` (X), or "" for the package itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def imports_of(path: Path) -> set[str]:
    """Every `llmhost...` module `path` imports, wherever the import stands."""
    module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            if name.startswith("llmhost"):
                for alias in node.names:  # `from llmhost.runtime import abi` imports the module llmhost.runtime.abi
                    sub = f"{name}.{alias.name}"
                    is_module = (PACKAGE.parent / sub.replace(".", "/")).with_suffix(".py").is_file()
                    found.add(sub if is_module or name == "llmhost" else name)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("llmhost"))
    return found


def test_every_module_imports_only_layers_below_its_own() -> None:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "guest_sdk" in path.parts:
            continue
        own = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        if own == "__init__":
            continue  # the package's lazy re-exports of the public API
        for target in imports_of(path):
            layer = top_of(target)
            if layer == own or layer == "":
                continue
            if own in APART:
                ok = layer in APART[own]
            elif layer in BESIDE.get(own, set()):
                ok = False
            elif layer == "toolchains":
                ok = own in USERS_OF_TOOLCHAINS
            else:
                ok = layer in LAYERS and LAYERS.index(layer) < LAYERS.index(own)
            if not ok:
                wrong.append(f"{path.relative_to(PACKAGE)} imports {target}")
    assert wrong == []


def test_no_import_circle_among_the_modules() -> None:
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if "guest_sdk" in path.parts or path.name == "__init__.py":
            continue
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        graph[module] = imports_of(path)
    modules = set(graph)
    edges = {m: {t for t in targets if t in modules and t != m} for m, targets in graph.items()}
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(node: str, stack: list[str]) -> bool:
        state[node] = 1
        for nxt in edges[node]:
            if state.get(nxt) == 1:
                cycle.extend([*stack[stack.index(nxt) :], nxt] if nxt in stack else [node, nxt])
                return True
            if nxt not in state and visit(nxt, [*stack, nxt]):
                return True
        state[node] = 2
        return False

    for module in sorted(modules):
        if module not in state and visit(module, [module]):
            break
    assert cycle == []
