// agent-js: a chat whose tools are HTTP APIs, in JavaScript with the llmhost SDK (the twin of guest-examples/agent).
// The model is asked a question with two tools and must call one (the host constrains its reply to a call whose
// arguments match the tool's JSON Schema); the guest makes each call as an HTTP request to the API (`http`, only to
// the hosts the config grants), then the model answers from the results. Prints each call it made (tool, arguments,
// the API's status and body), then the answer. The API's base URL is a config value (`weather-api`).
import { config, http, llm, LlmError } from "llmhost";

const MODEL = "smollm2-135m"; // the built-in instruct model
const QUESTION = "How warm is it in Paris right now?";
const API_BASE = "weather-api"; // the config value holding the API's base URL
const CITY = {
  type: "object",
  properties: { city: { type: "string", maxLength: 40 } },
  required: ["city"],
  additionalProperties: false,
};
const TOOLS = [
  { name: "get_weather", description: "The weather in a city now: temperature (°C) and sky.", parameters: CITY },
  { name: "get_population", description: "How many people live in a city.", parameters: CITY },
];
const FINAL = "Now answer my question in one sentence.";
const PROSE = "[A-Z][^{}<>\\n.!?]*[.!?]"; // the answer's shape: one sentence
const PATHS = { get_weather: "/weather", get_population: "/population" }; // each tool's endpoint
const PARAMS = { maxTokens: 64, temperature: 0 }; // greedy: the same calls and answer every run

/** The tool call as an HTTP request: [what to print as its outcome, the text the model gets as its result]. */
function callApi(base, name, args) {
  const city = String(JSON.parse(args).city ?? "");
  try {
    const reply = http.get(`${base}${PATHS[name]}?city=${encodeURIComponent(city)}`, { timeoutS: 10 });
    return [`${reply.status} ${reply.text()}`, reply.text()];
  } catch (error) {
    if (!(error instanceof http.HttpError)) throw error;
    const result = JSON.stringify({ error: `${error.kind}: ${error.message}` }); // the model is told; the run goes on
    return [`${error.kind} ${result}`, result];
  }
}

export function run(args) {
  const question = args.length > 0 ? args.join(" ") : QUESTION;
  const base = config.get(API_BASE);
  if (base === null) {
    console.error(`agent-js: no config value \`${API_BASE}\` (set it under [sandbox] config)`);
    return 1;
  }
  const messages = [{ role: "user", content: question }];
  let answer;
  try {
    // toolChoice "required": the reply is one or more calls, never text.
    const reply = llm.chat(messages, { model: MODEL, tools: TOOLS, toolChoice: "required", ...PARAMS });
    // The calls go into the history with ids of our own, so the conversation is the same every run.
    const calls = reply.toolCalls.map((c, i) => ({ id: `call_${i}`, name: c.name, arguments: c.arguments }));
    messages.push({ role: "assistant", content: null, toolCalls: calls });
    for (const call of calls) {
      const [outcome, result] = callApi(base.replace(/\/+$/, ""), call.name, call.arguments);
      console.log(`call: ${call.name}(${call.arguments}) -> ${outcome}`);
      messages.push({ role: "tool", toolCallId: call.id, content: result });
    }
    // Now the answer, from the results: no tools, one sentence of prose (a small model tends to echo the JSON).
    messages.push({ role: "user", content: FINAL });
    answer = llm.chat(messages, { model: MODEL, regex: PROSE, ...PARAMS });
  } catch (error) {
    if (!(error instanceof LlmError)) throw error;
    console.error(`agent-js: ${error.name}: ${error.message}`);
    return 1;
  }
  console.log(`answer: ${answer.text.trim()}`);
  return 0;
}
