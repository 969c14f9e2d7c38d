// sdk_probe_js: the JavaScript SDK ("llmhost") doing what its Python twins do through llmhost_guest, on the same
// arguments, for tests/e2e/test_js_sdk.py, which compares the outputs.
//   errors MODEL, chat MODEL TOOL_CHOICE SEEDS      as tests/guests/sdk_probe/app.py: {"ok": VALUE} or {"err"}
//   config NAME, fetch METHOD URL BODY, kv STORE KEY N   as tests/guests/platform_probe/app.py: one JSON value, a
//                                                   failure {"error": KIND}
//   basics MODEL PROMPT N                           infer / inferStream (iterator and callback) / chat / chatStream /
//                                                   tokenize / embed / listModelStatus, compared with the Python
//                                                   host API
//   refusals                                        the SDK's own input checks (no host call): error classes and kinds
//   ranges MODEL                                    integers out of their WIT type's range through the SDK: what
//                                                   each throws (null: nothing thrown)
//   raw CASE MODEL                                  the same through the WIT bindings themselves, with no SDK: what
//                                                   the host got (a case may trap the guest)
import * as wit from "llmhost:llm/llm@0.2.5";
import { increment as witIncrement } from "wasi:keyvalue/atomics@0.2.0-draft2";
import { open as witOpen } from "wasi:keyvalue/store@0.2.0-draft2";
import {
  ConfigError, HttpError, InvalidInput, KvError, LlmError, ModelNotSupported, config, http, kv, llm,
} from "llmhost";

function errorJson(error) {
  return {
    type: error.name,
    kind: error.kind,
    message: error.message,
    invalid: error instanceof InvalidInput,
    unsupported: error instanceof ModelNotSupported,
  };
}

function opErrors(model) {
  const out = {};
  const actions = {
    "unknown-model": () => llm.infer("hi", { model: "no-such-model" }),
    "bad-temperature": () => llm.infer("hi", { model, temperature: -1.0 }),
    "two-constraints": () => llm.infer("hi", { model, regex: "a", choice: ["a"] }),
    "chat-unknown-model": () => llm.chat([["user", "hi"]], { model: "no-such-model" }),
    "stream-bad-top-p": () => llm.inferStream("hi", { model, topP: 5.0 }),
    "bad-role": () => llm.chat([{ role: "robot", content: "hi" }], { model }),
  };
  for (const [name, action] of Object.entries(actions)) {
    try {
      action();
      out[name] = null;
    } catch (error) {
      if (!(error instanceof LlmError)) throw error;
      out[name] = errorJson(error);
    }
  }
  return out;
}

const WEATHER = {
  type: "function",
  function: {
    name: "get_weather",
    description: "The weather forecast for a city",
    parameters: {
      type: "object",
      properties: {
        city: { type: "string" },
        days: { type: "integer", minimum: 1, maximum: 7 },
        unit: { enum: ["celsius", "fahrenheit"] },
      },
      required: ["city", "days", "unit"],
    },
  },
};

function replyJson(reply) {
  return {
    content: reply.content,
    text: reply.text,
    calls: reply.toolCalls.map((c) => ({ id: c.id, name: c.name, args: c.args })),
    finish_reason: reply.finishReason,
    usage: [reply.usage.promptTokens, reply.usage.generatedTokens],
  };
}

function opChat(model, toolChoice, seeds) {
  const ask = [{ role: "system", content: "You are brief." }, ["user", "What is the weather in Paris for 3 days?"]];
  const replies = [];
  for (let seed = 0; seed < Number(seeds); seed++) {
    replies.push(replyJson(llm.chat(ask, { model, tools: [WEATHER], toolChoice, maxTokens: 96, seed })));
  }
  const plain = llm.chat([["user", "Say hello."]], { model, maxTokens: 12, temperature: 0.0 });
  return { replies, plain: replyJson(plain) };
}

function opBasics(model, prompt, count) {
  const options = { model, maxTokens: Number(count), temperature: 0 }; // the rest: the host's defaults
  const done = llm.infer(prompt, options);
  const stream = llm.inferStream(prompt, options);
  const chunks = [];
  for (const chunk of stream) chunks.push({ text: chunk.text, ids: chunk.tokenIds });
  const called = [];
  const callback = llm.inferStream(prompt, options, (chunk) => called.push(chunk.text));
  const messages = [["user", prompt]];
  const reply = llm.chat(messages, options);
  const chatParts = [];
  const chatStream = llm.chatStream(messages, options);
  for (const item of chatStream) chatParts.push(item.text);
  const vectors = llm.embed(["a cat", prompt]);
  return {
    infer: { text: done.text, string: String(done), finish: done.finishReason, usage: done.usage },
    stream: { chunks, text: stream.text, done: stream.done },
    callback: { parts: called, done: callback.done },
    chat: { text: reply.text, finish: reply.finishReason, usage: reply.usage, streamed: chatParts.join(""), done: chatStream.done },
    tokens: llm.tokenize(prompt, { model }),
    embed: { count: vectors.length, dims: vectors[0].length, usage: vectors.usage, first: vectors[0].slice(0, 4) },
    kind: llm.modelKind(model),
    info: llm.modelInfo(model),
    status: llm.listModelStatus().find((s) => s.name === model),
  };
}

