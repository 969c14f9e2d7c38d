// rag-js: retrieval-augmented answers, in JavaScript with the llmhost SDK. Passages are embedded with the built-in
// embedding model (all-minilm-l6-v2) and kept in key-value state with their vectors; a question is embedded too,
// the closest passages (cosine similarity) are retrieved, and the instruct model answers from them alone. The answer
// reports which passages it was given.
//   POST /index {"passages": ["...", ...]}   {"indexed": N, "total": M}
//   POST /ask {"question": "...", "k": 2}     {"answer", "sources": [{"id", "score", "text"}], "usage"}
import { http, kv, llm, LlmError } from "llmhost";

const EMBEDDER = "all-minilm-l6-v2";
const MODEL = "smollm2-135m"; // the built-in instruct model
const PARAMS = { maxTokens: 48, temperature: 0 }; // greedy: the same answer from the same passages
const INSTRUCTIONS = "Answer the question using only the numbered passages. Cite them like [1].";

function json(writer, status, value) {
  return http.respond(writer, status, [["content-type", "application/json"]], JSON.stringify(value));
}

function cosine(a, b) {
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i] * b[i];
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  return dot / Math.sqrt(na * nb);
}

/** The messages the answer is generated from: the passages, numbered as the sources list them, then the question. */
function prompt(question, passages) {
  const numbered = passages.map((p, i) => `[${i + 1}] ${p.text}`).join("\n");
  return [
    { role: "system", content: INSTRUCTIONS },
    { role: "user", content: `Passages:\n${numbered}\n\nQuestion: ${question}` },
  ];
}

function index(store, body) {
  const passages = body.passages;
  if (!Array.isArray(passages) || passages.length === 0 || !passages.every((p) => typeof p === "string")) {
    return [400, { error: "`passages` must be a non-empty list of strings" }];
  }
  const vectors = llm.embed(passages, { model: EMBEDDER });
  for (let i = 0; i < passages.length; i++) {
    const id = `p${store.increment("passages")}`; // atomic: concurrent requests never share an id
    store.setJson(`passage:${id}`, { id, text: passages[i], vector: vectors[i] });
  }
  return [200, { indexed: passages.length, total: store.keys().filter((k) => k.startsWith("passage:")).length }];
}

function ask(store, body) {
  if (typeof body.question !== "string" || body.question === "") {
    return [400, { error: "`question` must be a non-empty string" }];
  }
  const k = Number.isInteger(body.k) && body.k > 0 ? body.k : 2;
  const passages = store.keys().filter((key) => key.startsWith("passage:")).map((key) => store.getJson(key));
  if (passages.length === 0) return [409, { error: "the index is empty: POST /index some passages first" }];
  const [query] = llm.embed([body.question], { model: EMBEDDER });
  const ranked = passages
    .map((p) => ({ id: p.id, score: cosine(query, p.vector), text: p.text }))
    .sort((a, b) => b.score - a.score || (a.id < b.id ? -1 : 1))
    .slice(0, k);
  const reply = llm.chat(prompt(body.question, ranked), { model: MODEL, ...PARAMS });
  const usage = { prompt_tokens: reply.usage.promptTokens, completion_tokens: reply.usage.generatedTokens };
  return [200, { answer: reply.text, sources: ranked, finish_reason: reply.finishReason, usage }];
}

export const handler = {
  handle(request, writer) {
    const path = request.pathWithQuery.split("?")[0];
    const route = request.method === "POST" && ["/index", "/ask"].find((r) => path.endsWith(r));
    if (!route) return json(writer, 404, { error: "POST /index or POST /ask" });
    let body;
    try {
      body = JSON.parse(new TextDecoder().decode(request.body));
    } catch {
      return json(writer, 400, { error: "the body must be a JSON object" });
    }
    try {
      const [status, value] = (route === "/index" ? index : ask)(kv.open(), body ?? {});
      return json(writer, status, value);
    } catch (error) {
      if (!(error instanceof LlmError)) throw error;
      return json(writer, 400, { error: `${error.kind}: ${error.message}` });
    }
  },
};
