"""Building the Serve application of an app config (`llmhost.ray:app`), and deploying it (`llmhost serve --ray`).

The builder runs where Ray calls it: in `serve run`'s process before it joins the cluster, or on the cluster for
`serve deploy`. It joins nothing itself: it checks the config and builds its guest directories (errors are one line,
before anything is deployed), and binds the ingress to the config's path, which each replica loads again. That path,
and what the config names (components, guest directories, the cache), must be readable on every node: one machine,
a shared file system, or files Ray ships (`runtime_env`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmhost.config import ConfigError
from llmhost.engine.ray.cluster import connect, require_ray
from llmhost.engine.ray.deploy import failure_reason, last_error_line
from llmhost.serve_ray.options import APP_NAME, ROUTE_PREFIX, check_shared_state, ingress_options
from llmhost.shell.config import load_app_config, parse_listen, settings_for
from llmhost.shell.front import url_host

CONFIG_ARG = "config"
WILDCARD_HOSTS = ("0.0.0.0", "::", "")


def build(args: dict[str, Any]) -> Any:
    """The bound Serve application of the app config `args["config"]` (Ray's builder convention)."""
    require_ray()
    from ray import serve

    from llmhost.serve_ray.ingress import Ingress

    given = args.get(CONFIG_ARG) if isinstance(args, dict) else None
    if not given:
        raise ConfigError("llmhost.ray:app needs the app config: `serve run llmhost.ray:app config=APP.toml`")
    path = Path(str(given)).resolve()
    if not path.is_file():
        raise ConfigError(f"llmhost.ray:app: config={given}: no such file")
    config = load_app_config(path)
    check_shared_state(config, str(path))
    settings = settings_for(path, None, None, None)  # every error now, in the deploying process; builds guests
    ingress = serve.deployment(serve.ingress()(Ingress))
    deployment = ingress.options(**ingress_options(config, settings))  # type: ignore[attr-defined]
    return deployment.bind(str(path))


def deploy(config_path: Path, name: str = APP_NAME) -> str:
    """Deploy the app config on its `[cluster] ray-address` (Serve started there with the config's `listen` when it
    is not running yet); the app's URL. The app stays when this process exits."""
    require_ray()
    from ray import serve
    from ray.serve.context import _get_global_client

    config = load_app_config(config_path)
    check_shared_state(config, str(config_path))  # before joining: a refused config needs no cluster
    connect(config.cluster)
    app = build({CONFIG_ARG: str(config_path)})
    if _get_global_client(raise_if_no_controller_running=False) is None:  # a running Serve keeps its own options
        host, port = parse_listen(config.listen)
        serve.start(http_options={"host": host, "port": port})
    existed = name in serve.status().applications
    try:
        serve.run(app, name=name, route_prefix=ROUTE_PREFIX)
    except Exception as e:  # noqa: BLE001 (Ray's errors carry the replica's traceback: one line, and no leftovers)
        reason = failure_reason(name) or str(e)
        if not existed:
            serve.delete(name)
        raise ConfigError(f"{config_path}: the Ray Serve app {name!r} failed: {last_error_line(reason)}") from None
    return proxy_url()


def proxy_url() -> str:
    """The URL of the running Serve's HTTP proxy (its host and port, as the controller holds them) and the app's
    route prefix; a wildcard host as 127.0.0.1 (the proxy listens on every node, this one included)."""
    from ray.serve.context import _get_global_client

    client = _get_global_client(raise_if_no_controller_running=False)
    if client is None:
        raise ConfigError("Ray Serve is not running on this cluster: no HTTP proxy to name")
    options = client.http_config
    host = "127.0.0.1" if options.host in WILDCARD_HOSTS else options.host
    return f"http://{url_host(host)}:{options.port}{ROUTE_PREFIX}"
