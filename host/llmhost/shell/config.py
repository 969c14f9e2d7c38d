"""The app config of `llmhost serve`: pydantic models, TOML loading, and the one-component form.

One TOML file describes an app: the host settings `llmhost` already knows (`cache-dir`, `[engine]`,
`[models.NAME]`), the server (`listen`, `max-concurrency`, `shutdown-grace-s`), default `[limits]`, the
components (`[components.NAME]`: file, allowed models, grants, limit overrides) and `[routes]` (path prefix ->
component). Every error names the file and the key.

The one-component form (`serve DIR`, `serve APP.wasm`) takes the host config's keys instead: its component's grants
come from `[sandbox]`, as for `llmhost run`, so one `host.toml` serves both. A key of the other form is refused,
naming the key that is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from pydantic import Field, field_validator

from llmhost.config import (
    ClusterConfig,
    CompileStrategy,
    ConfigError,
    EngineConfig,
    GrantsConfig,
    HostConfig,
    HostingConfig,
    KeyValueStoreConfig,
    LlamaCppEngineConfig,
    ModelConfig,
    SandboxConfig,
    Section,
    TelemetryConfig,
    alias_map,
    default_cache_dir,
    default_compile_strategy,
    default_data_dir,
    default_stores,
    kebab,
    read_config,
    stores_relative_to,
    with_default_store,
)
from llmhost.domain.limits import (
    BUILTIN_MODELS,
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_DEADLINE_S,
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_LISTEN,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_DURATION_S,
    DEFAULT_MAX_LOG_BYTES,
    DEFAULT_MAX_MEMORY_MB,
    DEFAULT_MAX_TOKENS,
    DEFAULT_SHUTDOWN_GRACE_S,
    METRICS_LISTEN_KEY,
)
from llmhost.grants import Grants
from llmhost.shell.auth import ApiKeys, load_api_keys


class Limits(Section):
    """What one request may use ([limits], the defaults of every component)."""

    deadline_s: float = Field(DEFAULT_DEADLINE_S, gt=0)  # to the first byte, and between writes
    max_duration_s: float = Field(DEFAULT_MAX_DURATION_S, gt=0)  # the whole request, streaming included
    max_memory_mb: int = Field(DEFAULT_MAX_MEMORY_MB, ge=16)
    max_body_bytes: int = Field(DEFAULT_MAX_BODY_BYTES, ge=0)
    max_tokens: int = Field(DEFAULT_MAX_TOKENS, ge=1)


class LimitOverrides(Section):
    """[components.NAME.limits]: any of the [limits] keys, for one component."""

    deadline_s: float | None = Field(None, gt=0)
    max_duration_s: float | None = Field(None, gt=0)
    max_memory_mb: int | None = Field(None, ge=16)
    max_body_bytes: int | None = Field(None, ge=0)
    max_tokens: int | None = Field(None, ge=1)


class ComponentConfig(GrantsConfig):  # grants: key-value stores, config values, outbound hosts
    # The component (.wasm), or a guest directory (app.py or app.js: built when its sources changed, as by `llmhost
    # build`, and watched by `--watch`); relative to the config file.
    source: Path
    allowed_models: list[str] | None = None  # None: every configured model
    env: dict[str, str] = Field(default_factory=dict)  # environment variables granted to the guest
    read_only_dir: Path | None = None  # a host directory the guest may read, at `guest-dir`
    guest_dir: str = "/data"
    limits: LimitOverrides = Field(default_factory=LimitOverrides)


class RayServeConfig(Section):
    """`[serve]`: the app on Ray (`llmhost.ray:app`, `llmhost serve --ray`)."""

    replicas: int = Field(1, ge=1)  # ingress replicas, spread across nodes
    replica_cpus: float = Field(1.0, ge=0)


class AppConfig(HostingConfig):
    listen: str = DEFAULT_LISTEN
    # The metrics listener (/metrics, /healthz, /readyz), HOST:PORT; off when unset. Never the apps' port.
    metrics_listen: str | None = None
    max_concurrency: int = Field(DEFAULT_MAX_CONCURRENCY, ge=1)
    shutdown_grace_s: float = Field(DEFAULT_SHUTDOWN_GRACE_S, gt=0)
    header_timeout_s: float = Field(DEFAULT_HEADER_TIMEOUT_S, gt=0)
    body_timeout_s: float = Field(DEFAULT_BODY_TIMEOUT_S, gt=0)
    max_connections: int = Field(DEFAULT_MAX_CONNECTIONS, ge=1)
    max_log_bytes: int = Field(DEFAULT_MAX_LOG_BYTES, ge=0)
    # A file of accepted API keys, one per line (see `auth`); keys never appear in the config itself.
    api_keys_file: Path | None = None
    cache_dir: Path = Field(default_factory=default_cache_dir)
    data_dir: Path = Field(default_factory=default_data_dir)  # where the `default` key-value store lives
    key_value: dict[str, KeyValueStoreConfig] = Field(default_factory=default_stores)
    # Host memory for byte lists handed into guests, all components together (as HostConfig's; None: sized to the
    # machine).
    transfer_memory_mb: int | None = Field(default=None, ge=16)
    engine: EngineConfig = Field(default_factory=LlamaCppEngineConfig)
    models: dict[str, ModelConfig] = Field(default_factory=lambda: {name: ModelConfig() for name in BUILTIN_MODELS})
    limits: Limits = Field(default_factory=Limits)
    components: dict[str, ComponentConfig] = Field(default_factory=dict)
    routes: dict[str, str] = Field(default_factory=dict)
    # The host config's keys, for the one-component form (`serve DIR`): its grants and quotas, as `llmhost run`'s.
    sandbox: SandboxConfig | None = None
    compile_strategy: CompileStrategy = Field(default_factory=default_compile_strategy)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)  # for backend = "ray" models and `serve --ray`
    serve: RayServeConfig = Field(default_factory=lambda: RayServeConfig())
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)  # OpenTelemetry traces

    @field_validator("listen")
    @classmethod
    def _valid_listen(cls, value: str) -> str:
        parse_listen(value)
        return value

    @field_validator("metrics_listen")
    @classmethod
    def _valid_metrics_listen(cls, value: str | None) -> str | None:
        if value is not None:
            parse_listen(value)
        return value

    @field_validator("key_value")
    @classmethod
    def _valid_stores(cls, stores: dict[str, KeyValueStoreConfig]) -> dict[str, KeyValueStoreConfig]:
        with_default_store(stores)  # refuses stores that would share a file, `default` included
        return stores

    def grants_configs(self) -> dict[str, GrantsConfig]:
        grants: dict[str, GrantsConfig] = {f"components.{name}": c for name, c in self.components.items()}
        if self.sandbox is not None:
            grants["sandbox"] = self.sandbox
        return grants

    def host_config(self) -> HostConfig:
        return HostConfig(
            engine=self.engine,
            models=self.models,
            cache_dir=self.cache_dir,
            data_dir=self.data_dir,
            key_value=self.key_value,
            transfer_memory_mb=self.transfer_memory_mb,
            sandbox=self.sandbox if self.sandbox is not None else SandboxConfig(),
            compile_strategy=self.compile_strategy,
            cluster=self.cluster,
            telemetry=self.telemetry,
        )


def parse_listen(value: str) -> tuple[str, int]:
    """ "HOST:PORT" (IPv6 in brackets: "[::1]:8080") -> (host, port); port 0 picks a free port."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"expected HOST:PORT, e.g. {DEFAULT_LISTEN}, got {value!r}")
    return host.removeprefix("[").removesuffix("]"), int(port)


