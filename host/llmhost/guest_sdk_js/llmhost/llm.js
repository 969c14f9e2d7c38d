// One-off calls of the WIT interface `llm` (llmhost:llm@0.2.5): infer, inferStream, chat, chatStream, embed, and the
// model facts. Mirrors llmhost_guest/llm.py, with options objects in place of keyword arguments:
//   llm.infer("The capital of France is", { maxTokens: 8, temperature: 0 })
import * as wit from "llmhost:llm/llm@0.2.5";
import { InvalidInput } from "./errors.js";
import {
  DEFAULT_CHAT_MODEL, DEFAULT_EMBEDDING_MODEL, DEFAULT_MODEL, build, logprobs, usage, wrap,
} from "./params.js";

// What `Completion` and `Chunk` share: generated `text` (`String(x)` is the text), its `usage` and `logprobs`.
class Generated {
  constructor(text, usage, logprobs) {
    this.text = text;
    this.usage = usage;
    this.logprobs = logprobs;
  }
  toString() {
    return this.text;
  }
}

/** The result of `infer`: `text`, `finishReason` ("stop", "length"...), `usage`, `logprobs`; `String(c)` is the text. */
export class Completion extends Generated {
  constructor(text, finishReason, usage, logprobs = []) {
    super(text, usage, logprobs);
    this.finishReason = finishReason;
  }
}

/** One piece of a stream. */
export class Chunk extends Generated {
  constructor(text, tokenIds, usage, logprobs = []) {
    super(text, usage, logprobs);
    this.tokenIds = tokenIds;
  }
}

/** How a stream ended. */
export class Done {
  constructor(finishReason, usage) {
    this.finishReason = finishReason;
    this.usage = usage;
  }
}

/** A piece of a streamed tool call: the first of a call carries its `id` and `name`, later ones more `arguments`. */
export class ToolCallDelta {
  constructor(index, id, name, args) {
    this.index = index;
    this.id = id;
    this.name = name;
    this.arguments = args;
  }
}

export class ToolCall {
  constructor(id, name, args) {
    this.id = id;
    this.name = name;
    this.arguments = args; // JSON text
  }
  /** The arguments, parsed. */
  get args() {
    return JSON.parse(this.arguments);
  }
}

/** WIT `chat-result`: `content` (null when the reply only calls tools), `toolCalls`, `finishReason`, `usage`. */
export class ChatReply {
  constructor(content, toolCalls, finishReason, usage, logprobs = []) {
    this.content = content;
    this.toolCalls = toolCalls;
    this.finishReason = finishReason;
    this.usage = usage;
    this.logprobs = logprobs;
  }
  get text() {
    return this.content ?? "";
  }
  toString() {
    return this.text;
  }
}

const chunkOf = (c) => new Chunk(c.text, Array.from(c.tokenIds), usage(c.usage), logprobs(c.logprobs));
const doneOf = (d) => new Done(d.finishReason, usage(d.usage));

// componentize-js gives an imported resource a dispose method (jco's convention); dropping the handle cancels the
// generation at once instead of when the garbage collector gets to it.
function drop(handle) {
  const dispose = handle[Symbol.dispose ?? Symbol.for("dispose")] ?? handle[Symbol.for("dispose")];
  if (typeof dispose === "function") dispose.call(handle);
}

/** A WIT stream read event by event: iterate it (`for (const chunk of stream)`), or `forEach(callback)`; afterwards
 * `done` says how it ended and `text` holds the whole text. `close()` drops it, which cancels the generation. */
class Events {
  constructor(handle) {
    this.handle = handle;
    this.done = null;
    this.parts = [];
  }

  get text() {
    return this.parts.join("");
  }

  /** The next item, or undefined at the end (then `done` is set). */
  read() {
    while (this.done === null && this.handle !== null) {
      const handle = this.handle;
      const event = wrap(() => handle.next());
      if (event === undefined) break;
      const item = this.item(event);
      if (item instanceof Done) {
        this.done = item;
        break;
      }
      if (item instanceof Chunk) this.parts.push(item.text);
      return item;
    }
    this.close();
    return undefined;
  }

  *[Symbol.iterator]() {
    for (let item = this.read(); item !== undefined; item = this.read()) yield item;
  }

  /** Call `callback(item)` for every item; returns `done`. */
  forEach(callback) {
    for (let item = this.read(); item !== undefined; item = this.read()) callback(item);
    return this.done;
  }

  close() {
    if (this.handle !== null) {
      const handle = this.handle;
      this.handle = null;
      drop(handle);
    }
  }
}

