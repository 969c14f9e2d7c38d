"""The host side of `wasi:keyvalue@0.2.0-draft2` (wit/deps/keyvalue): `store`, `atomics` and `batch`.

A component opens only the stores its grants name (`key-value-stores`, else `access-denied`, the message naming the
grant's key), and only declared ones (else `no-such-store`). Buckets and compare-and-swap handles belong to the run
(one handle table each in the run scope, closed with it); the stores behind them belong to the `Host`
(`GrantServices.stores`). Each call is bounded by the run's deadline (`RunScope.time_left`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from wasmtime.component import (
    FuncType,
    LinkerInstance,
    Record,
    ResourceHost,
    ResourceType,
    ResultType,
    ValType,
    Variant,
    VariantType,
)

from llmhost.domain.errors import AccessDenied, LlmError, StoreFailure
from llmhost.domain.limits import MAX_KV_HANDLES
from llmhost.grants import Grants, GrantServices
from llmhost.grants.keyvalue.stores import Store
from llmhost.interfaces.handover import hand_over
from llmhost.interfaces.versions import KEYVALUE_ATOMICS, KEYVALUE_BATCH, KEYVALUE_STORE
from llmhost.run.scope import HandleTable
from llmhost.runtime import abi
from llmhost.runtime.abi import define_functions
from llmhost.runtime.sandbox import scope_of

_log = logging.getLogger(__name__)

INTERFACES = (KEYVALUE_STORE, KEYVALUE_ATOMICS, KEYVALUE_BATCH)
BUCKET_TYPE_ID = 201
CAS_TYPE_ID = 202


@dataclass(frozen=True)
class Cas:
    """A compare-and-swap in progress: the key, and its value when the `cas` was made (None: unset)."""

    store: Store
    key: str
    current: bytes | None


def _table(store: Any, key: str, what: str) -> HandleTable[Any]:
    return scope_of(store).table(key, lambda: HandleTable[Any](what), lambda table: table.drain())


def buckets(store: Any) -> HandleTable[Store]:
    """The run's open buckets (each a reference to a host-owned store: closing the run closes no store)."""
    return _table(store, "kv-buckets", "key-value bucket")


def cases(store: Any) -> HandleTable[Cas]:
    return _table(store, "kv-cas", "compare-and-swap handle")


def _add(table: HandleTable[Any], item: Any, what: str) -> int:
    if len(table) >= MAX_KV_HANDLES:
        raise StoreFailure(
            f"this run holds {MAX_KV_HANDLES} open {what} handles, the most it may hold at once (drop some first)"
        )
    return table.add(item)


def define_keyvalue(
    instance: LinkerInstance, name: str, grants: Grants, services: GrantServices, imported: dict[str, FuncType]
) -> None:
    """Define the functions of interface `name` (one of INTERFACES) that the component imports."""

    def time_left(store: Any) -> float | None:
        return scope_of(store).time_left()

    def bucket(store: Any, handle: Any) -> Store:
        return buckets(store).get(abi.resource_rep(store, handle))

    logged: set[str] = set()

    def open_store(store: Any, identifier: str) -> Any:
        if identifier not in grants.key_value_stores:
            # WIT's `access-denied` carries no message: the operator learns which key grants the store from the log
            # (once per store and component, however often a guest retries).
            message = (
                f"key-value store {identifier[:100]!r} is not granted to this component (add it to "
                f"`{grants.key}.key-value-stores`)"
            )
            if identifier not in logged and len(logged) < 100:
                logged.add(identifier)
                _log.warning("%s", message)
            raise AccessDenied(message)
        opened = services.stores.open(identifier)  # NoSuchStore for an undeclared one
        return abi.own_resource(_add(buckets(store), opened, "bucket"), BUCKET_TYPE_ID)

    def on_bucket(call: Callable[..., Any]) -> Callable[..., Any]:
        """A function whose first WIT argument is a borrowed bucket: resolved first (consuming the borrow)."""
        return lambda store, handle, *args: call(bucket(store, handle), *args, time_left=time_left(store))

    def new_cas(store: Any, handle: Any, key: str) -> Any:
        opened = bucket(store, handle)
        current = opened.get(key, time_left(store))
        return abi.own_resource(_add(cases(store), Cas(opened, key, current), "compare-and-swap"), CAS_TYPE_ID)

    def cas_current(store: Any, handle: Any) -> bytes | None:
        return handed(store, cases(store).get(abi.resource_rep(store, handle)).current)

    def handed(store: Any, value: bytes | None) -> bytes | None:
        """A value on its way into the guest: its host-memory cost reserved first (interfaces/handover.py)."""
        if value is not None:
            hand_over(store, services.transfers, len(value), f"a {len(value)}-byte key-value value")
        return value

    def get(store: Any, handle: Any, key: str) -> bytes | None:
        return handed(store, bucket(store, handle).get(key, time_left(store)))

    def get_many(store: Any, handle: Any, keys: list[str]) -> list[tuple[str, bytes] | None]:
        found = _get_many(bucket(store, handle), keys, time_left=time_left(store))
        size = sum(len(pair[1]) for pair in found if pair is not None)
        hand_over(store, services.transfers, size, f"{size} bytes of key-value values")
        return found

    identity, nothing = (lambda value: value), (lambda _: None)
    fallible: dict[str, abi.Binding]
    if name == KEYVALUE_STORE:
        instance.add_resource("bucket", ResourceType.host(BUCKET_TYPE_ID), _dropped(buckets))
        fallible = {
            "open": (open_store, identity),
            "[method]bucket.get": (get, identity),
            "[method]bucket.set": (on_bucket(lambda s, key, value, **t: s.set(key, bytes(value), **t)), nothing),
            "[method]bucket.delete": (on_bucket(Store.delete), nothing),
            "[method]bucket.exists": (on_bucket(Store.exists), identity),
            "[method]bucket.list-keys": (on_bucket(Store.list_keys), lambda page: key_response_to_wit(*page)),
        }
        define_functions(instance, imported, fallible, scrub=grants.scrub, traced="keyvalue")
    elif name == KEYVALUE_ATOMICS:
        instance.add_resource("cas", ResourceType.host(CAS_TYPE_ID), _dropped(cases))
        fallible = {
            "[static]cas.new": (new_cas, identity),
            "[method]cas.current": (cas_current, identity),
            "increment": (on_bucket(Store.increment), identity),
        }
        plain = {"swap": _swap(imported["swap"], time_left, grants.scrub)} if "swap" in imported else {}
        define_functions(instance, imported, fallible, plain, scrub=grants.scrub, traced="keyvalue")
    elif name == KEYVALUE_BATCH:
        fallible = {
            "get-many": (get_many, optional_key_values_to_wit),
            "set-many": (on_bucket(lambda s, pairs, **t: s.set_many(key_values_from_wit(pairs), **t)), nothing),
            "delete-many": (on_bucket(lambda s, keys, **t: s.delete_many([str(k) for k in keys], **t)), nothing),
        }
        define_functions(instance, imported, fallible, scrub=grants.scrub, traced="keyvalue")


