// TypeScript declarations of the llmhost JavaScript SDK (index.js), for editors: point `paths` (tsconfig/jsconfig)
// at this file, e.g. { "compilerOptions": { "paths": { "llmhost": ["<site-packages>/llmhost/guest_sdk/js/llmhost"] } } }
// (`python -c "import llmhost, pathlib; print(pathlib.Path(llmhost.__file__).parent / 'guest_sdk/js/llmhost')"`).

export declare const DEFAULT_MODEL: "gemma-3-270m";
export declare const DEFAULT_CHAT_MODEL: "smollm2-135m";
export declare const DEFAULT_EMBEDDING_MODEL: "all-minilm-l6-v2";

/** A WIT `llm.error`: `kind` is the case, `message` the host's text. */
export declare class LlmError extends Error {
  readonly kind: "invalid-input" | "model-not-supported" | "runtime-error" | string;
  constructor(kind: string, message?: string);
}
/** WIT `error::invalid-input`: bad parameters, a prompt too long for the window... */
export declare class InvalidInput extends LlmError {
  readonly kind: "invalid-input";
  constructor(message?: string);
}
/** WIT `error::model-not-supported`: the host has no such model configured. */
export declare class ModelNotSupported extends LlmError {
  readonly kind: "model-not-supported";
  constructor(message?: string);
}
/** WIT `error::runtime-error`: the engine failed (the Python SDK's RuntimeError_). */
export declare class RuntimeError extends LlmError {
  readonly kind: "runtime-error";
  constructor(message?: string);
}
export type HttpErrorKind = "denied" | "invalid-request" | "timeout" | "too-large" | "connection";

export type FinishReason = "stop" | "length" | "content-filter" | "tool-calls";
export interface Usage {
  promptTokens: number;
  generatedTokens: number;
}
export interface TopLogprob {
  tokenId: number;
  bytes: Uint8Array;
  logprob: number;
}
export interface TokenLogprob extends TopLogprob {
  top: TopLogprob[];
}

/** Options of `infer`, `inferStream`, `chat`, `chatStream`: each one not given takes the host's default for the model
 * (WIT `default-params`). At most one of `jsonSchema`, `jsonObject`, `regex`, `grammar`, `choice`. Integers are
 * checked against their WIT type's range (u32; `seed` u64, `logprobs` u8): out of range is an `InvalidInput` naming
 * the option, before any host call. */
export interface InferOptions {
  model?: string;
  /** 100 by default; null: no budget. At most 2**32 - 1 (WIT u32). */
  maxTokens?: number | null;
  repeatPenalty?: number;
  repeatPenaltyLastNTokenCount?: number;
  stop?: string | string[];
  temperature?: number;
  topK?: number;
  topP?: number;
  /** 0 to 2n**64n - 1n (WIT u64). */
  seed?: number | bigint | null;
  /** How many alternatives to report per generated token (0: only the chosen token's); at most 255 (WIT u8). */
  logprobs?: number | null;
  frequencyPenalty?: number;
  presencePenalty?: number;
  /** token id -> bias */
  logitBias?: Record<number, number> | Map<number, number>;
  jsonSchema?: string | object;
  jsonObject?: boolean;
  regex?: string;
  grammar?: string;
  choice?: string[];
}
export type Params = Required<Omit<InferOptions, "model" | "jsonSchema" | "jsonObject" | "regex" | "grammar" | "choice">>;
export declare function defaults(model?: string): Params;

export type Role = "system" | "user" | "assistant" | "tool";
export interface ToolCallInput {
  id?: string;
  name?: string;
  arguments?: string | object;
  function?: { name: string; arguments?: string | object };
}
export type Message =
  | { role: Role; content?: string | null; toolCalls?: ToolCallInput[]; toolCallId?: string; tool_calls?: ToolCallInput[]; tool_call_id?: string }
  | [Role, string];
export type Tool =
  | { name: string; description?: string; parameters?: object | string }
  | { type: "function"; function: { name: string; description?: string; parameters?: object | string } };
export interface ChatOptions extends InferOptions {
  tools?: Tool[];
  /** "auto" (the default), "none", "required", a tool's name, or { name } */
  toolChoice?: "auto" | "none" | "required" | string | { name: string };
}
export interface ModelInfo {
  name: string;
  contextLength: number;
  vocabSize: number;
}
/** WIT `model-status` (0.2.5), times in seconds (null: in use, not loaded, kept for good, or remote). */
export interface ModelStatus {
  name: string;
  state: "unloaded" | "loading" | "loaded" | "unloading" | "remote";
  loaded: boolean;
  memoryBytes: number;
  inUse: number;
  idleS: number | null;
  keepAliveS: number | null;
  unloadInS: number | null;
}
export type Embeddings = number[][] & { usage: Usage };

