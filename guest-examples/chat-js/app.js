// chat-js: a chat that remembers, in JavaScript with the llmhost SDK. It is the Python `chat` (guest-examples/chat)
// request for request: the same API, ids, stored keys and page, and the same bytes for the same conversation. The
// conversation (its messages) is kept in the key-value store `default`, under `chat/<id>`, so every turn sends the
// model the whole conversation so far, whichever instance or server answers it; the reply is streamed token by token
// as server-sent events.
//
// GET    /                  the chat page (HTML + a little JavaScript)
// POST   /chat              {"message": "...", "conversation": ID, "max_tokens": N (default 64)}
//                           -> text/event-stream: `event: conversation` {"id": ID, "history": N (earlier messages
//                           sent)}, `data: {"text": ...}` per chunk, then `event: done` {"finish_reason", "usage"}.
//                           Without `conversation` a new one gets a random id; an id not seen before starts one.
// GET    /conversations/ID  the conversation as kept: {"id": ID, "messages": [{"role", "content"}, ...]}
// DELETE /conversations/ID  forget it
//
// The store must be granted (llmhost.toml: `key-value-stores = ["default"]`); without it POST /chat answers 503.
import { http, kv, llm, KvError, LlmError } from "llmhost";

const MODEL = "smollm2-135m"; // the built-in instruct model (Gemma 3 270M is pretrained only: never tuned to chat)
const DEFAULT_MAX_TOKENS = 64;
const MAX_TOKENS = 256;
const MAX_MESSAGES = 16; // the last 8 turns are kept (and sent): a small model's context is short, and so is a kv value
const STORE = "default";
// An id is the conversation's only key: `newId` makes unguessable ones (64 random bits).
const CONVERSATION_ID = /^[A-Za-z0-9_-]{1,64}$/;
const encoder = new TextEncoder();

const PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>llmhost chat</title>
<style>
  body { font-family: sans-serif; max-width: 40em; margin: 2em auto; }
  #log p { white-space: pre-wrap; } .user { font-weight: bold; } .status { color: #777; font-size: small; }
  #message { width: 30em; }
</style>
</head>
<body>
<h1>llmhost chat</h1>
<div id="log"></div>
<form id="form">
  <input id="message" autocomplete="off" placeholder="Say something"> <button id="send">Send</button>
  <button id="new" type="button">New conversation</button>
</form>
<script>
const form = document.getElementById("form"), input = document.getElementById("message");
const log = document.getElementById("log");
let conversation = null;  // the id the server gave this conversation (its first event)

function add(cls, text) {
  const p = document.createElement("p");
  p.className = cls;
  p.textContent = text;
  log.append(p);
  return p;
}

