"""What a guest directory says about itself, and build failures told in one paragraph that names the fix.

A guest declares its world in `pyproject.toml` beside `app.py` (`[tool.llmhost] world = "http-app"`), or the
world is read from what `app.py` defines: `class WitWorld(...)` with `run` is the `command` world,
`class Handler(exports.Handler)` the `http-app` world. `--world` overrides both.
"""

from __future__ import annotations

import ast
import re
import threading
import tomllib
from pathlib import Path

from llmhost.toolchains.errors import BuildError

WORLDS = ("command", "http-app")
APP_FILE = "app.py"
# CPython 3.11's ast.parse keeps its recursion depth in interpreter-wide state: two threads parsing at once (guests
# built in parallel) can fail with "SystemError: AST constructor recursion depth mismatch". One parse at a time.
_PARSE_LOCK = threading.Lock()


def _error(message: str) -> Exception:
    return BuildError(message)


def parse(source: str | bytes, filename: str) -> ast.Module:
    with _PARSE_LOCK:
        return ast.parse(source, filename=filename)


def check_sources(app_dir: Path) -> None:
    """Raise `BuildError` naming file, line and fix for a Python syntax error in the guest's sources."""
    for path in sorted(app_dir.rglob("*.py")):
        if any(part.startswith(".") or part == "__pycache__" for part in path.relative_to(app_dir).parts):
            continue
        try:
            parse(path.read_text(encoding="utf-8"), str(path))
        except SyntaxError as error:
            where = f"{path}:{error.lineno}" + (f":{error.offset}" if error.offset else "")
            line = (error.text or "").strip()
            raise _error(
                f"{where}: syntax error: {error.msg}" + (f" in `{line}`" if line else "") + " (fix that line, then "
                "build again)"
            ) from None
        except UnicodeDecodeError as error:
            raise _error(f"{path}: not UTF-8 text ({error.reason}); save it as UTF-8") from None


def declared_world(app_dir: Path) -> str | None:
    """`[tool.llmhost] world` of `app_dir/pyproject.toml`, if any (checked to be a known world)."""
    pyproject = app_dir / "pyproject.toml"
    if not pyproject.is_file():
        return None
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as error:
        raise _error(f"{pyproject}: not valid TOML: {error}") from None
    world = data.get("tool", {}).get("llmhost", {}).get("world")
    if world is None:
        return None
    if world not in WORLDS:
        raise _error(
            f"{pyproject}: [tool.llmhost] world = {world!r} is not a world of llmhost (use one of: {', '.join(WORLDS)})"
        )
    return str(world)


def defined_world(app_dir: Path) -> str | None:
    """The world `app.py`'s classes implement, read from its syntax tree (None: it defines neither)."""
    tree = parse((app_dir / APP_FILE).read_text(encoding="utf-8"), str(app_dir / APP_FILE))
    found = set()
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        bases = [ast.unparse(base) for base in node.bases]
        if node.name == "Handler" and any(b.endswith("Handler") for b in bases):
            found.add("http-app")
        if node.name == "WitWorld":
            found.add("command")
    if len(found) == 1:
        return found.pop()
    if found:
        raise _error(
            f"{app_dir / APP_FILE}: defines both `class WitWorld` (command) and `class Handler` (http-app); keep "
            "one, or set `[tool.llmhost] world` in pyproject.toml"
        )
    return None


def own_world(app_dir: Path) -> str | None:
    """The world of the guest's own WIT package (`wit/*.wit` beside app.py), e.g. an `llmhost mcp` tool guest."""
    from llmhost.toolchains.wit_docs import wit_files, world_names

    files = wit_files(app_dir)
    if not files:
        return None
    names = world_names([path.read_text(encoding="utf-8") for path in files])
    if len(names) != 1:
        found = ", ".join(names) or "none"
        raise _error(f"{app_dir / 'wit'}: the guest's WIT must define exactly one world (found: {found})")
    return names[0]


def detect_world(app_dir: Path) -> str:
    world = own_world(app_dir) or declared_world(app_dir) or defined_world(app_dir)
    if world is None:
        raise _error(
            f"{app_dir / APP_FILE}: no world found: define `class WitWorld(WitWorld)` with `run(self, args)` "
            "(command world) or `class Handler(exports.Handler)` with `handle(self, request, writer)` (http-app "
            '''world), or declare it in pyproject.toml: [tool.llmhost] world = "command"'''
        )
    return world


