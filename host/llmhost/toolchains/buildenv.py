"""The environment pip and npm run with when they install a guest's dependencies: a minimal one, not the builder's.

An install can run a dependency's code (an sdist's or a local package's build backend under pip; npm runs no
scripts: `--ignore-scripts`), so it gets no host secrets: PATH, the locale, a HOME of its own (an empty temporary
folder), the tools' caches and user configuration files where they were (passed by path, as HOME moved), and the
tools' own settings (`PIP_*`, `npm_config_*`, proxies, certificates), which the docs promise apply. Nothing else of
the builder's environment (API keys, tokens, cloud credentials) reaches it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

PASSED = (
    "PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "SYSTEMROOT",
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy", "all_proxy",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
)  # fmt: skip
PASSED_PREFIXES = ("PIP_", "NPM_CONFIG_", "npm_config_")  # the tools' own configuration


def _user_paths(environ: dict[str, str]) -> dict[str, str]:
    """The caches and user configuration files of pip and npm as the builder's HOME places them."""
    home = Path(environ.get("HOME") or Path.home())
    cache = Path(environ.get("XDG_CACHE_HOME") or home / ".cache")
    config = Path(environ.get("XDG_CONFIG_HOME") or home / ".config")
    paths = {"PIP_CACHE_DIR": str(cache / "pip"), "npm_config_cache": str(home / ".npm")}
    pip_conf = next((p for p in (config / "pip" / "pip.conf", home / ".pip" / "pip.conf") if p.is_file()), None)
    if pip_conf is not None:
        paths["PIP_CONFIG_FILE"] = str(pip_conf)
    if (home / ".npmrc").is_file():
        paths["npm_config_userconfig"] = str(home / ".npmrc")
    return paths


def minimal(home: Path, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for an install, with `home` as its HOME (see the module's docstring)."""
    environ = dict(os.environ if environ is None else environ)
    env = {k: v for k, v in environ.items() if k in PASSED or k.startswith(PASSED_PREFIXES)}
    for name, value in _user_paths(environ).items():
        if name not in env and name.upper() not in env and name.lower() not in env:
            env[name] = value
    env.setdefault("PATH", os.defpath)
    env.update({"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "XDG_CACHE_HOME": str(home / ".cache")})
    return env


@contextlib.contextmanager
def installing() -> Iterator[dict[str, str]]:
    """A minimal environment whose HOME is an empty temporary folder, removed after the block."""
    with tempfile.TemporaryDirectory(prefix="llmhost-home-") as home:
        yield minimal(Path(home))
