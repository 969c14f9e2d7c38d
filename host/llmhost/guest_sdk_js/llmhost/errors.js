// Errors as classes with a `kind`, mirroring the Python SDK (llmhost_guest.errors, .kv, .http, .config).
// A WIT `err` reaches JavaScript as a thrown Error whose `payload` is the variant, `{ tag, val }`: `fromWit` turns it
// into the class for its interface; anything else (a bug in the guest) is rethrown as it is. As in Python, `message`
// is the host's text and `kind` the WIT case; `String(error)` reads "KvError: ..." (the class names the interface).

// What every error class of the SDK is: `name` the class's (not new.target.name: a bundler may rename classes), `kind`
// the WIT case, `message` the host's text.
class KindError extends Error {
  constructor(name, kind, message) {
    super(message);
    this.name = name;
    this.kind = kind;
  }
}

export class LlmError extends KindError {
  /** `kind`: "invalid-input", "model-not-supported" or "runtime-error"; `message`: the host's text. */
  constructor(kind, message = "") {
    super("LlmError", kind, message);
  }
}

export class InvalidInput extends LlmError {
  constructor(message = "") {
    super("invalid-input", message);
    this.name = "InvalidInput";
  }
}

export class ModelNotSupported extends LlmError {
  constructor(message = "model not supported by this host") {
    super("model-not-supported", message);
    this.name = "ModelNotSupported";
  }
}

// The Python SDK's RuntimeError_ (JavaScript has no builtin of that name to shadow).
export class RuntimeError extends LlmError {
  constructor(message = "") {
    super("runtime-error", message);
    this.name = "RuntimeError";
  }
}

const LLM_KINDS = { "invalid-input": InvalidInput, "model-not-supported": ModelNotSupported, "runtime-error": RuntimeError };

export function llmError(payload) {
  const Kind = LLM_KINDS[payload.tag];
  if (Kind === undefined) return new LlmError(String(payload.tag), String(payload.val ?? ""));
  return payload.val ? new Kind(String(payload.val)) : new Kind();
}

export class KvError extends KindError {
  /** `kind`: "no-such-store", "access-denied", "quota" (a quota of the store: the message names its config key) or
   * "other" (an invalid key, the backend unreachable...). */
  constructor(kind, message = "") {
    super("KvError", kind, message);
  }
}

const QUOTA_PREFIX = "quota exceeded"; // the host starts every quota error's message with this (KV_QUOTA_PREFIX)

export function kvError(payload) {
  let kind = payload.tag;
  let message = String(payload.val ?? "");
  if (kind === "no-such-store" && !message) message = "no such key-value store is declared by the host";
  else if (kind === "access-denied" && !message) {
    message = "this key-value store is not granted to this component (`key-value-stores`)";
  } else if (kind === "other" && message.startsWith(QUOTA_PREFIX)) kind = "quota";
  else if (kind !== "no-such-store" && kind !== "access-denied") kind = kind === "other" ? "other" : "other";
  return new KvError(kind, message);
}

export const HTTP_KINDS = ["denied", "invalid-request", "timeout", "too-large", "connection"];

export class HttpError extends KindError {
  /** A request that got no response. `kind`: one of HTTP_KINDS. A 4xx or 5xx status is a Response, not this. */
  constructor(kind, message) {
    super("HttpError", kind, message);
  }
}

export function httpError(payload) {
  return new HttpError(HTTP_KINDS.includes(payload.tag) ? payload.tag : "connection", String(payload.val ?? ""));
}

export class ConfigError extends KindError {
  /** The host could not read the config values. `kind`: "upstream" or "io". */
  constructor(kind, message) {
    super("ConfigError", kind, message);
  }
}

export function configError(payload) {
  return new ConfigError(payload.tag === "io" ? "io" : "upstream", String(payload.val ?? ""));
}

/** `fn()`, its WIT `err` thrown as `convert(payload)`. */
export function call(convert, fn) {
  try {
    return fn();
  } catch (error) {
    if (error === null || typeof error !== "object" || error.payload === undefined || error.payload === null) throw error;
    if (typeof error.payload !== "object" || !("tag" in error.payload)) throw error;
    throw convert(error.payload);
  }
}
