// Key-value state through the standard wasi:keyvalue interfaces: the stores the operator declared and granted.
// Mirrors llmhost_guest/kv.py:
//   const visits = kv.open().increment("visits");     // the "default" store
//   kv.open("cache").set("answer", "42");             // strings are stored as UTF-8
//   kv.open("cache").getText("answer");                // "42" (null when unset); get() gives a Uint8Array
// Every failure throws a KvError whose `kind` is "no-such-store", "access-denied", "quota" or "other".
import { open as witOpen } from "wasi:keyvalue/store@0.2.0-draft2";
import { increment as witIncrement } from "wasi:keyvalue/atomics@0.2.0-draft2";
import { KvError, call, kvError } from "./errors.js";
import { S64_MAX, S64_MIN, bigInteger } from "./ints.js";

const wrap = (fn) => call(kvError, fn);
const encoder = new TextEncoder();
const decoder = new TextDecoder();

function key(k) {
  if (typeof k !== "string") throw new KvError("other", `invalid key: a key is a string, not ${typeof k}`);
  return k;
}

function bytes(value) {
  if (typeof value === "string") return encoder.encode(value);
  if (value instanceof Uint8Array) return value;
  if (ArrayBuffer.isView(value)) return new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
  if (value instanceof ArrayBuffer) return new Uint8Array(value);
  throw new KvError("other", `a value is a Uint8Array or a string, not ${typeof value} (setJson stores any JSON value)`);
}

/** One open store (a WIT `bucket`). Get it with `kv.open(name)`. */
export class Store {
  constructor(name, bucket) {
    this.name = name;
    this.bucket = bucket;
  }

  /** The value of `key` (a Uint8Array), or null when it is not set. */
  get(k) {
    const value = wrap(() => this.bucket.get(key(k)));
    return value === undefined ? null : Uint8Array.from(value);
  }

  /** The value of `key` as UTF-8 text, or null. */
  getText(k) {
    const value = this.get(k);
    return value === null ? null : decoder.decode(value);
  }

  /** The value of `key` parsed as JSON, or null when it is not set. */
  getJson(k) {
    const text = this.getText(k);
    return text === null ? null : JSON.parse(text);
  }

  /** Store `value` (a Uint8Array, or a string as UTF-8) under `key`; durable once it returns. */
  set(k, value) {
    const data = bytes(value);
    wrap(() => this.bucket.set(key(k), data));
  }

  /** Store `JSON.stringify(value)` under `key`. */
  setJson(k, value) {
    this.set(k, JSON.stringify(value));
  }

  /** Remove `key` (nothing happens when it is not set). */
  delete(k) {
    wrap(() => this.bucket.delete(key(k)));
  }

  exists(k) {
    return wrap(() => this.bucket.exists(key(k)));
  }

  /** Every key, in key order (all pages of `list-keys`). */
  keys() {
    const keys = [];
    let cursor;
    do {
      const page = wrap(() => this.bucket.listKeys(cursor));
      keys.push(...page.keys);
      cursor = page.cursor;
    } while (cursor !== undefined);
    return keys;
  }

  /** Add `delta` to the integer at `key` (unset: 0) and return the new value, atomically. */
  increment(k, delta = 1) {
    // s64: a BigInt on the wire, checked here (out of range, the bindings trap the guest).
    const wire = bigInteger(delta, "delta", S64_MIN, S64_MAX, (message) => new KvError("other", `invalid ${message}`));
    return Number(wrap(() => witIncrement(this.bucket, key(k), wire)));
  }

  toString() {
    return `kv.Store(${JSON.stringify(this.name)})`;
  }
}

const opened = new Map();

/** The store `name` (one bucket per store and instance: opening it again returns the same Store). */
export function open(name = "default") {
  let store = opened.get(name);
  if (store === undefined) {
    store = new Store(name, wrap(() => witOpen(name)));
    opened.set(name, store);
  }
  return store;
}

export { KvError };
