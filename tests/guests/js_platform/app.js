// js_platform: what a JavaScript guest reaches beyond the model, through the raw bindings (there is no JavaScript
// SDK): outbound HTTP (llmhost:llm/outbound-http), key-value state (wasi:keyvalue) and config values
// (wasi:config). tests/guests/platform_probe/app.py does the same through the Python SDK, and prints the same JSON;
// tests/e2e/test_js_platform.py compares the two. Each command prints one JSON value; a failure is
// {"error": KIND}, KIND named as the Python SDK's `.kind`.
//   config NAME                       get(NAME) and get-all
//   fetch METHOD URL BODY             send (BODY "" for none): status, content-type, body text
//   kv STORE KEY N                    open; set/get/exists; increment N times; list-keys (every page); delete
import { send } from "llmhost:llm/outbound-http@0.2.3";
import { open } from "wasi:keyvalue/store@0.2.0-draft2";
import { increment } from "wasi:keyvalue/atomics@0.2.0-draft2";
import { get, getAll } from "wasi:config/store@0.2.0-draft";

const QUOTA_PREFIX = "quota exceeded"; // how the host starts a quota error's `other` message

function kind(error) {
  // A WIT `err` is thrown with the error variant as its `payload`: `{ tag, val }`.
  if (error.payload === undefined) throw error;
  const { tag, val } = error.payload;
  return tag === "other" && String(val).startsWith(QUOTA_PREFIX) ? "quota" : tag;
}

function caught(fn) {
  try {
    return fn();
  } catch (error) {
    return { error: kind(error) };
  }
}

const commands = {
  config(name) {
    return caught(() => ({ value: get(name) ?? null, all: Object.fromEntries(getAll()) }));
  },
  fetch(method, url, body) {
    return caught(() => {
      const response = send({
        method,
        url,
        headers: [["accept", "application/json"]],
        body: body ? new TextEncoder().encode(body) : undefined,
        timeoutMs: 10000,
      });
      const type = response.headers.find(([name]) => name === "content-type");
      return { status: response.status, type: type ? type[1] : null, body: new TextDecoder().decode(response.body) };
    });
  },
  kv(store, key, n) {
    return caught(() => {
      const bucket = open(store);
      const decoder = new TextDecoder();
      bucket.set(`${key}.text`, new TextEncoder().encode("héllo"));
      const got = bucket.get(`${key}.text`);
      const missing = bucket.get(`${key}.missing`);
      const counts = [];
      for (let i = 0; i < Number(n); i++) counts.push(Number(increment(bucket, key, 1n))); // s64: a BigInt
      const keys = [];
      let cursor;
      do {
        const page = bucket.listKeys(cursor);
        keys.push(...page.keys);
        cursor = page.cursor;
      } while (cursor !== undefined);
      bucket.delete(`${key}.text`);
      return {
        get: got === undefined ? null : decoder.decode(got),
        missing: missing === undefined ? null : decoder.decode(missing),
        exists: bucket.exists(`${key}.text`),
        counts,
        keys: keys.sort(),
      };
    });
  },
};

export function run(args) {
  const [name, ...rest] = args;
  if (!(name in commands)) {
    console.error(`js_platform: unknown command ${name}`);
    return 2;
  }
  console.log(JSON.stringify(commands[name](...rest)));
  return 0;
}