def _same_port(a: tuple[str, int], b: tuple[str, int]) -> bool:
    """Both addresses would listen on one port (the same host, or either on every interface)."""
    wildcard = ("", "0.0.0.0", "::")
    return a[1] != 0 and a[1] == b[1] and (a[0] == b[0] or a[0] in wildcard or b[0] in wildcard)


@dataclass(frozen=True)
class ComponentSettings:
    """One component, resolved: its file, grants and limits, and the config key each limit came from."""

    name: str
    source: Path
    allowed_models: frozenset[str] | None
    sandbox: SandboxConfig  # grants and memory; `timeout-s` is the request deadline
    limits: Limits
    limit_keys: dict[str, str]  # limit field name -> the key that set it, e.g. "components.chat.limits.deadline-s"
    origin: str  # the config file, or "the command line"
    # Key-value stores, config values and outbound hosts (resolved: `{ env = ... }` values read at load).
    grants: Grants = field(default_factory=Grants)
    source_dir: Path | None = None  # the guest directory `source` was built from (what `--watch` watches)

    def key(self, name: str) -> str:
        """A key as messages name it: `components.chat.allowed-models` in llmhost.toml."""
        return f"`{name}` in {self.origin}"

    def limit_key(self, field: str) -> str:
        return self.key(self.limit_keys[field])


@dataclass(frozen=True)
class ServeSettings:
    """Everything `serve` needs: the host config, the server settings, components and routes."""

    host: HostConfig
    listen: tuple[str, int]
    max_concurrency: int
    shutdown_grace_s: float
    components: dict[str, ComponentSettings]
    routes: dict[str, str]  # path prefix -> component name
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_log_bytes: int = DEFAULT_MAX_LOG_BYTES
    api_keys: ApiKeys = field(default_factory=ApiKeys)  # empty: no key needed
    metrics_listen: tuple[str, int] | None = None  # (host, port) of the metrics listener; None: off


