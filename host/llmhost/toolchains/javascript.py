"""Build a JavaScript guest (a directory with `app.js`, an ES module) into a component with componentize-js.

componentize-js runs on Node.js. It is installed with npm into llmhost's cache on first use (pinned below), so
Python guests never need Node.js, and `make install` needs no network for it. Builds are cached by content, as for
Python guests: the app's sources, the WIT, the world and the componentize-js version. A guest that imports the
JavaScript SDK (`from "llmhost"`, guest_sdk_js/llmhost) is bundled with it by esbuild (npm_deps.bundle), and the
SDK's files join its build key.
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
from collections.abc import Callable
from pathlib import Path

from llmhost.config import default_cache_dir
from llmhost.toolchains import locks, npm_deps
from llmhost.toolchains.errors import BuildError
from llmhost.toolchains.progress import heartbeat
from llmhost.toolchains.python import digest_files

APP_FILE = "app.js"
COMPONENTIZE_JS = "@bytecodealliance/componentize-js"
COMPONENTIZE_JS_VERSION = "0.23.0"  # the version guests were checked with
NODE_FETCH = "install Node.js 20 or later and npm (e.g. `apt install nodejs npm`); Python guests do not need them"
# componentize-js's WASI features a guest does not get: llmhost serves HTTP through its own `http-app` world, and a
# component importing wasi:http would not instantiate (guests get no network unless the config grants it).
DISABLED_FEATURES = ("http", "fetch-event")
SOURCE_SUFFIXES = {".js", ".mjs", ".json"}
IGNORED_DIRS = {"node_modules", ".git"}
# World-level exports that tell the world: `export function run(args)` (command), `export const handler` (http-app).
_HANDLER = re.compile(r"^\s*export\s+(?:const|let|var)\s+handler\b|^\s*export\s*\{[^}]*\bhandler\b", re.M)
_RUN = re.compile(r"^\s*export\s+(?:async\s+)?function\s+run\b|^\s*export\s+(?:const|let|var)\s+run\b", re.M)
# `import { llm } from "llmhost"` (or "llmhost/llm.js"): the guest uses the JavaScript SDK, which esbuild bundles in.
_USES_SDK = re.compile(r"""(?:\bfrom|\bimport)\s*\(?\s*["']llmhost(?:/[^"']*)?["']""")
SDK_NAME = "llmhost"
# `jco types` reads the WIT through WASI, and the preview2-shim that jco 1.35 resolves (0.26) preopens nothing, so
# it finds no file: this runner gives it the host's root before starting jco's own command line.
JCO_RUNNER = """\
import { pathToFileURL } from "node:url";
const [modules, ...args] = process.argv.slice(2);
const shim = "@bytecodealliance/jco-transpile/node_modules/@bytecodealliance/preview2-shim/dist/nodejs/filesystem.js";
const { _setPreopens } = await import(pathToFileURL(`${modules}/${shim}`).href);
_setPreopens({ "/": "/" });
process.argv = [process.argv[0], "jco", ...args];
await import(pathToFileURL(`${modules}/@bytecodealliance/jco/dist/jco.js`).href);
"""


def node() -> str:
    found = shutil.which("node")
    if found is None:
        raise BuildError(f"Node.js was not found: JavaScript guests are built with componentize-js ({NODE_FETCH})")
    return found


def sdk_dir() -> Path:
    """The JavaScript SDK shipped in the package (guest_sdk_js/llmhost: index.js, its modules and index.d.ts)."""
    return Path(__file__).resolve().parent.parent / "guest_sdk_js" / SDK_NAME


def uses_sdk(app_dir: Path) -> bool:
    return any(
        _USES_SDK.search(path.read_text(encoding="utf-8")) for path in _sources(app_dir) if path.suffix != ".json"
    )


def toolchain_dir(cache_dir: Path | None = None) -> Path:
    return (cache_dir or default_cache_dir()) / "node" / f"componentize-js-{COMPONENTIZE_JS_VERSION}"


def ensure_toolchain(cache_dir: Path | None = None, note: Callable[[str], None] | None = None) -> Path:
    """componentize-js (and jco, its dependency) in the cache, installed with npm the first time; returns its
    directory. A failed install leaves nothing half-installed behind."""
    node()
    target = toolchain_dir(cache_dir)
    with locks.held(target):  # two first builds (threads or processes) install once
        for found in (target, toolchain_dir()):  # this cache's, else the default cache's (an earlier install)
            if (found / "node_modules" / COMPONENTIZE_JS / "package.json").is_file():
                return found
        npm = shutil.which("npm")
        if npm is None:
            raise BuildError(f"npm was not found: it installs componentize-js on first use ({NODE_FETCH})")
        if note is not None:
            note(f"installing {COMPONENTIZE_JS}@{COMPONENTIZE_JS_VERSION} into {target} with npm (once) …")
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".installing-"))
        try:
            command = [npm, "install", "--no-audit", "--no-fund", "--prefix", str(staging)]
            command += [f"{COMPONENTIZE_JS}@{COMPONENTIZE_JS_VERSION}"]
            # npm is silent on a pipe for the ~80 s it takes: a line every few seconds says it is not stuck.
            npm_deps.run_with_progress(
                command, f"installing {COMPONENTIZE_JS}@{COMPONENTIZE_JS_VERSION}", note, lines=5
            )
            shutil.rmtree(target, ignore_errors=True)
            os.replace(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _sources(app_dir: Path) -> list[Path]:
    return [
        path
        for path in sorted(app_dir.rglob("*"))
        if path.is_file()
        and path.suffix in SOURCE_SUFFIXES
        and not IGNORED_DIRS.intersection(path.relative_to(app_dir).parts)
    ]


def check_sources(app_dir: Path) -> None:
    """Raise `BuildError` naming `app.js:LINE` for a syntax error, as `node --check` finds it (as an ES module)."""
    runner = node()
    for path in _sources(app_dir):
        if path.suffix == ".json":
            continue
        with tempfile.TemporaryDirectory(prefix="llmhost-check-") as scratch:
            module = Path(scratch) / (path.stem + ".mjs")  # checked as an ES module whatever its extension
            shutil.copyfile(path, module)
            result = subprocess.run([runner, "--check", str(module)], capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise BuildError(_syntax_error(path, str(module), result.stderr))


def _syntax_error(path: Path, checked: str, stderr: str) -> str:
    lines = stderr.replace(checked, str(path)).strip().splitlines()
    where = next((line.strip() for line in lines if line.strip().startswith(f"{path}:")), str(path))
    message = next((line.strip() for line in lines if "Error" in line), "syntax error")
    code = lines[1].strip() if len(lines) > 1 and lines[0].startswith(f"{path}:") else ""
    return f"{where}: {message}" + (f" in `{code}`" if code else "") + " (fix that line, then build again)"


def detect_world(app_dir: Path) -> str:
    """`"llmhost": {"world": ...}` in package.json, else what app.js exports: `handler` is the http-app world,
    `run` the command world."""
    package = app_dir / "package.json"
    if package.is_file():
        try:
            declared = json.loads(package.read_text(encoding="utf-8")).get("llmhost", {}).get("world")
        except (ValueError, AttributeError) as error:
            raise BuildError(f"{package}: not a JSON object with an `llmhost` object ({error})") from None
        if declared is not None:
            from llmhost.toolchains.world import WORLDS

            if declared not in WORLDS:
                raise BuildError(f"{package}: llmhost.world must be one of {', '.join(WORLDS)}, not {declared!r}")
            return str(declared)
    source = (app_dir / APP_FILE).read_text(encoding="utf-8")
    if _HANDLER.search(source):
        return "http-app"
    if _RUN.search(source):
        return "command"
    raise BuildError(
        f"{app_dir / APP_FILE} exports neither `run` (world command: `export function run(args)`) nor `handler` "
        "(world http-app: `export const handler = { handle(request, writer) {...} }`)"
    )


def source_wit(app_dir: Path, wit: Path) -> Path:
    """The WIT folder of the `llmhost:llm` version the guest's sources import (`llmhost:llm/llm@0.2.1`), so that a
    guest written against an earlier version builds unchanged; the current version when they name none."""
    from llmhost.toolchains.python import referenced_version

    texts = [path.read_text(encoding="utf-8") for path in _sources(app_dir) if path.suffix != ".json"]
    return referenced_version(texts, wit, str(app_dir / APP_FILE))


def build_key(app_dir: Path, wit: Path, world: str) -> str:
    digest = hashlib.sha256(f"js|world={world}|componentize-js={COMPONENTIZE_JS_VERSION}".encode())
    dependencies = npm_deps.declared(app_dir)
    if dependencies is not None:  # the installed set (package-lock.json an explicit input)
        digest.update(f"|deps={npm_deps.key(app_dir, dependencies)}".encode())
    if uses_sdk(app_dir):  # the SDK is bundled in: a change to it rebuilds the guests that use it
        digest.update(f"|esbuild={npm_deps.ESBUILD_VERSION}".encode())
        digest_files(digest, "sdk", sdk_dir(), sorted(p for p in sdk_dir().rglob("*") if p.is_file()))
    digest_files(digest, "app", app_dir, _sources(app_dir))
    digest_files(digest, "wit", wit, (p for p in sorted(wit.rglob("*.wit")) if p.is_file()))
    return digest.hexdigest()[:40]


def build_component(
    app_dir: Path,
    output: Path,
    world: str | None,
    wit: Path,
    cache_dir: Path | None = None,
    note: Callable[[str], None] | None = None,
) -> Path:
    """Build `app_dir/app.js` into `output` (copied from the cache when the sources are unchanged)."""
    check_sources(app_dir)
    # Before anything installs or builds: componentize-js would fail at run time with a Node.js stack.
    npm_deps.check_no_node_builtins(_sources(app_dir), npm_deps.declared(app_dir))
    world = world or detect_world(app_dir)
    cached = (cache_dir or default_cache_dir()) / "guests" / f"js-{build_key(app_dir, wit, world)}.wasm"
    locks.build_once(cached, lambda: _build(app_dir, cached, world, wit, cache_dir, note))
    output.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(cached, output)
    return output


def _build(
    app_dir: Path, cached: Path, world: str, wit: Path, cache_dir: Path | None, note: Callable[[str], None] | None
) -> None:
    toolchain = ensure_toolchain(cache_dir, note)
    started = time.monotonic()
    # A line at the start and one every HEARTBEAT_S, on a terminal or not (a log would sit silent for the build).
    with heartbeat(note, f"building {app_dir} ({world}) with componentize-js"):
        cached.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cached.parent, suffix=".wasm.tmp")
        os.close(fd)
        scratch = Path(tempfile.mkdtemp(prefix="llmhost-bundle-"))
        try:
            cli = toolchain / "node_modules" / COMPONENTIZE_JS / "src" / "cli.js"
            source = (app_dir / APP_FILE).resolve()
            dependencies = npm_deps.declared(app_dir)
            sdk = uses_sdk(app_dir)
            if dependencies is not None or sdk:  # componentize-js takes one module: app.js bundled with its imports
                installed = npm_deps.install(app_dir, dependencies or {}, cache_dir or default_cache_dir(), note)
                npm_deps.bundle(source, installed, scratch / APP_FILE, {SDK_NAME: sdk_dir()} if sdk else None)
                source = scratch / APP_FILE
            command = [node(), str(cli), str(source), "--wit", str(wit.resolve()), "--world-name", world]
            command += ["--disable", *DISABLED_FEATURES]
            command += ["-o", tmp]
            result = subprocess.run(command, capture_output=True, text=True, check=False, cwd=source.parent)
            if result.returncode != 0:
                tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-8:])
                raise BuildError(f"componentize-js could not build {app_dir / APP_FILE} ({world}):\n{tail}")
            os.replace(tmp, cached)
        finally:
            Path(tmp).unlink(missing_ok=True)
            shutil.rmtree(scratch, ignore_errors=True)
    if note is not None:
        summary = npm_deps.summary(app_dir, cached, cache_dir or default_cache_dir())
        note(f"built {app_dir} in {time.monotonic() - started:.1f} s ({summary})")


def bindings(app_dir: Path, output: Path, world: str | None, wit: Path, cache_dir: Path | None = None) -> Path:
    """TypeScript declarations of the guest's world (jco types), and the SDK's (OUT/llmhost/index.d.ts), for
    editors."""
    world = world or detect_world(app_dir)
    modules = ensure_toolchain(cache_dir) / "node_modules"
    with tempfile.TemporaryDirectory(prefix="llmhost-jco-") as scratch:
        runner = Path(scratch) / "jco-types.mjs"
        runner.write_text(JCO_RUNNER)
        command = [node(), str(runner), str(modules), "types", str(wit.resolve()), "--world-name", world]
        command += ["-o", str(output.resolve())]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BuildError(f"jco could not write the TypeScript declarations: {(result.stderr or result.stdout).strip()}")
    # The SDK's declarations beside the world's, for a guest that imports "llmhost": a jsconfig.json `paths` entry
    # `"llmhost": ["OUT/llmhost"]` makes editors complete it (docs/js-sdk.md).
    (output / SDK_NAME).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(sdk_dir() / "index.d.ts", output / SDK_NAME / "index.d.ts")
    return output