document.getElementById("new").addEventListener("click", () => { conversation = null; log.textContent = ""; });

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const message = input.value;
  input.value = "";
  add("user", message);
  const reply = add("reply", ""), status = add("status", "...");
  const body = conversation ? {message, conversation} : {message};
  const response = await fetch("chat", {
    method: "POST", headers: {"content-type": "application/json"}, body: JSON.stringify(body),
  });
  if (!response.ok) { status.textContent = \`error: \${(await response.json()).error}\`; return; }
  const reader = response.body.getReader(), decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const {value, done} = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, {stream: true});
    let end;
    while ((end = buffer.indexOf("\\n\\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const name = (event.match(/^event: (.*)$/m) || [null, "message"])[1];
      const data = JSON.parse((event.match(/^data: (.*)$/m) || [null, "{}"])[1]);
      if (name === "conversation") conversation = data.id;
      else if (name === "done") {
        status.textContent = \`finish: \${data.finish_reason}, tokens: \${data.usage.completion_tokens}\`;
      }
      else if (name === "error") status.textContent = \`error: \${data.message}\`;
      else reply.textContent += data.text;
    }
  }
});
</script>
</body>
</html>
`;

// JSON as Python's json.dumps writes it (", " and ": ", non-ASCII as \uXXXX): the same bytes as the Python chat.
function dumps(value) {
  if (Array.isArray(value)) return `[${value.map(dumps).join(", ")}]`;
  if (value !== null && typeof value === "object") {
    return `{${Object.entries(value).map(([k, v]) => `${dumps(k)}: ${dumps(v)}`).join(", ")}}`;
  }
  const escape = (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`;
  return JSON.stringify(value).replace(/[\u007f-\uffff]/g, escape);
}

function reply(writer, status, value) {
  return http.respond(writer, status, [["content-type", "application/json"]], dumps(value));
}

const empty = (status) => ({ status, headers: [], body: new Uint8Array() });

function sse(writer, event, data) {
  const head = event ? `event: ${event}\n` : "";
  writer.write(encoder.encode(`${head}data: ${dumps(data)}\n\n`));
}

const key = (conversation) => `chat/${conversation}`;

/** The conversation's messages, or null when the store has no such conversation. */
const load = (store, conversation) => store.getJson(key(conversation));

/** A fresh random id (64 bits from the host's random source; a collision is checked anyway). */
function newId(store) {
  for (;;) {
    const bytes = crypto.getRandomValues(new Uint8Array(8));
    const conversation = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
    if (!store.exists(key(conversation))) return conversation;
  }
}

/** A JSON number that is a whole number >= 1, else null. */
const whole = (value) => (Number.isInteger(value) && value >= 1 ? value : null);

function storeError(writer, error, fix) {
  if (!(error instanceof KvError)) throw error;
  return reply(writer, 503, { error: `the conversation store '${STORE}' is unavailable (${error.kind})${fix}` });
}

function chat(request, writer) {
  let body;
  try {
    body = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(request.body) || "{}");
  } catch {
    body = null;
  }
  if (body === null || typeof body !== "object" || Array.isArray(body)) body = {};
  const { message, conversation: given } = body;
  let maxTokens = whole(body.max_tokens === undefined ? DEFAULT_MAX_TOKENS : body.max_tokens);
  if (typeof message !== "string" || maxTokens === null) {
    const expected = '{"message": "...", "conversation": ID, "max_tokens": N}';
    return reply(writer, 400, { error: `expected a JSON body ${expected}` });
  }
  if (given !== undefined && given !== null && !(typeof given === "string" && CONVERSATION_ID.test(given))) {
    return reply(writer, 400, { error: "`conversation` must be 1-64 letters, digits, `-` or `_`" });
  }
  maxTokens = Math.min(maxTokens, MAX_TOKENS);
  let store, conversation, messages;
  try {
    store = kv.open(STORE);
    conversation = given ?? newId(store);
    messages = given == null ? [] : (load(store, conversation) ?? []);
  } catch (error) {
    // Without the grant every turn would forget the ones before: refuse, naming the fix.
    const fix = `grant it: key-value-stores = ["${STORE}"] under [components.NAME] in the app config`;
    return storeError(writer, error, `: ${fix}`);
  }
  messages = [...messages, { role: "user", content: message }].slice(-MAX_MESSAGES);
  writer.start(200, [["content-type", "text/event-stream"], ["cache-control", "no-store"]]);
  try {
    sse(writer, "conversation", { id: conversation, history: messages.length - 1 });
    // greedy: the same reply to the same conversation. The host renders the model's own chat template over the
    // whole conversation and stops at its end of turn.
    const stream = llm.chatStream(messages, { model: MODEL, maxTokens, temperature: 0 });
    try {
      for (const chunk of stream) sse(writer, null, { text: chunk.text });
    } finally {
      stream.close(); // a failed write leaves the loop: the generation is cancelled at once
    }
    if (stream.done === null) return empty(200); // not ended: keep nothing
    // The turn is kept only once it is whole (a client that left mid-reply leaves the conversation as it was).
    const kept = [...messages, { role: "assistant", content: stream.text }].slice(-MAX_MESSAGES);
    store.set(key(conversation), dumps(kept));
    const { finishReason, usage } = stream.done;
    sse(writer, "done", {
      finish_reason: finishReason,
      usage: { prompt_tokens: usage.promptTokens, completion_tokens: usage.generatedTokens },
    });
  } catch (error) {
    // The browser went away (`write` failed: a WIT error, with its `payload`), or generation or the store failed:
    // tell the page if it is still there.
    if (!(error instanceof LlmError || error instanceof KvError || error?.payload !== undefined)) throw error;
    const text = error.payload !== undefined ? String(error.payload?.val ?? "") : error.message;
    try {
      sse(writer, "error", { message: text || error.name });
    } catch {}
  }
  return empty(200);
}

function conversationResource(writer, method, conversation) {
  if (!CONVERSATION_ID.test(conversation)) return reply(writer, 404, { error: `no conversation ${conversation}` });
  let messages;
  try {
    const store = kv.open(STORE);
    messages = load(store, conversation);
    if (messages === null) return reply(writer, 404, { error: `no conversation ${conversation}` });
    if (method === "DELETE") {
      store.delete(key(conversation));
      return empty(204);
    }
  } catch (error) {
    return storeError(writer, error, "");
  }
  return reply(writer, 200, { id: conversation, messages });
}

export const handler = {
  handle(request, writer) {
    const path = request.pathWithQuery.split("?", 1)[0];
    if (request.method === "GET" && path === "/") {
      return http.respond(writer, 200, [["content-type", "text/html; charset=utf-8"]], PAGE);
    }
    if (request.method === "POST" && path === "/chat") return chat(request, writer);
    if ((request.method === "GET" || request.method === "DELETE") && path.startsWith("/conversations/")) {
      return conversationResource(writer, request.method, path.slice("/conversations/".length));
    }
    return reply(writer, 404, { error: "not found" });
  },
};