/** WIT `infer-stream`: yields `Chunk`s. */
export class Stream extends Events {
  item(event) {
    return event.tag === "done" ? doneOf(event.val) : chunkOf(event.val);
  }
}

/** WIT `chat-stream`: yields content `Chunk`s and `ToolCallDelta`s. */
export class ChatStream extends Events {
  item(event) {
    if (event.tag === "tool-call") {
      const d = event.val;
      return new ToolCallDelta(d.index, d.id ?? null, d.name ?? null, d.arguments);
    }
    return event.tag === "done" ? doneOf(event.val) : chunkOf(event.val);
  }
}

function modelOf(options, fallback) {
  return options.model === undefined ? fallback : String(options.model);
}

/** WIT `infer`. Options: `model` ("gemma-3-270m"), `maxTokens` (100; null: no budget), `stop` (a string or several),
 * `temperature` (0.8), `topK`, `topP`, `seed`, `repeatPenalty`, `repeatPenaltyLastNTokenCount`, `frequencyPenalty`,
 * `presencePenalty`, `logitBias` ({id: bias}), `logprobs`, and one of `jsonSchema` / `jsonObject` / `regex` /
 * `grammar` / `choice`; each one not given takes the host's default for the model. */
export function infer(prompt, options = {}) {
  const model = modelOf(options, DEFAULT_MODEL);
  const params = build(options, model);
  const r = wrap(() => wit.infer(model, prompt, params));
  return new Completion(r.text, r.finishReason, usage(r.usage), logprobs(r.logprobs));
}

/** WIT `infer-stream`, with the options of `infer`. With `onChunk`, reads the whole stream, calling it for each
 * `Chunk`, and returns the stream (its `done` and `text` set). */
export function inferStream(prompt, options = {}, onChunk = undefined) {
  const model = modelOf(options, DEFAULT_MODEL);
  const params = build(options, model);
  const stream = new Stream(wrap(() => wit.inferStream(model, prompt, params)));
  if (onChunk !== undefined) stream.forEach(onChunk);
  return stream;
}

export { inferStream as stream }; // the Python SDK's name

const ROLES = ["system", "user", "assistant", "tool"];
const jsonText = (value) => (typeof value === "string" ? value : JSON.stringify(value));

/** A WIT `chat-message` from { role, content, toolCalls, toolCallId } (OpenAI's `tool_calls` / `tool_call_id`
 * too) or a [role, content] pair. */
export function message(m) {
  if (Array.isArray(m)) m = { role: m[0], content: m[1] };
  const role = String(m.role ?? "user");
  if (!ROLES.includes(role)) throw new InvalidInput(`unknown chat role "${role}" (system, user, assistant, tool)`);
  const calls = m.toolCalls ?? m.tool_calls ?? [];
  return {
    role,
    content: m.content === null || m.content === undefined ? undefined : String(m.content),
    toolCalls: calls.map((c) => ({
      id: String(c.id ?? ""),
      name: String(c.name ?? c.function?.name),
      arguments: jsonText(c.arguments ?? c.function?.arguments ?? {}),
    })),
    toolCallId: m.toolCallId ?? m.tool_call_id ?? undefined,
  };
}

/** A WIT `tool` from { name, description, parameters } or OpenAI's { type: "function", function: {...} }. */
function tool(t) {
  const spec = t.function ?? t;
  return {
    name: String(spec.name),
    description: spec.description ?? undefined,
    parameters: jsonText(spec.parameters ?? { type: "object" }),
  };
}

function toolChoice(choice) {
  if (choice !== null && typeof choice === "object") return { tag: "named", val: String(choice.name) };
  if (choice === undefined || choice === null || choice === "auto") return { tag: "auto" };
  if (choice === "none" || choice === "required") return { tag: choice };
  return { tag: "named", val: String(choice) };
}

const CHAT_OPTIONS = ["model", "tools", "toolChoice"];

function chatArgs(messages, options) {
  const model = modelOf(options, DEFAULT_CHAT_MODEL);
  const params = {
    inferencing: build(options, model, CHAT_OPTIONS),
    tools: Array.from(options.tools ?? [], tool),
    toolChoice: toolChoice(options.toolChoice),
  };
  return [model, Array.from(messages, message), params];
}

/** WIT `chat`: messages as objects (or [role, content] pairs); options: `model` ("smollm2-135m"), `tools`,
 * `toolChoice` ("auto", "none", "required", a tool's name or { name }), and those of `infer`. */
