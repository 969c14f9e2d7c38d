// chat-js: a chat API over the built-in instruct model, in JavaScript with the llmhost SDK. The conversation is kept
// in key-value state (conversation id -> its messages), so each request sends only the new message, and the reply
// is streamed as server-sent events.
//   POST /chat {"message": "...", "conversation": "c1"?}   SSE: `data: {"text"}` per chunk, then `event: done` with
//                                                           {"conversation", "finish_reason", "usage", "turns"}
//   GET /conversations/ID                                  the conversation's messages, as JSON
import { http, kv, llm, LlmError } from "llmhost";

const MODEL = "smollm2-135m"; // the built-in instruct model
const SYSTEM = "You are a helpful assistant. Answer briefly.";
const PARAMS = { maxTokens: 64, temperature: 0 }; // greedy: the same reply to the same conversation
const encoder = new TextEncoder();

function json(writer, status, value) {
  return http.respond(writer, status, [["content-type", "application/json"]], JSON.stringify(value));
}

function sse(writer, event, value) {
  const head = event ? `event: ${event}\n` : "";
  writer.write(encoder.encode(`${head}data: ${JSON.stringify(value)}\n\n`));
}

function chat(request, writer) {
  let body;
  try {
    body = JSON.parse(new TextDecoder().decode(request.body));
  } catch {
    return json(writer, 400, { error: 'the body must be JSON: {"message": "...", "conversation": "ID"?}' });
  }
  if (typeof body?.message !== "string" || body.message === "") {
    return json(writer, 400, { error: "`message` must be a non-empty string" });
  }
  const store = kv.open();
  // A new conversation gets the next id from an atomic counter: no two requests get the same one.
  const id = typeof body.conversation === "string" ? body.conversation : `c${store.increment("conversations")}`;
  const key = `conversation:${id}`;
  const messages = store.getJson(key) ?? [{ role: "system", content: SYSTEM }];
  messages.push({ role: "user", content: body.message });
  let stream;
  try {
    stream = llm.chatStream(messages, { model: MODEL, ...PARAMS });
  } catch (error) {
    if (!(error instanceof LlmError)) throw error;
    return json(writer, 400, { error: `${error.kind}: ${error.message}` });
  }
  writer.start(200, [["content-type", "text/event-stream"], ["cache-control", "no-cache"]]);
  try {
    for (const chunk of stream) sse(writer, null, { text: chunk.text });
  } catch (error) {
    if (!(error instanceof LlmError)) throw error;
    sse(writer, "error", { error: `${error.kind}: ${error.message}` }); // the turn is not kept
    return { status: 200, headers: [], body: new Uint8Array() };
  }
  messages.push({ role: "assistant", content: stream.text });
  store.setJson(key, messages); // the next request with this id carries this turn
  const { finishReason, usage } = stream.done;
  sse(writer, "done", {
    conversation: id,
    finish_reason: finishReason,
    usage: { prompt_tokens: usage.promptTokens, completion_tokens: usage.generatedTokens },
    turns: messages.filter((m) => m.role === "user").length,
  });
  return { status: 200, headers: [], body: new Uint8Array() };
}

export const handler = {
  handle(request, writer) {
    const path = request.pathWithQuery.split("?")[0];
    if (request.method === "POST" && path.endsWith("/chat")) return chat(request, writer);
    const match = path.match(/\/conversations\/([^/]+)$/);
    if (request.method === "GET" && match) {
      const messages = kv.open().getJson(`conversation:${decodeURIComponent(match[1])}`);
      return messages === null ? json(writer, 404, { error: "no such conversation" }) : json(writer, 200, messages);
    }
    return json(writer, 404, { error: "POST /chat, or GET /conversations/ID" });
  },
};
