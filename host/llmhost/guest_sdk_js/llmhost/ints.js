// WIT integers from JavaScript values, checked against their WIT type's range before any host call.
import { InvalidInput } from "./errors.js";

// The ranges of the WIT integer types. componentize-js's bindings do not check them: a Number out of range is wrapped
// (`maxTokens: 2**32 + 3` reached the host as 3), a u64 BigInt too, and an s64 one traps the guest; the host cannot
// tell a wrapped value from an honest one, so the SDK checks every integer before it calls the host.
export const U8_MAX = 2 ** 8 - 1;
export const U16_MAX = 2 ** 16 - 1;
export const U32_MAX = 2 ** 32 - 1;
export const U64_MAX = 2n ** 64n - 1n;
export const S64_MIN = -(2n ** 63n);
export const S64_MAX = 2n ** 63n - 1n;

export function shown(value) {
  if (typeof value === "bigint") return `${value}n`;
  return typeof value === "string" ? JSON.stringify(value) : String(value);
}

/** `value` as a Number for a WIT unsigned integer of at most `max` (u8, u16, u32); `error(message)` makes the error
 * to throw (InvalidInput by default), naming `name`. */
export function unsigned(value, name, max = U32_MAX, error = (m) => new InvalidInput(m)) {
  // A string only in decimal digits (a logitBias key is one): Number("") is 0 and Number("0x10") 16.
  const digits = typeof value === "string" && /^\s*\d+\s*$/.test(value);
  const number = typeof value === "bigint" || typeof value === "number" || digits ? Number(value) : NaN;
  if (!Number.isInteger(number) || number < 0 || number > max) {
    throw error(`${name} must be an integer from 0 to ${max}, not ${shown(value)}`);
  }
  return number;
}

/** `value` as a BigInt for a WIT 64-bit integer, within [min, max]. */
export function bigInteger(value, name, min, max, error = (m) => new InvalidInput(m)) {
  let big;
  if (typeof value === "bigint") big = value;
  else if (typeof value === "number" && Number.isInteger(value)) big = BigInt(value);
  else if (typeof value === "string" && /^\s*-?\d+\s*$/.test(value)) big = BigInt(value);
  if (big === undefined || big < min || big > max) {
    throw error(`${name} must be an integer from ${min} to ${max}, not ${shown(value)}`);
  }
  return big;
}
