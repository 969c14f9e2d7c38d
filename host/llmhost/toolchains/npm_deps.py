"""npm dependencies of a JavaScript guest: package.json's `dependencies` installed with npm into the build cache, and
app.js bundled with them into one ES module (esbuild) before componentize-js, which takes a single module.

The bundle targets no platform (`--platform=neutral`): a guest has no Node.js built-ins, so a package that imports
`fs`, `net`, `child_process`... fails the build naming the package and the built-in. The host's interfaces
(`llmhost:*`, `wasi:*`) stay imports of the bundle. The install is cached by the dependencies and package-lock.json
(an explicit input of the build key); the user's npm configuration (~/.npmrc, the guest's .npmrc) applies.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from llmhost.toolchains import buildenv
from llmhost.toolchains.errors import BuildError

ESBUILD_VERSION = "0.28.2"
LOCK_FILE = "package-lock.json"
EXTERNAL = ("llmhost:*", "wasi:*")
# How often a long npm install says it is still at work: npm prints nothing to a pipe for a minute or more (the first
# componentize-js install takes ~80 s), which reads like a hang.
PROGRESS_EVERY_S = 10.0
_UNRESOLVED = re.compile(r'Could not resolve "(?:node:)?([^"]+)"\s+(\S+?):\d+:\d+:')
# npm runs no package's scripts (`--ignore-scripts`): a build runs nothing of a dependency's on the build machine.
# A package that needs them (they build native code, download binaries, patch files) fails the build by name.
INSTALL_SCRIPTS = ("preinstall", "install", "postinstall")
OWN_PACKAGES = {"esbuild"}  # installed by llmhost itself: its postinstall only speeds it up (it runs without)
FILE_PREFIX = "file:"
_SKIPPED = {"node_modules", ".git"}  # not part of a `file:` package's contents (npm packs neither)


def declared(app_dir: Path) -> dict[str, str] | None:
    """package.json's `dependencies`, or None when it has none."""
    package = app_dir / "package.json"
    if not package.is_file():
        return None
    try:
        found = json.loads(package.read_text(encoding="utf-8")).get("dependencies") or {}
    except (ValueError, AttributeError) as error:
        raise BuildError(f"{package}: not a JSON object ({error})") from None
    if not isinstance(found, dict) or not all(isinstance(v, str) for v in found.values()):
        raise BuildError(f"{package}: `dependencies` must map package names to versions")
    return found or None


def local_packages(app_dir: Path, dependencies: dict[str, str]) -> dict[str, Path]:
    """The `file:` dependencies, each resolved from the guest's directory (as npm does for the guest's own
    package.json); a path that is not there fails the build naming it."""
    found = {}
    for name, spec in sorted(dependencies.items()):
        if spec.startswith(FILE_PREFIX):
            path = (app_dir / spec.removeprefix(FILE_PREFIX)).resolve()
            if not path.exists():
                raise BuildError(
                    f"{app_dir / 'package.json'}: the dependency {name} is {spec!r}, and {path} does not "
                    "exist (a `file:` path is relative to the guest's directory)"
                )
            found[name] = path
    return found


def _local_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return [p for p in sorted(path.rglob("*")) if p.is_file() and not _SKIPPED.intersection(p.relative_to(path).parts)]


def key(app_dir: Path, dependencies: dict[str, str]) -> str:
    from llmhost.toolchains.python import file_sha256

    digest = hashlib.sha256(json.dumps([ESBUILD_VERSION, sorted(dependencies.items())]).encode())
    for name in (LOCK_FILE, ".npmrc"):
        if (app_dir / name).is_file():
            digest.update(name.encode() + file_sha256(app_dir / name))
    for name, path in local_packages(app_dir, dependencies).items():  # their contents: an edit is a new install
        for file in _local_files(path):
            digest.update(f"|{name}:{file.relative_to(path).as_posix()}:".encode() + file_sha256(file))
    return digest.hexdigest()[:32]


def _npm() -> str:
    found = shutil.which("npm")
    if found is None:
        raise BuildError("npm was not found: it installs a JavaScript guest's dependencies (install Node.js and npm)")
    return found


