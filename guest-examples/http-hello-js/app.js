// http-hello-js: an `http-app` guest in JavaScript. `GET /?prompt=...` streams the model's completion as plain
// text, one chunk per piece the host generates, then a line with the finish reason.
import { inferStream } from "llmhost:llm/llm@0.2.3";

const MODEL = "gemma-3-270m";
const encoder = new TextEncoder();

function promptOf(pathWithQuery) {
  const query = pathWithQuery.includes("?") ? pathWithQuery.slice(pathWithQuery.indexOf("?") + 1) : "";
  return new URLSearchParams(query).get("prompt") ?? "The capital of France is";
}

function reply(status, text) {
  return { status, headers: [["content-type", "text/plain; charset=utf-8"]], body: encoder.encode(text) };
}

export const handler = {
  handle(request, writer) {
    // greedy: the same answer every time; at most 16 tokens, cut at the first newline
    const params = {
      maxTokens: 16, repeatPenalty: 1.0, repeatPenaltyLastNTokenCount: 0, stop: ["\n"], temperature: 0.0,
      topK: 40, topP: 0.9, seed: undefined, constraint: undefined, logprobs: undefined,
      frequencyPenalty: 0.0, presencePenalty: 0.0, logitBias: [],
    };
    let stream;
    try {
      stream = inferStream(MODEL, promptOf(request.pathWithQuery), params);
    } catch (error) {
      const { tag, val } = error.payload ?? { tag: "error", val: String(error) };
      return reply(400, `${tag}: ${val ?? ""}\n`);
    }
    writer.start(200, [["content-type", "text/plain; charset=utf-8"]]);
    try {
      for (let event = stream.next(); event !== undefined; event = stream.next()) {
        if (event.tag === "chunk") {
          writer.write(encoder.encode(event.val.text));
        } else {
          writer.write(encoder.encode(`\nfinish-reason: ${event.val.finishReason}\n`));
        }
      }
    } catch (error) {
      // A host error mid-stream, or the client left (the writer refuses): end the response here.
      const { tag, val } = error.payload ?? { tag: "error", val: String(error) };
      try {
        writer.write(encoder.encode(`\nerror: ${tag}: ${val ?? ""}\n`));
      } catch {}
    }
    return { status: 200, headers: [], body: new Uint8Array() };
  },
};
