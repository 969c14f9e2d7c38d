// Options -> WIT `inferencing-params` (each one not given takes the host's default for the model, WIT
// `default-params`, asked once per model), and WIT results -> plain objects. Mirrors llmhost_guest/params.py.
import * as wit from "llmhost:llm/llm@0.2.5";
import { InvalidInput, call, llmError } from "./errors.js";
import { U32_MAX, U64_MAX, U8_MAX, bigInteger, unsigned } from "./ints.js";

export const DEFAULT_MODEL = "gemma-3-270m"; // completion (`infer`, `inferStream`): a pretrained (base) model
export const DEFAULT_CHAT_MODEL = "smollm2-135m"; // `chat`, `chatStream`, `applyChatTemplate`: the instruct built-in
export const DEFAULT_EMBEDDING_MODEL = "all-minilm-l6-v2"; // `embed`: the built-in sentence-embedding model

// The options that fill `inferencing-params` (its fields but `constraint`, which STRUCTURED set).
export const FIELDS = [
  "maxTokens", "repeatPenalty", "repeatPenaltyLastNTokenCount", "stop", "temperature", "topK", "topP", "seed",
  "logprobs", "frequencyPenalty", "presencePenalty", "logitBias",
];
export const STRUCTURED = ["jsonSchema", "jsonObject", "regex", "grammar", "choice"];
const known = new Set([...FIELDS, ...STRUCTURED]);
const cached = new Map(); // model -> the host's params for it

export const wrap = (fn) => call(llmError, fn);

/** The host's params for `model` when none are given, as the options `build` takes. */
export function defaults(model = DEFAULT_MODEL) {
  let found = cached.get(model);
  if (found === undefined) {
    found = wrap(() => wit.defaultParams(model));
    cached.set(model, found);
  }
  const values = {};
  for (const name of FIELDS) values[name] = found[name];
  values.seed = found.seed === undefined ? undefined : Number(found.seed);
  values.logitBias = Object.fromEntries(found.logitBias.map((e) => [e.tokenId, e.bias]));
  values.stop = [...found.stop];
  return values;
}

function constraint(options) {
  const given = STRUCTURED.filter((name) => options[name] !== undefined && options[name] !== null && options[name] !== false);
  if (given.length === 0) return undefined;
  if (given.length > 1) throw new InvalidInput(`give at most one of ${STRUCTURED.join(", ")} (got ${given.join(", ")})`);
  const [name] = given;
  const value = options[name];
  switch (name) {
    case "jsonSchema":
      return { tag: "json-schema", val: typeof value === "string" ? value : JSON.stringify(value) };
    case "jsonObject":
      return { tag: "json-object" };
    case "regex":
      return { tag: "regex", val: String(value) };
    case "grammar":
      return { tag: "grammar", val: String(value) };
    default:
      return { tag: "choice", val: Array.from(value, String) };
  }
}

const integer = (value, name, max = U32_MAX) => unsigned(value, name, max);

/** WIT `inferencing-params` from options; `skip` names options the caller handles (`model`, `tools`...). */
export function build(options = {}, model = DEFAULT_MODEL, skip = ["model"]) {
  const unknown = Object.keys(options)
    .filter((k) => !known.has(k) && !skip.includes(k))
    .sort();
  if (unknown.length > 0) throw new TypeError(`unknown option(s): ${unknown.join(", ")}`);
  const values = defaults(model);
  // `undefined` is "not given" (the host's default); `null` is "none" where the WIT field is an option (maxTokens:
  // null is no budget), as Python's None.
  for (const name of FIELDS) if (options[name] !== undefined) values[name] = options[name];
  const stop = values.stop ?? [];
  const bias = values.logitBias instanceof Map ? [...values.logitBias] : Object.entries(values.logitBias ?? {});
  return {
    maxTokens: values.maxTokens === null || values.maxTokens === undefined ? undefined : integer(values.maxTokens, "maxTokens"),
    repeatPenalty: Number(values.repeatPenalty),
    repeatPenaltyLastNTokenCount: integer(values.repeatPenaltyLastNTokenCount, "repeatPenaltyLastNTokenCount"),
    stop: typeof stop === "string" ? [stop] : Array.from(stop, String),
    temperature: Number(values.temperature),
    topK: integer(values.topK, "topK"),
    topP: Number(values.topP),
    seed: values.seed === null || values.seed === undefined ? undefined : bigInteger(values.seed, "seed", 0n, U64_MAX),
    constraint: constraint(options),
    logprobs:
      values.logprobs === null || values.logprobs === undefined ? undefined : integer(values.logprobs, "logprobs", U8_MAX),
    frequencyPenalty: Number(values.frequencyPenalty),
    presencePenalty: Number(values.presencePenalty),
    logitBias: bias.map(([id, b]) => ({ tokenId: integer(id, "logitBias token id"), bias: Number(b) })),
  };
}

export function usage(u) {
  return { promptTokens: u.promptTokenCount, generatedTokens: u.generatedTokenCount };
}

export function logprobs(entries) {
  return Array.from(entries, (e) => ({
    tokenId: e.tokenId,
    bytes: Uint8Array.from(e.bytes),
    logprob: e.logprob,
    top: Array.from(e.top, (t) => ({ tokenId: t.tokenId, bytes: Uint8Array.from(t.bytes), logprob: t.logprob })),
  }));
}

export function chunk(c) {
  return { text: c.text, tokenIds: Array.from(c.tokenIds), usage: usage(c.usage), logprobs: logprobs(c.logprobs) };
}

export function done(d) {
  return { finishReason: d.finishReason, usage: usage(d.usage) };
}
