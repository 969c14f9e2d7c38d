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
from llmhost.domain.redaction import scrub
from llmhost.domain.types import encodable
from llmhost.grants.transfers import TransferBudget

if TYPE_CHECKING:
    from llmhost.grants.keyvalue.stores import KeyValueStores
    from llmhost.grants.outbound.client import OutboundClient
    from llmhost.grants.outbound.clients import OutboundClients


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
    # The config values read from the environment (`{ env = ... }`): masked out of messages by `scrub`.
    secrets: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, config: GrantsConfig, key: str, environ: Mapping[str, str] | None = None) -> Grants:
        """Resolve a component's grant keys; a `{ env = VAR }` value whose variable is unset, or is not UTF-8, is a
        `ConfigError`."""
        values = resolve_config_values(config.config, f"{key}.config", environ)
        from_env = (values[name] for name, value in config.config.items() if isinstance(value, EnvValue))
        return cls(
            key=key,
            key_value_stores=frozenset(config.key_value_stores),
            config=values,
            allowed_hosts=parse_allowed_hosts(config.allowed_outbound_hosts),
            max_response_bytes=config.max_response_bytes,
            max_outbound_requests=config.max_outbound_requests,
            secrets=tuple(dict.fromkeys(from_env)),
        )

    def scrub(self, text: str) -> str:
        """`text` with every value this component read from the environment replaced by `***`: apply it to each
        message the host writes about the component (a guest's error, a log line)."""
        return scrub(text, self.secrets)

    def __repr__(self) -> str:  # config values may be secrets: never in a repr, a log line or a traceback
        return (
            f"Grants(key={self.key!r}, key_value_stores={sorted(self.key_value_stores)}, "
            f"config=<{len(self.config)} values>, allowed_hosts={[h.pattern for h in self.allowed_hosts]})"
        )


def resolve_config_values(
    values: Mapping[str, str | EnvValue], key: str, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Config values as the guest reads them. Errors (an unset variable, text that is not UTF-8) name the key and
    the variable, never a value."""
    environ = os.environ if environ is None else environ
    resolved = {}
    for name, value in values.items():
        if not encodable(name, "utf-8"):
            raise ConfigError(f"`{key}`: the name {ascii(name)} is not valid UTF-8 (a name is a WIT string)")
        if isinstance(value, EnvValue):
            if value.env not in environ:
                raise ConfigError(
                    f"`{key}.{name}` reads the environment variable {value.env}, which is not set (set it for the "
                    "host process, or give the value in the config)"
                )
            resolved[name] = environ[value.env]
            if not encodable(resolved[name], "utf-8"):
                # os.environ holds bytes that are not UTF-8 as lone surrogates, which no WIT string can carry.
                raise ConfigError(
                    f"`{key}.{name}` reads the environment variable {value.env}, whose value is not valid UTF-8 (a "
                    "config value is a WIT string: set the variable to UTF-8 text)"
                )
        elif not encodable(value, "utf-8"):
            raise ConfigError(f"`{key}.{name}` is not valid UTF-8 text (a config value is a WIT string)")
        else:
            resolved[name] = value
    return resolved


class GrantServices:
    """What grants reach, held by a `Host` and closed with it: the declared key-value stores (each opened on first
    use) and each component's outbound HTTP client (`outbound`)."""

    def __init__(
        self, stores: Mapping[str, KeyValueStoreConfig], data_dir: Path, transfer_memory_mb: int | None = None
    ) -> None:
        self.store_configs = dict(stores)
        self.data_dir = data_dir
        # Host memory for byte lists handed into guests, shared by every component (`transfer-memory-mb`).
        self.transfers = TransferBudget(transfer_memory_mb)
        self._lock = threading.Lock()
        self._stores: KeyValueStores | None = None
        self._outbound: OutboundClients | None = None
        self._closed = False

    @property
    def stores(self) -> KeyValueStores:
        with self._lock:
            if self._stores is None:
                from llmhost.grants.keyvalue.stores import KeyValueStores

                self._stores = KeyValueStores(self.store_configs, self.data_dir)
            return self._stores

    def outbound(self, component: str) -> OutboundClient:
        """The outbound HTTP client of `component` (its grants' config key): its own connections, DNS threads."""
        with self._lock:
            if self._outbound is None:
                from llmhost.grants.outbound.clients import OutboundClients

                self._outbound = OutboundClients()
                if self._closed:  # too late: it refuses to send, and holds nothing to close
                    self._outbound.close()
            clients = self._outbound
        return clients.for_component(component)

    def close(self) -> None:
        with self._lock:
            stores, outbound, self._stores = self._stores, self._outbound, None
            self._closed = True
        if stores is not None:
            stores.close()
        if outbound is not None:
            outbound.close()