def run_with_progress(
    command: list[str],
    what: str,
    note: Callable[[str], None] | None,
    cwd: Path | None = None,
    lines: int = 8,
    env: dict[str, str] | None = None,
) -> None:
    """Run `command`; every PROGRESS_EVERY_S seconds it runs, `note("still WHAT (N s) …")`. A failure raises
    `BuildError` with the last `lines` of its output."""
    started = time.monotonic()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, text=True, cwd=cwd, env=env)
        while True:
            try:
                code = process.wait(timeout=PROGRESS_EVERY_S)
                break
            except subprocess.TimeoutExpired:
                if note is not None:
                    note(f"still {what} ({time.monotonic() - started:.0f} s) …")
        if code != 0:
            out.seek(0)
            err.seek(0)
            text = err.read() or out.read()
            tail = "\n".join(text.strip().splitlines()[-lines:])
            raise BuildError(f"{what} failed:\n{tail}")


def _run(command: list[str], what: str, cwd: Path | None = None, note: Callable[[str], None] | None = None) -> None:
    with buildenv.installing() as env:  # no host secrets for npm (toolchains/buildenv.py)
        run_with_progress(command, what, note, cwd, env=env)


def _packages(modules: Path) -> Iterator[tuple[str, Path]]:
    """(name, folder) of each package installed in a node_modules folder, nested node_modules too."""
    if not modules.is_dir():
        return
    for entry in sorted(modules.iterdir()):
        if entry.name.startswith(".") or not entry.is_dir():
            continue
        scoped = sorted(p for p in entry.iterdir() if p.is_dir()) if entry.name.startswith("@") else [entry]
        for folder in scoped:
            yield (f"{entry.name}/{folder.name}" if folder != entry else folder.name), folder
            yield from _packages(folder / "node_modules")


