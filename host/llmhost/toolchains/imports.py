"""Imports anywhere in a Python guest: found at build time, imported while componentize-py snapshots the guest.

componentize-py runs the guest's entry module at build time and keeps only the modules imported then: an `import`
inside a function, of the standard library included, fails at run time. So the build finds every module the app's
own files import, wherever they do (functions, methods, `try` blocks, conditionals, `importlib.import_module` of a
literal name), and the generated entry module imports each of them before the app, each guarded so that one failure
does not hide the others. A module that cannot be imported fails the build, naming it, the file and line that
import it, and why; one imported inside a `try` that catches `ImportError` is optional (a fallback's speedups).
Names no scan can see (`__import__(name)` on a computed name) go in `[tool.llmhost] include` of the guest's
pyproject.toml; a `ModuleNotFoundError` at run time names that key.

The guest's installed dependencies are scanned the same way (`scan_dependencies`): from each module the guest
imports, every module their files import, inside functions too (jinja2 imports `jinja2.debug` only when it renders
an error), all optional (a dependency's own fallbacks and platform branches may fail here). A dependency package
that imports modules by a computed name (markdown's extensions, dateutil's lazy submodules) gets all its modules.
Every `encodings` codec is imported too: C code looks codecs up by name (`unicode-escape`), which no scan sees.
"""

from __future__ import annotations

import ast
import json
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from llmhost.toolchains.errors import BuildError
from llmhost.toolchains.world import parse

# The modules every guest gets imported: the SDK's (its modules import others lazily, inside functions).
SDK_MODULES = (
    "llmhost_guest",
    "llmhost_guest.llm",
    "llmhost_guest.sequence",
    "llmhost_guest.kv",
    "llmhost_guest.http",
    "llmhost_guest.config",
)
_CATCHES_IMPORT = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}
_SKIPPED_DIRS = {"__pycache__", ".git", ".venv", "venv", "node_modules", "build", "dist"}
INCLUDE_KEY = "[tool.llmhost] include"
# A dependency's modules never imported for the snapshot, even when its package imports its modules by computed
# names: a script's entry point (runs on import) and test suites.
_NOT_IMPORTED = {"__main__", "tests", "test", "testing", "conftest"}


@dataclass(frozen=True)
class ImportSite:
    module: str  # absolute dotted name
    where: str  # "file.py:LINE", relative to the guest directory
    optional: bool  # inside a try that catches ImportError: a failure is the app's own fallback


def _own_file(app_dir: Path, module: str) -> Path | None:
    """The guest's own file for `module` (a module or a package in its directory), if it is one."""
    base = app_dir.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file() and not _SKIPPED_DIRS.intersection(path.relative_to(app_dir).parts[:-1]):
            return path
    return None


def _module_of(app_dir: Path, path: Path) -> str:
    parts = list(path.relative_to(app_dir).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(package: str, level: int, module: str | None) -> str | None:
    """An import's absolute name; `package`: the importing module's package (relative imports)."""
    if level == 0:
        return module
    base = package.split(".") if package else []
    if level - 1 > len(base):
        return None
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base) or None


