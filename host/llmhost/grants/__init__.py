"""Grants: what one component may reach beyond the model — key-value stores, config values, outbound HTTP.

`Grants` is resolved once per component from its `[sandbox]` or `[components.NAME]` keys (`GrantsConfig`), when
it is loaded; the linker built for the component closes over it, so every run of that component gets exactly
these grants and nothing more. `GrantServices` holds what the grants reach and lives as long as the `Host`: the
key-value stores (opened on first use) and the outbound HTTP client.
"""

from __future__ import annotations

from llmhost.grants.grants import Grants, GrantServices, resolve_config_values

__all__ = ["GrantServices", "Grants", "resolve_config_values"]
