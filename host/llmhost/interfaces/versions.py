"""The WIT package versions this host serves, and the full interface names of each.

Every version is served by the same implementation: a component built against 0.1.0 imports the 0.1.0 names
and gets host functions typed by its own (0.1.0) import types; the only conversion is in `llm_values` (0.2.0 fields
absent from a 0.1.0 params record take their defaults; 0.2.0 result fields are simply not lowered). Later
versions add functions only (0.2.1: `default-params`; 0.2.2: `generate-embeddings-for-tokens` and
`sequence.append-tokens-with-logprobs`; 0.2.3: the `outbound-http` interface and the `platform` world, which also
imports the standard `wasi:keyvalue` and `wasi:config` interfaces; 0.2.4: `outbound-http.send-streamed` and its
`incoming-body` resource, and `llm.get-model-kind`; 0.2.5: `llm.list-model-status`): a component that does not
import one never sees it.
"""

from __future__ import annotations

PACKAGE = "llmhost:llm"
VERSIONS = ("0.1.0", "0.2.0", "0.2.1", "0.2.2", "0.2.3", "0.2.4", "0.2.5")
CURRENT = VERSIONS[-1]


def interface_names(interface: str, since: str = VERSIONS[0]) -> tuple[str, ...]:
    """`llmhost:llm/<interface>@<version>` for every served version from `since` (the one that added it) on, oldest
    first."""
    return tuple(f"{PACKAGE}/{interface}@{version}" for version in VERSIONS[VERSIONS.index(since) :])


def current(interface: str) -> str:
    return f"{PACKAGE}/{interface}@{CURRENT}"


# The standard interfaces of other packages that every llmhost world imports (the `platform` world), served by the
# host as their proposals define them (wit/deps/).
KEYVALUE_STORE = "wasi:keyvalue/store@0.2.0-draft2"
KEYVALUE_ATOMICS = "wasi:keyvalue/atomics@0.2.0-draft2"
KEYVALUE_BATCH = "wasi:keyvalue/batch@0.2.0-draft2"
CONFIG_STORE = "wasi:config/store@0.2.0-draft"