class _Finder(ast.NodeVisitor):
    """`optional`: the whole file was reached only through optional imports (its imports are optional too)."""

    def __init__(self, package: str, where: str, optional: bool = False) -> None:
        self.package, self.where = package, where
        self.sites: list[ImportSite] = []
        # `from M import N`: N may be a submodule or a name in M, so it is tried (optional); when N is a file of the
        # guest's own, its import is as required as the statement (this context's optionality).
        self.names: dict[str, bool] = {}
        self._guarded = int(optional)
        self.computed = False  # an `import_module`/`__import__` of a computed name (a package loading plugins)

    def visit_If(self, node: ast.If) -> None:  # noqa: N802
        # `if TYPE_CHECKING:` imports never run; other conditional imports (a platform's, a version's) may fail here
        # without harm: imported when they can be, never failing the build.
        test = node.test
        if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
        ):
            for other in node.orelse:
                self.visit(other)
            return
        self._guarded += 1
        self.generic_visit(node)
        self._guarded -= 1

    def _add(self, module: str | None, node: ast.AST) -> None:
        if module:
            self.sites.append(ImportSite(module, f"{self.where}:{getattr(node, 'lineno', 0)}", self._guarded > 0))

    def visit_Try(self, node: ast.Try) -> None:  # noqa: N802 (ast's names)
        self._try(node)

    def visit_TryStar(self, node: ast.TryStar) -> None:  # noqa: N802
        self._try(node)

    def _try(self, node: ast.Try | ast.TryStar) -> None:
        catches = any(_catches_import(handler.type) for handler in node.handlers)
        self._guarded += catches
        for child in node.body:
            self.visit(child)
        self._guarded -= catches
        others: list[ast.AST] = [*node.handlers, *node.orelse, *node.finalbody]
        for other in others:
            self.visit(other)

    def visit_Import(self, node: ast.Import) -> None:  # noqa: N802
        for alias in node.names:
            self._add(alias.name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:  # noqa: N802
        base = _resolve(self.package, node.level, node.module)
        self._add(base, node)
        for alias in node.names:  # a name may be a submodule (`from llmhost_guest import kv`): tried, optional
            if base and alias.name != "*":
                self.sites.append(ImportSite(f"{base}.{alias.name}", f"{self.where}:{node.lineno}", True))
                self.names[f"{base}.{alias.name}"] = self._guarded > 0

    def visit_Call(self, node: ast.Call) -> None:  # noqa: N802
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        if name == "import_module" and node.args and isinstance(node.args[0], ast.Constant):
            literal = node.args[0].value
            if isinstance(literal, str):
                level = len(literal) - len(literal.lstrip("."))
                self._add(_resolve(self.package, level, literal.lstrip(".") or None) if level else literal, node)
        elif name in ("import_module", "__import__") and node.args:
            self.computed = True
        self.generic_visit(node)


def _find(root: Path, module: str, optional: bool, skip_unparsed: bool = False) -> _Finder | None:
    """The imports of `module`'s file under `root` (None: no such file). A file that does not parse is a
    `BuildError` naming its line, or (`skip_unparsed`: an installed dependency's) skipped."""
    path = _own_file(root, module)
    if path is None:
        return None
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    where = path.relative_to(root).as_posix()
    try:
        tree = parse(path.read_bytes(), filename=where)  # one parse at a time (world.py says why)
    except (SyntaxError, ValueError) as error:
        if skip_unparsed:
            return None
        if not isinstance(error, SyntaxError):
            raise
        raise BuildError(f"{root / where}:{error.lineno}: {error.msg} (a syntax error)") from None
    finder = _Finder(package, where, optional)
    finder.visit(tree)
    return finder


def _catches_import(kind: ast.expr | None) -> bool:
    if kind is None:
        return True  # a bare `except:`
    names = kind.elts if isinstance(kind, ast.Tuple) else [kind]
    return any(isinstance(n, ast.Name) and n.id in _CATCHES_IMPORT for n in names)


def scan(app_dir: Path, entry: str = "app") -> list[ImportSite]:
    """Every import in the guest's own code: the entry module and the own modules it imports, transitively (a
    helper script beside them that the app never imports is not the guest's). The first site of each module is
    kept, a required one over an optional one."""
    found: dict[str, ImportSite] = {}
    # module -> whether it was reached only through optional imports (then its own imports are optional too); a
    # module first reached optionally and later required is scanned again.
    queue: list[tuple[str, bool]] = [(entry, False)]
    seen: dict[str, bool] = {entry: False}
    while queue:
        module, optional = queue.pop(0)
        finder = _find(app_dir, module, optional)
        if finder is None:
            continue
        for site in finder.sites:
            if site.module in finder.names and _own_file(app_dir, site.module) is not None:
                site = ImportSite(site.module, site.where, finder.names[site.module])
            known = found.get(site.module)
            if known is None or (known.optional and not site.optional):
                found[site.module] = site
            for name in _parents_and_self(site.module):
                if name not in seen or (seen[name] and not site.optional):
                    seen[name] = site.optional
                    queue.append((name, site.optional))
    return list(found.values())


def _parents_and_self(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def includes(app_dir: Path) -> list[str]:
    """`[tool.llmhost] include` of the guest's pyproject.toml: modules no scan can see."""
    pyproject = app_dir / "pyproject.toml"
    if not pyproject.is_file():
        return []
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as error:
        raise BuildError(f"{pyproject}: {error}") from None
    names = data.get("tool", {}).get("llmhost", {}).get("include", [])
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise BuildError(f"{pyproject}: {INCLUDE_KEY} must be a list of module names")
    return names


def scan_dependencies(site: Path, start: Iterable[str]) -> list[ImportSite]:
    """Every module the installed dependencies in `site` import, following them from `start` (the modules the guest
    imports), function-level imports included; each optional. A file that does not parse here (syntax newer than
    the build's Python) is skipped: its module is still imported when something names it."""
    found: dict[str, ImportSite] = {}
    queue = [name for module in start for name in _parents_and_self(module)]
    seen, whole = set(queue), set[str]()
    while queue:
        module = queue.pop()
        finder = _find(site, module, optional=True, skip_unparsed=True)
        if finder is None:
            continue
        where = finder.where
        top = module.split(".")[0]
        names = [s.module for s in finder.sites]
        if finder.computed and top not in whole:  # it loads its own modules by name: all of them
            whole.add(top)
            names += _package_modules(site, top)
        for s in finder.sites:
            found.setdefault(s.module, s)
        for name in (n for module_name in names for n in _parents_and_self(module_name)):
            if name not in seen:
                seen.add(name)
                found.setdefault(name, ImportSite(name, where, True))
                queue.append(name)
    return list(found.values())  # the standard library's too: a dependency's `import decimal` in a function


def _package_modules(site: Path, top: str) -> list[str]:
    """Every module of the package `top` installed in `site` (not its scripts' entry points or tests)."""
    root = site / top
    if not (root / "__init__.py").is_file():
        return []
    modules = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(site).with_suffix("").parts
        if _NOT_IMPORTED.intersection(parts) or _SKIPPED_DIRS.intersection(parts) or "-" in path.stem:
            continue
        modules.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return modules


def snapshot_imports(app_dir: Path, site: Path | None = None) -> list[ImportSite]:
    """What the entry module imports before the app: the SDK, the scanned modules, the declared includes, and what
    the guest's installed dependencies (`site`) import, wherever they do."""
    sites = [ImportSite(m, "(the guest SDK)", True) for m in SDK_MODULES]
    sites += [s for s in scan(app_dir) if s.module.split(".")[0] not in ("wit_world", "componentize_py_types")]
    sites += [ImportSite(name, f"pyproject.toml {INCLUDE_KEY}", False) for name in includes(app_dir)]
    if site is not None:
        listed = {s.module for s in sites}
        sites += [s for s in scan_dependencies(site, sorted(listed)) if s.module not in listed]
    return sites


def entry_source(
    prelude_module: str, app_module: str, sites: Iterable[ImportSite], stripped: dict[str, str] | None = None
) -> str:
    """The generated entry module: the prelude, every import of `sites` (failures of required ones collected and
    raised as one build error), then the app, then the run-time hint for modules no scan saw. `stripped`: the
    compiled modules removed from the installed dependencies (module -> distribution), named when one is missed."""
    listed = json.dumps([[s.module, s.where, s.optional] for s in sites])
    return _ENTRY.format(
        prelude=prelude_module, app=app_module, sites=listed, key=INCLUDE_KEY, stripped=json.dumps(stripped or {})
    )


_ENTRY = """\
import sys

# componentize-py imports the guest from its own directory while it snapshots it: no __pycache__ is left there.
sys.dont_write_bytecode = True
import {prelude}  # noqa: E402,F401


def _llmhost_codecs():
    # C code looks codecs up by name (`"...".decode("unicode-escape")` in jinja2's lexer), which no scan sees.
    import encodings, importlib, pkgutil
    for found in pkgutil.iter_modules(encodings.__path__):
        try:
            importlib.import_module("encodings." + found.name)
        except BaseException:
            pass  # another platform's codec (mbcs, oem)


def _llmhost_snapshot_imports():
    import importlib, json
    _llmhost_codecs()
    failed = []
    stripped = json.loads({stripped!r})
    for module, where, optional in json.loads({sites!r}):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as error:
            missing = error.name or ""
            if optional:
                continue
            if missing in stripped:
                failed.append(f"{{module}} ({{where}}): it needs compiled code, {{missing}} (an extension module of "
                              f"the package {{stripped[missing]}}), which a guest cannot load")
            elif missing in (module, module.rpartition(".")[0], module.split(".")[0]):
                failed.append(f"{{module}} ({{where}}): not installed in the guest (add its package to "
                              "[project] dependencies in the guest's pyproject.toml)")
            else:
                failed.append(f"{{module}} ({{where}}): it imports {{error.name}}, which is not installed in the guest")
        except ImportError as error:
            if not optional:
                text = str(error)
                named = [name for name in stripped if name in text]
                if named:
                    why = (f"it needs compiled code, {{named[0]}} (an extension module of the package "
                           f"{{stripped[named[0]]}}), which a guest cannot load")
                elif any(word in text for word in (".so", "dynamic", "extension")):
                    why = "it needs compiled code, which a guest cannot load"
                else:
                    why = text
                failed.append(f"{{module}} ({{where}}): {{why}}")
        except BaseException as error:
            if not optional:
                failed.append(f"{{module}} ({{where}}): importing it raised {{type(error).__name__}}: {{error}}")
    if failed:
        raise ImportError("llmhost: the guest imports modules it cannot have: " + "; ".join(failed))


_llmhost_snapshot_imports()
from {app} import *  # noqa: E402,F403


def _llmhost_hint():
    import builtins, importlib
    hint = (" (llmhost: the guest has only the modules imported when it was built; a name no scan can see, e.g. "
            "`__import__(name)`, goes in {key} of the guest's pyproject.toml)")

    def named(error):
        if hint not in str(error.msg or ""):
            error.msg = str(error.msg or "") + hint
            error.args = (error.msg,)
        return error

    original_import, original_import_module = builtins.__import__, importlib.import_module

    def hinted_import(*args, **kwargs):
        try:
            return original_import(*args, **kwargs)
        except ModuleNotFoundError as error:
            raise named(error)

    def hinted_import_module(*args, **kwargs):
        try:
            return original_import_module(*args, **kwargs)
        except ModuleNotFoundError as error:
            raise named(error)

    builtins.__import__, importlib.import_module = hinted_import, hinted_import_module


_llmhost_hint()
"""
