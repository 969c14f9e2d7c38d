// Outbound HTTP through the host's `outbound-http` interface (only to the hosts the operator granted in
// `allowed-outbound-hosts`), and responses of any size for http-app guests. Mirrors llmhost_guest/http.py:
//   const reply = http.get("https://api.example.com/weather?city=Paris", { timeoutS: 5 });
//   if (reply.status === 200) console.log(reply.json().temperature);
// A 4xx or 5xx status is a Response, not an error; a request that got no response throws HttpError (`kind`:
// "denied", "invalid-request", "timeout", "too-large", "connection").
import { send } from "llmhost:llm/outbound-http@0.2.5";
import { HTTP_KINDS, HttpError, call, httpError } from "./errors.js";
import { U16_MAX, U32_MAX, unsigned } from "./ints.js";

// The largest body one request can carry (the host's MAX_OUTBOUND_BODY_BYTES): refused here, before the call.
export const MAX_BODY_BYTES = 2 * 1024 * 1024;
const MAX_TIMEOUT_MS = U32_MAX; // WIT u32: a longer timeout is this one
const encoder = new TextEncoder();

export class Response {
  /** `status`; `headerList`: [name, value] pairs in order; `body`: the bytes as the server sent them. */
  constructor(status, headerList, body) {
    this.status = status;
    this.headerList = headerList;
    this.body = body;
  }

  /** Lower-case name -> value (a repeated field's values joined by ", "). */
  get headers() {
    const joined = {};
    for (const [name, value] of this.headerList) joined[name] = name in joined ? `${joined[name]}, ${value}` : value;
    return joined;
  }

  get ok() {
    return this.status >= 200 && this.status < 300;
  }

  /** The body as text (UTF-8, bad bytes replaced). */
  text() {
    return new TextDecoder().decode(this.body);
  }

  json() {
    return JSON.parse(this.text());
  }
}

function fields(headers) {
  if (headers === undefined || headers === null) return [];
  const pairs = Array.isArray(headers) ? headers : Object.entries(headers);
  return pairs.map((pair) => {
    if (!Array.isArray(pair) || pair.length !== 2) {
      throw new HttpError("invalid-request", `headers must be [name, value] pairs, not ${JSON.stringify(pair)}`);
    }
    return [String(pair[0]), String(pair[1])];
  });
}

function payload(body, headerFields) {
  if (body === undefined || body === null) return undefined;
  let data;
  if (body instanceof Uint8Array) data = body;
  else if (typeof body === "string") data = encoder.encode(body);
  else if (typeof body === "object") {
    if (!headerFields.some(([name]) => name.toLowerCase() === "content-type")) {
      headerFields.push(["content-type", "application/json"]);
    }
    data = encoder.encode(JSON.stringify(body));
  } else throw new HttpError("invalid-request", `the body must be a Uint8Array, a string or an object, not ${typeof body}`);
  if (data.length > MAX_BODY_BYTES) {
    throw new HttpError(
      "invalid-request",
      `the body is ${data.length} bytes, over the ${MAX_BODY_BYTES} bytes one request can carry; not sent`,
    );
  }
  return data;
}

function timeoutMs(timeoutS) {
  if (timeoutS === undefined || timeoutS === null) return undefined;
  if (typeof timeoutS !== "number" || Number.isNaN(timeoutS) || timeoutS < 0) {
    throw new HttpError("invalid-request", `timeoutS must be a number of seconds >= 0, not ${timeoutS}`);
  }
  return Math.min(MAX_TIMEOUT_MS, Math.round(timeoutS * 1000));
}

/** Send one request and wait for the whole response. Options: `headers` (an object or [name, value] pairs), `body`
 * (a Uint8Array, a string sent as UTF-8, or an object sent as JSON), `timeoutS`. Throws HttpError. */
export function request(method, url, options = {}) {
  const headerFields = fields(options.headers);
  const body = payload(options.body, headerFields);
  const wire = { method: String(method), url: String(url), headers: headerFields, body, timeoutMs: timeoutMs(options.timeoutS) };
  const reply = call(httpError, () => send(wire));
  return new Response(reply.status, reply.headers.map(([n, v]) => [n, v]), Uint8Array.from(reply.body));
}

export const get = (url, options = {}) => request("GET", url, options);
export const post = (url, options = {}) => request("POST", url, options);

// -- responses of any size for http-app guests (wit/http.wit) ----------------------------------------------------

export const WRITE_BYTES = 1024 * 1024; // one `write` chunk: wasmtime copies ~2.6 MiB at most out of a guest per call
export const INLINE_BYTES = WRITE_BYTES; // a body up to this size goes in the `response` record itself

/** The `response` for `handler.handle` to return: `body` (a Uint8Array or a string) in it when it is small;
 * otherwise `writer.start` and the body through `writer.write` in pieces, and an empty response. */
export function respond(writer, status, headers, body) {
  // WIT u16: out of range, the bindings would wrap it (65736 would answer 200), so it is a RangeError here.
  status = unsigned(status, "status", U16_MAX, (message) => new RangeError(message));
  const data = typeof body === "string" ? encoder.encode(body) : body;
  const headerFields = fields(headers);
  if (data.length <= INLINE_BYTES) return { status, headers: headerFields, body: data };
  writer.start(status, headerFields);
  writeAll(writer, data);
  return { status, headers: headerFields, body: new Uint8Array() };
}

/** `writer.write(data)` in pieces of at most WRITE_BYTES (after `start`); a string is written as UTF-8. */
export function writeAll(writer, data) {
  const bytes = typeof data === "string" ? encoder.encode(data) : data;
  for (let offset = 0; offset < bytes.length; offset += WRITE_BYTES) writer.write(bytes.subarray(offset, offset + WRITE_BYTES));
}

export { HTTP_KINDS as KINDS, HttpError };
