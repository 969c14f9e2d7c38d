// Config values the operator gave this component (`config = { NAME = "value" }` under [sandbox] or
// [components.NAME]), through the standard wasi:config/store interface. Mirrors llmhost_guest/config.py:
//   const base = config.get("api-base") ?? "https://api.example.com";   // null: no such value
import { get as witGet, getAll as witGetAll } from "wasi:config/store@0.2.0-draft";
import { ConfigError, call, configError } from "./errors.js";

/** The value of `name`, or null if this component was given no such value. */
export function get(name) {
  if (typeof name !== "string") throw new TypeError(`a config name is a string, not ${typeof name}`);
  return call(configError, () => witGet(name)) ?? null;
}

/** Every value this component was given, as { name: value }. */
export function getAll() {
  return Object.fromEntries(call(configError, () => witGetAll()));
}

export { ConfigError };