function opRefusals() {
  const out = {};
  const cases = {
    "unknown-option": () => llm.infer("hi", { maxTokenz: 3 }),
    "kv-bad-key": () => kv.open("default").get(42),
    "kv-bad-value": () => kv.open("default").set("k", 42),
    "http-bad-timeout": () => http.get("http://127.0.0.1:9/", { timeoutS: -1 }),
    "http-big-body": () => http.post("http://127.0.0.1:9/", { body: new Uint8Array(http.MAX_BODY_BYTES + 1) }),
    "config-bad-name": () => config.get(7),
  };
  for (const [name, action] of Object.entries(cases)) {
    try {
      action();
      out[name] = null;
    } catch (error) {
      out[name] = { type: error.name, kind: error.kind ?? null, http: error instanceof HttpError, kv: error instanceof KvError };
    }
  }
  return out;
}

// Each integer the SDK passes to the host, out of its WIT type's range (u32, u8, u64, s64, u16).
function opRanges(model) {
  const store = () => kv.open("default");
  const cases = {
    "maxTokens": () => llm.infer("hi", { model, maxTokens: 2 ** 32 + 3 }),
    "maxTokens-negative": () => llm.infer("hi", { model, maxTokens: -1 }),
    "maxTokens-fraction": () => llm.inferStream("hi", { model, maxTokens: 1.5 }),
    "topK": () => llm.infer("hi", { model, topK: 2 ** 32 }),
    "repeatPenaltyLastNTokenCount": () => llm.infer("hi", { model, repeatPenaltyLastNTokenCount: 2 ** 40 }),
    "seed": () => llm.infer("hi", { model, seed: 2n ** 64n }),
    "seed-negative": () => llm.infer("hi", { model, seed: -1 }),
    "logprobs": () => llm.infer("hi", { model, logprobs: 256 + 2 }),
    "logitBias": () => llm.infer("hi", { model, logitBias: { [2 ** 32 + 1]: 5.0 } }),
    "chat-maxTokens": () => llm.chat([["user", "hi"]], { model, maxTokens: 2 ** 32 + 3 }),
    "kv-increment": () => store().increment("k", 2n ** 63n),
    "kv-increment-low": () => store().increment("k", -(2n ** 63n) - 1n),
    "kv-increment-fraction": () => store().increment("k", 0.5),
    "http-status": () => http.respond(null, 65536 + 200, {}, "x"),
  };
  const out = {};
  for (const [name, action] of Object.entries(cases)) {
    try {
      action();
      out[name] = null;
    } catch (error) {
      out[name] = { type: error.name, kind: error.kind ?? null, message: error.message };
    }
  }
  // In range, the same calls reach the host: the largest s64 and a u32 budget as the host sees it.
  out["kv-increment-max"] = store().increment("max", 2n ** 63n - 1n) === 2 ** 63;
  out["maxTokens-2"] = llm.infer("hi", { model, maxTokens: 2, temperature: 0 }).usage.generatedTokens;
  return out;
}

// The WIT bindings with no SDK between: what reaches the host, or a trap of this guest.
function opRaw(name, model) {
  const params = wit.defaultParams(model);
  switch (name) {
    case "maxTokens":
      return wit.infer(model, "hi", { ...params, maxTokens: 2 ** 32 + 3, temperature: 0 }).usage.generatedTokenCount;
    case "seed":
      return wit.infer(model, "hi", { ...params, maxTokens: 1, seed: 2n ** 64n + 1n }).usage.generatedTokenCount;
    case "increment":
      return Number(witIncrement(witOpen("default"), "raw", 2n ** 63n));
    default:
      throw new Error(`unknown raw case ${name}`);
  }
}

// The twins of tests/guests/platform_probe/app.py.
function opConfig(name) {
  return { value: config.get(name), all: config.getAll() };
}

function opFetch(method, url, body) {
  const reply = http.request(method, url, { headers: { accept: "application/json" }, body: body || undefined, timeoutS: 10 });
  return { status: reply.status, type: reply.headers["content-type"] ?? null, body: reply.text() };
}

function opKv(storeName, key, n) {
  const store = kv.open(storeName);
  store.set(`${key}.text`, "héllo");
  const got = store.getText(`${key}.text`);
  const missing = store.getText(`${key}.missing`);
  const counts = [];
  for (let i = 0; i < Number(n); i++) counts.push(store.increment(key));
  const keys = store.keys().sort();
  store.delete(`${key}.text`);
  return { get: got, missing, exists: store.exists(`${key}.text`), counts, keys };
}

const SDK_PROBE = { errors: opErrors, chat: opChat, basics: opBasics, refusals: opRefusals, ranges: opRanges, raw: opRaw };
const PLATFORM_PROBE = { config: opConfig, fetch: opFetch, kv: opKv };

export function run(args) {
  const [name, ...rest] = args;
  if (name in PLATFORM_PROBE) {
    let value;
    try {
      value = PLATFORM_PROBE[name](...rest);
    } catch (error) {
      if (!(error instanceof ConfigError || error instanceof HttpError || error instanceof KvError)) throw error;
      value = { error: error.kind };
    }
    console.log(JSON.stringify(value));
    return 0;
  }
  if (!(name in SDK_PROBE)) {
    console.error(`sdk_probe_js: unknown operation ${name}`);
    return 2;
  }
  try {
    console.log(JSON.stringify({ ok: SDK_PROBE[name](...rest) }));
  } catch (error) {
    if (!(error instanceof LlmError)) throw error;
    console.log(JSON.stringify({ err: { kind: error.name, message: error.message } }));
    return 1;
  }
  return 0;
}
