// http-hello-js: an `http-app` guest in JavaScript. `GET /?prompt=...` streams the model's completion as plain
// text, one chunk per piece the host generates, then a line with the finish reason. `llmhost` is the JavaScript
// SDK, bundled in by the build (docs/js-sdk.md).
import { http, llm, LlmError } from "llmhost";

const MODEL = "gemma-3-270m";
const encoder = new TextEncoder();

function promptOf(pathWithQuery) {
  const query = pathWithQuery.includes("?") ? pathWithQuery.slice(pathWithQuery.indexOf("?") + 1) : "";
  return new URLSearchParams(query).get("prompt") ?? "The capital of France is";
}

export const handler = {
  handle(request, writer) {
    let stream;
    try {
      // greedy: the same answer every time; at most 16 tokens, cut at the first newline
      const options = { model: MODEL, maxTokens: 16, stop: "\n", temperature: 0, repeatPenalty: 1.0 };
      stream = llm.inferStream(promptOf(request.pathWithQuery), options);
    } catch (error) {
      if (!(error instanceof LlmError)) throw error;
      return http.respond(writer, 400, [["content-type", "text/plain; charset=utf-8"]], `${error.kind}: ${error.message}\n`);
    }
    writer.start(200, [["content-type", "text/plain; charset=utf-8"]]);
    try {
      for (const chunk of stream) writer.write(encoder.encode(chunk.text));
      writer.write(encoder.encode(`\nfinish-reason: ${stream.done.finishReason}\n`));
    } catch (error) {
      // A host error mid-stream, or the client left (the writer refuses): end the response here.
      const text = error instanceof LlmError ? `${error.kind}: ${error.message}` : String(error.payload?.val ?? error);
      try {
        writer.write(encoder.encode(`\nerror: ${text}\n`));
      } catch {}
    }
    return { status: 200, headers: [], body: new Uint8Array() };
  },
};