_FRAME = re.compile(r'File "([^"]+)", line (\d+)')
# componentize-py names the files of its i-th `-p` directory `/i/...`; the build passes the guest's directory
# second (after the entry module's), so the guest's own frames are the `/1/` ones.
APP_PATH_PREFIX = "/1/"


# wit-parser's report of a WIT error: `--> PATH.wit:LINE:COL`, its causes numbered under "Caused by:", the line.
_WIT_AT = re.compile(r"-->\s+(\S+\.wit):(\d+):(\d+)")
_CAUSE = re.compile(r"^\s*\d+:\s+(.*\S)")
_SOURCE_LINE = re.compile(r"^\s*\d+\s+\|\s?(.*\S)")


def explain_wit_failure(app_dir: Path, output: str, wit: Path | None = None) -> str | None:
    """`FILE.wit:LINE:COL: message in `line`` for a WIT error in componentize-py's output, the file as the guest
    has it (`wit`: the folder the build passed, a copy of the guest's `wit/`); None when it is no WIT error."""
    found = _WIT_AT.search(output)
    if found is None:
        return None
    path, line, column = found.groups()
    if wit is not None and path.startswith(f"{wit}/") and not path.startswith(f"{wit}/deps/"):
        path = str(app_dir / "wit" / path.removeprefix(f"{wit}/"))
    lines = output.split("Stack backtrace:", 1)[0].splitlines()
    caused = lines[next((i for i, text in enumerate(lines) if text.strip() == "Caused by:"), len(lines)) :]
    causes = [m.group(1) for m in map(_CAUSE.match, caused) if m is not None]
    causes = [c for c in causes if not c.startswith(("failed to parse package", "failed to resolve"))]
    message = causes[-1] if causes else "WIT error"
    source = next((m.group(1).strip() for m in map(_SOURCE_LINE.match, lines) if m is not None), "")
    code = f" in `{source}`" if source else ""
    return f"{path}:{line}:{column}: WIT error: {message}{code} (fix that line, then build again)"


def explain_build_failure(app_dir: Path, world: str, output: str, wit: Path | None = None) -> str:
    """One paragraph from componentize-py's output (a Rust backtrace around a CPython traceback): the guest's
    own frames, the Python error, and the fix. A WIT error names its file, line and column instead."""
    wit_error = explain_wit_failure(app_dir, output, wit)
    if wit_error is not None:
        return wit_error
    lines = output.splitlines()
    error_line = next(
        (
            line.strip()
            for line in reversed(lines)
            if re.match(r"^\s*[A-Za-z_][\w.]*(Error|Exception)\b.*:", line) or line.strip().endswith("Error")
        ),
        "",
    )
    frames = [
        f"{m.group(1).split('/', 2)[2]}:{m.group(2)}"
        for m in (_FRAME.search(line) for line in lines)
        if m is not None and m.group(1).startswith(APP_PATH_PREFIX)
    ]
    where = f" at {' → '.join(frames[-3:])}" if frames else ""
    if "cannot import name 'exports' from 'wit_world'" in output or "cannot import name 'WitWorld'" in output:
        other = "http-app" if world == "command" else "command"
        return (
            f"{app_dir / APP_FILE}{where}: {error_line or 'wrong world'}: the guest targets the `{other}` world but "
            f"was built for `{world}` (build with `--world {other}`, or declare it in pyproject.toml: "
            f'[tool.llmhost] world = "{other}")'
        )
    if "llmhost: the guest imports modules it cannot have" in error_line:
        return (
            f"{app_dir}: {error_line.split('llmhost: ', 1)[1]} (a guest has the standard library, `wit_world`, "
            "the modules in its own directory and the packages of its `[project] dependencies`; an import that is "
            "optional belongs in a `try` that catches ImportError)"
        )
    if error_line.startswith(("ModuleNotFoundError", "ImportError")):
        return (
            f"{app_dir / APP_FILE}{where}: {error_line} (a guest can import the standard library, `wit_world` "
            "(the WIT bindings: run `llmhost bindings DIR` to see its names), the modules in its own directory and "
            "the packages of its pyproject.toml's `[project] dependencies`)"
        )
    if error_line:
        return f"{app_dir / APP_FILE}{where}: {error_line} (raised while componentize-py imported app.py)"
    tail = "\n".join(lines[-15:])
    return f"componentize-py failed for {app_dir} ({world} world):\n{tail}"