def needs_scripts(modules: Path) -> list[tuple[str, str]]:
    """The installed packages that need install scripts npm did not run: (name, what: the script, or binding.gyp,
    which npm would build with node-gyp)."""
    found = []
    for name, folder in _packages(modules):
        if folder.parent == modules and name in OWN_PACKAGES:
            continue
        try:
            data = json.loads((folder / "package.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        scripts = data.get("scripts") if isinstance(data, dict) else None
        scripts = scripts if isinstance(scripts, dict) else {}
        script = next((s for s in INSTALL_SCRIPTS if s in scripts), None)
        if script is not None:
            found.append((name, f"a `{script}` script: {scripts[script]}"))
        elif (folder / "binding.gyp").is_file():
            found.append((name, "binding.gyp, native code npm would build with node-gyp"))
    return found


def install(app_dir: Path, dependencies: dict[str, str], cache_dir: Path, note: Callable[[str], None] | None) -> Path:
    """node_modules of the guest's dependencies, and esbuild, in the cache (once per key). Returns the folder."""
    target = cache_dir / "js-deps" / key(app_dir, dependencies)
    if (target / "node_modules" / ".llmhost-complete").is_file():
        return target
    if note is not None:
        what = f"the guest's npm dependencies ({', '.join(dependencies)})" if dependencies else "esbuild"
        note(f"installing {what} …")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".installing-") as tmp:
        staging = Path(tmp)
        # `file:` paths as the guest means them (relative to its directory, not to this staging folder).
        local = {name: f"{FILE_PREFIX}{path}" for name, path in local_packages(app_dir, dependencies).items()}
        package = {"name": "llmhost-guest-deps", "private": True, "dependencies": {**dependencies, **local}}
        package["devDependencies"] = {"esbuild": ESBUILD_VERSION}
        (staging / "package.json").write_text(json.dumps(package))
        for name in (LOCK_FILE, ".npmrc"):
            if (app_dir / name).is_file() and not (name == LOCK_FILE and local):  # (its `file:` paths: relative)
                shutil.copyfile(app_dir / name, staging / name)
        # --install-links: a `file:` package is copied in (npm would link it, and install its dependencies into
        # the guest's own folder).
        command = [_npm(), "install", "--no-audit", "--no-fund", "--ignore-scripts", "--install-links"]
        _run(command, f"installing {app_dir}'s npm dependencies", staging, note)
        refused = needs_scripts(staging / "node_modules")
        if refused:
            name, what = refused[0]
            others = f" (and {', '.join(n for n, _ in refused[1:])})" if refused[1:] else ""
            raise BuildError(
                f"{app_dir / 'package.json'}: the npm package {name}{others} needs its install scripts ({what}), "
                "which llmhost does not run: a build runs no dependency's code on the build machine, and a guest "
                "loads no native code. Use a package that works without them (a pure-JavaScript one)"
            )
        (staging / "node_modules" / ".llmhost-complete").write_text("")
        if not target.exists():
            os.replace(staging, target)
            Path(tmp).mkdir()  # the context manager removes its folder
    return target


def bundle(app_js: Path, installed: Path, output: Path, aliases: dict[str, Path] | None = None) -> None:
    """app.js and what it imports as one ES module at `output`; `aliases` maps an import name to the folder that
    provides it (the JavaScript SDK: `"llmhost"`), whatever the guest installed."""
    esbuild = installed / "node_modules" / ".bin" / "esbuild"
    command = [str(esbuild), str(app_js), "--bundle", "--format=esm", "--platform=neutral", f"--outfile={output}"]
    command += ["--main-fields=module,main", "--log-level=error", *(f"--external:{e}" for e in EXTERNAL)]
    command += [f"--alias:{name}={folder.resolve()}" for name, folder in (aliases or {}).items()]
    env = {**os.environ, "NODE_PATH": str(installed / "node_modules")}
    result = subprocess.run(command, capture_output=True, text=True, check=False, env=env, cwd=app_js.parent)
    if result.returncode == 0:
        return
    text = result.stderr or result.stdout
    builtins = [(m.group(2), m.group(1)) for m in _UNRESOLVED.finditer(text)]
    needs = [(f, name) for f, name in builtins if "node_modules/" in f]
    if needs:
        file, builtin = needs[0]
        package = _package_of(file)
        raise BuildError(
            f"{app_js}: the npm package {package} needs the Node.js built-in `{builtin}` ({file}), which a guest "
            "does not have (no files, sockets or processes in the sandbox): use a package that does not"
        )
    own = [(f, name) for f, name in builtins if "node_modules/" not in f]
    if own:
        file, name = own[0]
        package = name.split("/")[0] if not name.startswith("@") else "/".join(name.split("/")[:2])
        if node_builtin(name, declared(app_js.parent)) is not None:  # (check_no_node_builtins found it first)
            check_no_node_builtins([Path(file) if Path(file).is_absolute() else app_js.parent / file], None)
        if package in (declared(app_js.parent) or {}):  # declared, and still not found: say so, not "add it"
            raise BuildError(
                f"{file} imports {name!r}: the dependency {package} is installed but esbuild could not resolve "
                f"{name!r} in it (check its package.json's `main`/`exports`, and that the file exists):\n"
                + "\n".join(text.strip().splitlines()[-4:])
            )
        raise BuildError(f"{file} imports {name!r}, which is not installed: add it to package.json's dependencies")
    tail = "\n".join(text.strip().splitlines()[-8:])
    raise BuildError(f"bundling {app_js} with its dependencies (esbuild) failed:\n{tail}")


# Node.js's built-in modules as bare names (`module.builtinModules` of Node 22; `node:` names all are): a guest runs in
# StarlingMonkey (componentize-js), which has none of them.
NODE_BUILTINS = frozenset({
    "assert", "async_hooks", "buffer", "child_process", "cluster", "console", "constants", "crypto", "dgram",
    "diagnostics_channel", "dns", "domain", "events", "fs", "http", "http2", "https", "inspector", "module", "net",
    "os", "path", "perf_hooks", "process", "punycode", "querystring", "readline", "repl", "stream",
    "string_decoder", "sys", "timers", "tls", "trace_events", "tty", "url", "util", "v8", "vm", "wasi",
    "worker_threads", "zlib",
})  # fmt: skip
# What a guest uses instead (the llmhost SDK, `import { ... } from "llmhost"`, or the web APIs StarlingMonkey has).
_INSTEAD = {
    "fs": "keep data in the host's key-value store (`kv` of the llmhost SDK)",
    "path": "join strings yourself (a guest has no files)",
    "crypto": "the web API `crypto.getRandomValues` is a global",
    "http": "call out with `http` of the llmhost SDK (granted with `outbound-http`)",
    "https": "call out with `http` of the llmhost SDK (granted with `outbound-http`)",
    "net": "call out with `http` of the llmhost SDK (granted with `outbound-http`)",
    "buffer": "use Uint8Array, TextEncoder and TextDecoder (globals)",
    "url": "`URL` and `URLSearchParams` are globals",
    "util": "`TextEncoder`/`TextDecoder` are globals; format strings yourself",
    "process": "read settings with `config` of the llmhost SDK (a command's arguments are `run(args)`'s)",
    "os": "read settings with `config` of the llmhost SDK",
    "events": "use plain callbacks (the SDK's streams are iterators)",
    "timers": "`setTimeout` is a global",
}
_IMPORTED = re.compile(
    r"""(?:\bimport\s*(?:[\w*${}\s,]+?\s*from\s*)?|\bexport\s*[\w*${}\s,]+?\s*from\s*|\bimport\s*\(\s*|"""
    r"""\brequire\s*\(\s*)["']([^"'\n]+)["']"""
)

# Block comments and whole-line `//` comments (blanked, lines kept): an import named in a comment is not one.
_COMMENT = re.compile(r"/\*.*?\*/|^[ \t]*//[^\n]*", re.DOTALL | re.MULTILINE)


def node_builtin(name: str, dependencies: dict[str, str] | None) -> str | None:
    """The Node.js built-in an import names (`node:fs/promises` and `fs` are `fs`), or None. A bare name that is
    also a declared npm package (`buffer`, `events`: browser versions exist) is that package."""
    bare = name.removeprefix("node:")
    root = bare.split("/")[0]
    if name.startswith("node:") or (root in NODE_BUILTINS and root not in (dependencies or {})):
        return root
    return None


def check_no_node_builtins(sources: list[Path], dependencies: dict[str, str] | None) -> None:
    """`BuildError` in one line for the guest's own import of a Node.js built-in, before anything is installed or
    built (componentize-js would fail at run time with a Node stack; esbuild with "add it to package.json")."""
    for path in sources:
        if path.suffix == ".json":
            continue
        text = _COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), path.read_text("utf-8", errors="replace"))
        for match in _IMPORTED.finditer(text):
            builtin = node_builtin(match.group(1), dependencies)
            if builtin is not None:
                line = text.count("\n", 0, match.start(1)) + 1
                instead = _INSTEAD.get(builtin, "use the llmhost SDK (`llm`, `kv`, `http`, `config`) or web APIs")
                raise BuildError(
                    f"{path}:{line} imports {match.group(1)!r}: `{builtin}` is a Node.js built-in, and a guest has "
                    f"no Node.js runtime (it runs in a WebAssembly sandbox): {instead}"
                )


def _package_of(file: str) -> str:
    parts = file.split("node_modules/")[-1].split("/")
    return "/".join(parts[:2]) if parts[0].startswith("@") else parts[0]


def summary(app_dir: Path, component: Path, cache_dir: Path) -> str:
    """`llmhost build`'s last line for a JavaScript guest: the component's size and the npm packages bundled into
    it, each at the version installed (node_modules/NAME/package.json)."""
    size = f"{component.stat().st_size / 1024 / 1024:.1f} MB"
    dependencies = declared(app_dir)
    if dependencies is None:
        return size
    modules = cache_dir / "js-deps" / key(app_dir, dependencies) / "node_modules"
    bundled = []
    for name in sorted(dependencies):
        try:
            version = json.loads((modules / name / "package.json").read_text(encoding="utf-8"))["version"]
        except (OSError, ValueError, KeyError, TypeError):
            version = dependencies[name]  # (not installed where expected: the declared range)
        bundled.append(f"{name} {version}")
    return f"{size}, with {', '.join(bundled)}"