def _get_many(store: Store, keys: list[str], *, time_left: float | None) -> list[tuple[str, bytes] | None]:
    keys = [str(key) for key in keys]
    values = store.get_many(keys, time_left)
    return [None if value is None else (key, value) for key, value in zip(keys, values, strict=True)]


def _swap(
    func_type: FuncType, time_left: Callable[[Any], float | None], scrub: Callable[[str], str]
) -> Callable[..., Any]:
    """`swap(cas, value)`: consumes the `cas`. Its error type is not the plain `error`, so it is encoded here, and
    (like every host function) it never raises: a failure is a value."""
    encoder = CasSwapEncoder.from_wit(func_type.result)

    def swap(store: Any, handle: Any, value: bytes) -> Any:
        try:
            cas = cases(store).pop(abi.resource_rep(store, handle))
            if cas is None:
                raise StoreFailure("this compare-and-swap handle was already used")
            swapped, current = cas.store.swap(cas.key, cas.current, bytes(value), time_left(store))
            if swapped:
                return encoder.ok()
            fresh = _add(cases(store), Cas(cas.store, cas.key, current), "compare-and-swap")
            return encoder.cas_failed(abi.own_resource(fresh, CAS_TYPE_ID))
        except LlmError as error:
            return encoder.store_error(error.scrubbed(scrub))
        except Exception as error:  # a host bug: a value, not a trap
            _log.exception("key-value swap failed")
            return encoder.store_error(LlmError(scrub(f"internal host error: {type(error).__name__}: {error}")))

    return swap


def _dropped(table: Callable[[Any], HandleTable[Any]]) -> Callable[[Any, int], None]:
    def destructor(store: Any, rep: int) -> None:
        try:
            table(store).pop(rep)
        except Exception:  # a run that has ended has nothing left to free; dropping must never trap
            _log.debug("dropping key-value handle %d after its run ended", rep)

    return destructor


# -- converters (wit/deps/keyvalue) --


def key_response_to_wit(keys: Iterable[str], cursor: str | None) -> Record:
    """`store.key-response`: one page of keys, and the cursor of the next (none: the last page)."""
    return abi.record({"keys": [abi.string_to_wit(key) for key in keys], "cursor": cursor})


def key_values_from_wit(pairs: Iterable[Any]) -> list[tuple[str, bytes]]:
    """`list<tuple<string, list<u8>>>` -> (key, value) pairs."""
    return [(str(key), bytes(value)) for key, value in pairs]


def optional_key_values_to_wit(pairs: Iterable[tuple[str, bytes] | None]) -> list[tuple[str, bytes] | None]:
    """`list<option<tuple<string, list<u8>>>>` (batch `get-many`)."""
    return [None if pair is None else (abi.string_to_wit(pair[0]), bytes(pair[1])) for pair in pairs]


@dataclass(frozen=True)
class CasSwapEncoder:
    """Values of `atomics.swap`'s `result<_, cas-error>`, where `cas-error` is `store-error(error)` or `cas-failed(cas)`
    (an untagged variant in wasmtime-py: the payload's class picks the case), so `ResultEncoder` cannot build it."""

    tagged: bool  # the result
    cas_error_tagged: bool
    errors: abi.ErrorEncoder

    @classmethod
    def from_wit(cls, result_type: ValType | None) -> CasSwapEncoder:
        if not isinstance(result_type, ResultType) or not isinstance(result_type.err, VariantType):
            raise TypeError("expected swap's result<_, cas-error>")
        store_error = dict(result_type.err.cases).get("store-error")
        if store_error is None:
            raise TypeError("expected swap's cas-error to have a store-error case")
        return cls(result_type._tagged(), result_type.err._tagged(), abi.ErrorEncoder.from_wit(store_error))

    def ok(self) -> Any:
        return Variant("ok", None) if self.tagged else None

    def store_error(self, error: LlmError) -> Any:
        value = self.errors.encode(error)
        return self._err(Variant("store-error", value) if self.cas_error_tagged else value)

    def cas_failed(self, cas: ResourceHost) -> Any:
        return self._err(Variant("cas-failed", cas) if self.cas_error_tagged else cas)

    def _err(self, value: Any) -> Any:
        return Variant("err", value) if self.tagged else value
