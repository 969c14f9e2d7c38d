"""`Grants` (one component's, resolved from its config) and `GrantServices` (the host's, shared by every component)."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from llmhost.config import ConfigError, EnvValue, GrantsConfig, KeyValueStoreConfig
from llmhost.domain.hosts import AllowedHost, parse_allowed_hosts
from llmhost.domain.limits import MAX_OUTBOUND_REQUESTS, MAX_RESPONSE_BYTES

if TYPE_CHECKING:
    from llmhost.grants.keyvalue.stores import KeyValueStores
    from llmhost.grants.outbound.client import OutboundClient


@dataclass(frozen=True)
class Grants:
    """One component's grants. `key`: the config table they come from (`sandbox`, `components.chat`), named in every
    refusal so that the operator knows where to grant more."""

    key: str = "sandbox"
    key_value_stores: frozenset[str] = frozenset()
    config: Mapping[str, str] = field(default_factory=dict)  # resolved: `{ env = ... }` values already read
    allowed_hosts: tuple[AllowedHost, ...] = ()
    max_response_bytes: int = MAX_RESPONSE_BYTES
    max_outbound_requests: int = MAX_OUTBOUND_REQUESTS

    @classmethod
    def from_config(cls, config: GrantsConfig, key: str, environ: Mapping[str, str] | None = None) -> Grants:
        """Resolve a component's grant keys; a `{ env = VAR }` value whose variable is unset is a `ConfigError`."""
        return cls(
            key=key,
            key_value_stores=frozenset(config.key_value_stores),
            config=resolve_config_values(config.config, f"{key}.config", environ),
            allowed_hosts=parse_allowed_hosts(config.allowed_outbound_hosts),
            max_response_bytes=config.max_response_bytes,
            max_outbound_requests=config.max_outbound_requests,
        )

    def __repr__(self) -> str:  # config values may be secrets: never in a repr, a log line or a traceback
        return (
            f"Grants(key={self.key!r}, key_value_stores={sorted(self.key_value_stores)}, "
            f"config=<{len(self.config)} values>, allowed_hosts={[h.pattern for h in self.allowed_hosts]})"
        )


def resolve_config_values(
    values: Mapping[str, str | EnvValue], key: str, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Config values as the guest reads them. The error for an unset variable names the key and the variable, never
    a value."""
    environ = os.environ if environ is None else environ
    resolved = {}
    for name, value in values.items():
        if isinstance(value, EnvValue):
            if value.env not in environ:
                raise ConfigError(
                    f"`{key}.{name}` reads the environment variable {value.env}, which is not set (set it for the "
                    "host process, or give the value in the config)"
                )
            resolved[name] = environ[value.env]
        else:
            resolved[name] = value
    return resolved


class GrantServices:
    """What grants reach, shared by every component of a `Host` and closed with it: the declared key-value stores
    (each opened on first use) and the outbound HTTP client."""

    def __init__(self, stores: Mapping[str, KeyValueStoreConfig], data_dir: Path) -> None:
        self.store_configs = dict(stores)
        self.data_dir = data_dir
        self._lock = threading.Lock()
        self._stores: KeyValueStores | None = None
        self._client: OutboundClient | None = None
        self._closed = False

    @property
    def stores(self) -> KeyValueStores:
        with self._lock:
            if self._stores is None:
                from llmhost.grants.keyvalue.stores import KeyValueStores

                self._stores = KeyValueStores(self.store_configs, self.data_dir)
            return self._stores

    @property
    def client(self) -> OutboundClient:
        with self._lock:
            if self._client is None:
                from llmhost.grants.outbound.client import OutboundClient

                self._client = OutboundClient()
            return self._client

    def close(self) -> None:
        with self._lock:
            stores, client, self._stores, self._client = self._stores, self._client, None, None
            self._closed = True
        if stores is not None:
            stores.close()
        if client is not None:
            client.close()