export function chat(messages, options = {}) {
  const [model, wire, params] = chatArgs(messages, options);
  const r = wrap(() => wit.chat(model, wire, params));
  const calls = r.message.toolCalls.map((c) => new ToolCall(c.id, c.name, c.arguments));
  return new ChatReply(r.message.content ?? null, calls, r.finishReason, usage(r.usage), logprobs(r.logprobs));
}

/** WIT `chat-stream`, with the arguments of `chat` (and `onItem`, as `inferStream`'s `onChunk`). Invalid input is
 * thrown here, before any token. */
export function chatStream(messages, options = {}, onItem = undefined) {
  const [model, wire, params] = chatArgs(messages, options);
  const stream = new ChatStream(wrap(() => wit.chatStream(model, wire, params)));
  if (onItem !== undefined) stream.forEach(onItem);
  return stream;
}

/** WIT `apply-chat-template`: the prompt text the model's chat template makes of `messages`. */
export function applyChatTemplate(messages, options = {}) {
  const model = modelOf(options, DEFAULT_CHAT_MODEL);
  const wire = Array.from(messages, message);
  const tools = Array.from(options.tools ?? [], tool);
  const add = options.addGenerationPrompt ?? true;
  return wrap(() => wit.applyChatTemplate(model, wire, tools, add));
}

/** WIT `tokenize` (the beginning-of-sequence token included, as `infer` tokenizes a prompt). */
export function tokenize(text, options = {}) {
  const model = modelOf(options, DEFAULT_MODEL);
  return Array.from(wrap(() => wit.tokenize(model, text)));
}

/** WIT `get-model-info`: { name, contextLength, vocabSize }. */
export function modelInfo(model = DEFAULT_MODEL) {
  return wrap(() => wit.getModelInfo(model));
}

/** WIT `get-model-kind`: "base", "instruct" or "embedding". */
export function modelKind(model = DEFAULT_MODEL) {
  return wrap(() => wit.getModelKind(model));
}

export function listModels() {
  return Array.from(wit.listModels());
}

const seconds = (ms) => (ms === undefined || ms === null ? null : Number(ms) / 1000);

/** WIT `list-model-status` (0.2.5): each model this guest may use, without loading any: { name, state ("unloaded",
 * "loading", "loaded", "unloading" or "remote": served elsewhere), loaded, memoryBytes, inUse, idleS, keepAliveS,
 * unloadInS } (seconds; null when not applying: in use, not loaded, kept for good). */
export function listModelStatus() {
  return Array.from(wit.listModelStatus(), (s) => ({
    name: s.name,
    state: s.state,
    loaded: s.state === "loaded",
    memoryBytes: Number(s.memoryBytes),
    inUse: s.inUse,
    idleS: seconds(s.idleMs),
    keepAliveS: seconds(s.keepAliveMs),
    unloadInS: seconds(s.unloadInMs),
  }));
}

// `embed` calls the host in batches, so any number of texts works: at most EMBED_BATCH texts a call, and at most
// EMBED_CALL_ITEMS of what wasmtime counts when it copies the arguments out of the guest (a text is one item plus its
// UTF-8 bytes / 48; past 2,796,202 a call the guest traps). As in llmhost_guest/llm.py.
export const EMBED_BATCH = 2048;
const EMBED_CALL_ITEMS = Math.floor(2_796_202 / 2);
const ITEM_BYTES = 48;
const utf8 = new TextEncoder();

/** WIT `generate-embeddings`: one vector (an array of numbers) per text, with `.usage` ({ promptTokens }); default
 * model all-minilm-l6-v2. */
export function embed(texts, options = {}) {
  const model = modelOf(options, DEFAULT_EMBEDDING_MODEL);
  const inputs = typeof texts === "string" ? [texts] : Array.from(texts, String);
  const vectors = [];
  let tokens = 0;
  let start = 0;
  do {
    let end = start;
    let used = 0;
    while (end < inputs.length && end - start < EMBED_BATCH) {
      const cost = 2 + Math.floor(utf8.encode(inputs[end]).length / ITEM_BYTES);
      if (cost > EMBED_CALL_ITEMS) throw new InvalidInput(`text[${end}] is too large to pass to the host in one call; split it`);
      if (end > start && used + cost > EMBED_CALL_ITEMS) break;
      used += cost;
      end += 1;
    }
    const batch = inputs.slice(start, end);
    const result = wrap(() => wit.generateEmbeddings(model, batch));
    for (const vector of result.embeddings) vectors.push(Array.from(vector));
    tokens += result.usage.promptTokenCount;
    start = end;
  } while (start < inputs.length);
  vectors.usage = { promptTokens: tokens, generatedTokens: 0 };
  return vectors;
}
