// llmhost: the JavaScript SDK of llmhost guests, over the WIT interfaces of llmhost:llm@0.2.5 (llm, outbound-http)
// and the standard wasi:keyvalue and wasi:config ones. `llmhost build` bundles it into the guest (esbuild resolves
// "llmhost" to this folder), so a guest writes, with nothing in package.json:
//   import { llm, kv } from "llmhost";
//   const reply = llm.infer("The capital of France is", { maxTokens: 8, temperature: 0 });
// See docs/js-sdk.md; index.d.ts holds the types. Mirrors the Python SDK (llmhost_guest).
export * as llm from "./llm.js";
export * as kv from "./kv.js";
export * as http from "./http.js";
export * as config from "./config.js";
export {
  ConfigError, HttpError, InvalidInput, KvError, LlmError, ModelNotSupported, RuntimeError,
} from "./errors.js";
export { Chunk, ChatReply, ChatStream, Completion, Done, Stream, ToolCall, ToolCallDelta } from "./llm.js";
export { DEFAULT_CHAT_MODEL, DEFAULT_EMBEDDING_MODEL, DEFAULT_MODEL, defaults } from "./params.js";