def load_app_config(path: Path | str) -> AppConfig:
    """Read an app config; relative paths in it are relative to the file."""
    path = Path(path)
    return _relative_to(read_config(path, AppConfig), path.parent)


def _relative_to(config: AppConfig, base: Path) -> AppConfig:
    def fix(p: Path | None) -> Path | None:
        return base / p if p is not None and not p.is_absolute() else p

    models = {name: m.model_copy(update={"path": fix(m.path)}) for name, m in config.models.items()}
    components = {
        name: c.model_copy(update={"source": fix(c.source), "read_only_dir": fix(c.read_only_dir)})
        for name, c in config.components.items()
    }
    keys = fix(config.api_keys_file)
    update = {"models": models, "components": components, "api_keys_file": keys}
    update["key_value"] = stores_relative_to(config.key_value, base)
    update["data_dir"] = fix(config.data_dir)
    return config.model_copy(update=update)


SANDBOX = "sandbox"  # the grants' table of the one-component form
# The `[sandbox]` keys that are limits of a served component: the limit they set.
SANDBOX_LIMITS = {"max_memory_mb": "max_memory_mb", "timeout_s": "deadline_s"}


def single_component(config: AppConfig, app: Path, origin: str = "the config") -> AppConfig:
    """`llmhost serve APP.wasm` (or DIR): one component, named after the file, serving every path, granted what
    `[sandbox]` grants (as `llmhost run` is)."""
    if config.components or config.routes:
        raise ConfigError(
            f"{origin}: give either {app} or `[components]`/`[routes]` in the config, not both (with {app}, grant it "
            "under `[sandbox]`, e.g. `sandbox.key-value-stores`; with `[components]`, give no APP argument)"
        )
    name = (app.resolve().name if app.is_dir() else app.stem) or "app"
    sandbox = config.sandbox if config.sandbox is not None else SandboxConfig()
    granted = {key: getattr(sandbox, key) for key in GrantsConfig.model_fields}
    limits = {SANDBOX_LIMITS[key]: getattr(sandbox, key) for key in SANDBOX_LIMITS if key in sandbox.model_fields_set}
    component = ComponentConfig(
        source=app,
        **granted,
        env=sandbox.env,
        read_only_dir=sandbox.read_only_dir,
        guest_dir=sandbox.guest_dir,
        limits=LimitOverrides(**limits),
    )
    return config.model_copy(update={"components": {name: component}, "routes": {"/": name}})


def check_sandbox(config: AppConfig, origin: str, single: bool) -> None:
    """`[sandbox]` grants the one component of `serve DIR` (`single`); with `[components]`, each has its own."""
    if config.sandbox is None:
        return
    if single:
        from llmhost.runtime.sandbox import sandbox_problems

        problems = sandbox_problems(config.sandbox)
        if problems:
            raise ConfigError(f"{origin}: " + "; ".join(problems))
        return
    if not config.components:
        raise ConfigError(
            f"{origin}: `sandbox` grants the one component of `llmhost serve DIR` (or APP.wasm): give DIR, or "
            "configure `[components.NAME]` (each with its own grants) and `[routes]`"
        )
    name = next(iter(config.components))
    raise ConfigError(
        f"{origin}: `sandbox`: with `[components]`, each component is granted its own: move these keys to "
        f"`components.{name}` (e.g. `components.{name}.key-value-stores`), or serve one component with "
        "`llmhost -c CONFIG serve DIR`"
    )