export declare namespace llm {
  export class Completion {
    readonly text: string;
    readonly finishReason: FinishReason;
    readonly usage: Usage;
    readonly logprobs: TokenLogprob[];
    toString(): string;
  }
  export class Chunk {
    readonly text: string;
    readonly tokenIds: number[];
    readonly usage: Usage;
    readonly logprobs: TokenLogprob[];
  }
  export class Done {
    readonly finishReason: FinishReason;
    readonly usage: Usage;
  }
  export class ToolCallDelta {
    readonly index: number;
    readonly id: string | null;
    readonly name: string | null;
    readonly arguments: string;
  }
  export class ToolCall {
    readonly id: string;
    readonly name: string;
    /** JSON text */
    readonly arguments: string;
    /** The arguments, parsed. */
    readonly args: unknown;
  }
  export class ChatReply {
    readonly content: string | null;
    readonly toolCalls: ToolCall[];
    readonly finishReason: FinishReason;
    readonly usage: Usage;
    readonly logprobs: TokenLogprob[];
    /** `content`, or "" when the reply only calls tools. */
    readonly text: string;
    toString(): string;
  }
  class Events<T> implements Iterable<T> {
    /** How the stream ended: set once it is read to the end. */
    readonly done: Done | null;
    /** The text of the chunks read so far. */
    readonly text: string;
    /** The next item, or undefined at the end. */
    read(): T | undefined;
    [Symbol.iterator](): Iterator<T>;
    /** Calls `callback` for every item; returns `done`. */
    forEach(callback: (item: T) => void): Done | null;
    /** Drops the stream, which cancels the generation. */
    close(): void;
  }
  export class Stream extends Events<Chunk> {}
  export class ChatStream extends Events<Chunk | ToolCallDelta> {}

  export function infer(prompt: string, options?: InferOptions): Completion;
  export function inferStream(prompt: string, options?: InferOptions, onChunk?: (chunk: Chunk) => void): Stream;
  /** The Python SDK's name for `inferStream`. */
  export function stream(prompt: string, options?: InferOptions, onChunk?: (chunk: Chunk) => void): Stream;
  export function chat(messages: Iterable<Message>, options?: ChatOptions): ChatReply;
  export function chatStream(
    messages: Iterable<Message>,
    options?: ChatOptions,
    onItem?: (item: Chunk | ToolCallDelta) => void,
  ): ChatStream;
  export function applyChatTemplate(
    messages: Iterable<Message>,
    options?: { model?: string; tools?: Tool[]; addGenerationPrompt?: boolean },
  ): string;
  export function tokenize(text: string, options?: { model?: string }): number[];
  export function modelInfo(model?: string): ModelInfo;
  export function modelKind(model?: string): "base" | "instruct" | "embedding";
  export function listModels(): ModelInfo[];
  export function listModelStatus(): ModelStatus[];
  export function embed(texts: string | Iterable<string>, options?: { model?: string }): Embeddings;
  export const EMBED_BATCH: number;
}

export declare namespace kv {
  export class KvError extends Error {
    readonly kind: "no-such-store" | "access-denied" | "quota" | "other";
    constructor(kind: KvError["kind"], message?: string);
  }
  export class Store {
    readonly name: string;
    get(key: string): Uint8Array | null;
    getText(key: string): string | null;
    getJson(key: string): unknown;
    set(key: string, value: Uint8Array | string): void;
    setJson(key: string, value: unknown): void;
    delete(key: string): void;
    exists(key: string): boolean;
    keys(): string[];
    /** `delta`: an integer from -(2n**63n) to 2n**63n - 1n (WIT s64; out of range: a KvError of kind "other"). */
    increment(key: string, delta?: number | bigint): number;
  }
  export function open(name?: string): Store;
}

export declare namespace http {
  export class HttpError extends Error {
    readonly kind: HttpErrorKind;
    constructor(kind: HttpErrorKind, message: string);
  }
  export class Response {
    readonly status: number;
    readonly headerList: [string, string][];
    readonly body: Uint8Array;
    readonly headers: Record<string, string>;
    readonly ok: boolean;
    text(): string;
    json(): unknown;
  }
  export interface RequestOptions {
    headers?: Record<string, string> | [string, string][];
    body?: Uint8Array | string | object;
    timeoutS?: number;
  }
  /** The http-app world's response writer (wit/http.wit). */
  export interface ResponseWriter {
    start(status: number, headers: [string, string][]): void;
    write(chunk: Uint8Array): void;
    timeLeftMs(): bigint;
  }
  export interface WitResponse {
    status: number;
    headers: [string, string][];
    body: Uint8Array;
  }
  export const MAX_BODY_BYTES: number;
  export const WRITE_BYTES: number;
  export const INLINE_BYTES: number;
  export const KINDS: HttpErrorKind[];
  export function request(method: string, url: string, options?: RequestOptions): Response;
  export function get(url: string, options?: RequestOptions): Response;
  export function post(url: string, options?: RequestOptions): Response;
  /** `status`: an integer from 0 to 65535 (WIT u16; out of range: a RangeError, where the bindings would wrap it). */
  export function respond(
    writer: ResponseWriter,
    status: number,
    headers: Record<string, string> | [string, string][],
    body: Uint8Array | string,
  ): WitResponse;
  export function writeAll(writer: ResponseWriter, data: Uint8Array | string): void;
}

export declare namespace config {
  export class ConfigError extends Error {
    readonly kind: "upstream" | "io";
    constructor(kind: "upstream" | "io", message: string);
  }
  export function get(name: string): string | null;
  export function getAll(): Record<string, string>;
}

// The namespaces' classes, exported at the top level too (as index.js does).
export import Completion = llm.Completion;
export import Chunk = llm.Chunk;
export import Done = llm.Done;
export import ToolCall = llm.ToolCall;
export import ToolCallDelta = llm.ToolCallDelta;
export import ChatReply = llm.ChatReply;
export import Stream = llm.Stream;
export import ChatStream = llm.ChatStream;
export import KvError = kv.KvError;
export import HttpError = http.HttpError;
export import ConfigError = config.ConfigError;