def resolve(
    config: AppConfig,
    origin: str,
    listen: str | None = None,
    routed: bool = True,
    built: dict[str, Path] | None = None,
    single: bool = False,
) -> ServeSettings:
    """Check cross-references and files, and resolve per-component limits. Errors name the key and `origin`.
    `built`: the components whose `source` is a guest directory -> that directory (`source` now the component built
    from it, see `shell.sources`); `single`: the one-component form, granted by `[sandbox]`."""

    def fail(key: str, message: str) -> ConfigError:
        return ConfigError(f"{origin}: `{key}`: {message}")

    built = built or {}
    check_sandbox(config, origin, single)

    try:
        address = parse_listen(listen if listen is not None else config.listen)
    except ValueError as e:
        if listen is not None:
            raise ConfigError(f"--listen / LLMHOST_LISTEN: {e}") from None
        raise fail("listen", str(e)) from None
    metrics = parse_listen(config.metrics_listen) if config.metrics_listen is not None else None
    if metrics is not None and _same_port(metrics, address):
        raise fail(METRICS_LISTEN_KEY, f"{config.metrics_listen} is the apps' address: give the metrics another port")
    if routed and not config.routes:  # `llmhost mcp` serves components' tools, not routes
        raise fail("routes", 'no routes: map a path prefix to a component, e.g. `"/" = "chat"` under [routes]')
    for prefix, name in config.routes.items():
        if not prefix.startswith("/"):
            raise fail(f"routes.{prefix}", "a route is a path prefix and must start with `/`")
        if name not in config.components:
            known = ", ".join(sorted(config.components)) or "none"
            raise fail(f"routes.{prefix}", f"no component {name!r} under [components] (defined: {known})")
    aliases = alias_map(config.models)
    components = {}
    for name, component in config.components.items():
        prefix = f"components.{name}"
        if not component.source.is_file():
            what = "no such file or guest directory (app.py or app.js)"
            raise fail(f"{prefix}.source", f"{component.source}: {what} (or build it with `llmhost build`)")
        if component.read_only_dir is not None and not component.read_only_dir.is_dir():
            raise fail(f"{prefix}.read-only-dir", f"{component.read_only_dir} is not a directory")
        for model in component.allowed_models or []:
            if model not in config.models and model not in aliases:
                known = ", ".join([*config.models, *aliases])  # a model's alias grants the model
                raise fail(f"{prefix}.allowed-models", f"model {model!r} is not configured (known: {known})")
        table = SANDBOX if single else prefix
        sandbox = config.sandbox if single and config.sandbox is not None else SandboxConfig()
        resolved = component_settings(name, component, config.limits, origin, aliases, table, sandbox)
        components[name] = replace(resolved, source_dir=built.get(name))
    return ServeSettings(
        host=config.host_config(),
        listen=address,
        max_concurrency=config.max_concurrency,
        shutdown_grace_s=config.shutdown_grace_s,
        components=components,
        routes=dict(config.routes),
        header_timeout_s=config.header_timeout_s,
        body_timeout_s=config.body_timeout_s,
        max_connections=config.max_connections,
        max_log_bytes=config.max_log_bytes,
        api_keys=load_api_keys(config.api_keys_file),
        metrics_listen=metrics,
    )


def component_settings(
    name: str,
    component: ComponentConfig,
    defaults: Limits,
    origin: str,
    aliases: dict[str, str],
    table: str | None = None,
    base: SandboxConfig | None = None,
) -> ComponentSettings:
    """`table`: where the component's grants and limit overrides are configured (`components.NAME`, the default, or
    `sandbox` for the one-component form); `base`: the sandbox its quotas come from (default: the defaults)."""
    table = table if table is not None else f"components.{name}"
    base = base if base is not None else SandboxConfig()
    overrides = component.limits.model_dump(exclude_none=True)
    limits = defaults.model_copy(update=overrides)
    from_sandbox = {limit: f"{SANDBOX}.{kebab(key)}" for key, limit in SANDBOX_LIMITS.items()}
    keys = {
        field: (from_sandbox[field] if table == SANDBOX else f"{table}.limits.{kebab(field)}")
        if field in overrides
        else f"limits.{kebab(field)}"
        for field in Limits.model_fields
    }
    update = {key: getattr(component, key) for key in GrantsConfig.model_fields}
    update.update(
        env=component.env,
        read_only_dir=component.read_only_dir,
        guest_dir=component.guest_dir,
        max_memory_mb=limits.max_memory_mb,
        timeout_s=limits.deadline_s,
    )
    sandbox = base.model_copy(update=update)
    allowed = (
        frozenset(aliases.get(m, m) for m in component.allowed_models) if component.allowed_models is not None else None
    )
    try:
        grants = Grants.from_config(component, table)
    except ConfigError as error:
        raise ConfigError(f"{origin}: {error}") from None
    return ComponentSettings(name, component.source, allowed, sandbox, limits, keys, origin, grants)


def settings_for(
    config_path: Path | None,
    app: Path | None,
    listen: str | None,
    cache_dir: Path | None,
    routed: bool = True,
    note: Callable[[str], None] | None = None,
) -> ServeSettings:
    """What the CLI does: load the config (or the defaults), add APP.wasm (or a guest directory), apply the
    overrides, build the components whose source is a guest directory (`note`: build progress), resolve."""
    from llmhost.shell.sources import build_sources

    config = load_app_config(config_path) if config_path is not None else AppConfig()
    origin = str(config_path) if config_path is not None else "the command line"
    if cache_dir is not None:
        config = config.model_copy(update={"cache_dir": cache_dir})
    if app is not None:
        config = single_component(config, app, origin)
    check_sandbox(config, origin, single=app is not None)  # before any build
    sources = {name: component.source for name, component in config.components.items()}
    world = "http-app" if routed else None  # `mcp` serves guests of any world: their tools
    built = build_sources(sources, config.cache_dir, origin, world, note, single=app is not None)
    components = {
        name: component.model_copy(update={"source": built[name]}) if name in built else component
        for name, component in config.components.items()
    }
    config = config.model_copy(update={"components": components})
    return resolve(config, origin, listen, routed, {name: sources[name] for name in built}, single=app is not None)
