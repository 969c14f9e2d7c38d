// hello-js: complete a prompt with the host's LLM and print the text, the finish reason and the token usage.
// A JavaScript guest of the `command` world (wit/llm.wit), built with componentize-js by `llmhost build`.
import { infer } from "llmhost:llm/llm@0.2.3";

const MODEL = "gemma-3-270m";
const DEFAULT_PROMPT = "The capital of France is";

export function run(args) {
  const prompt = args.length > 0 ? args.join(" ") : DEFAULT_PROMPT;
  const params = {
    maxTokens: 32,
    repeatPenalty: 1.1,
    repeatPenaltyLastNTokenCount: 64,
    stop: ["\n"],
    temperature: 0.0, // greedy: the same answer every run
    topK: 40,
    topP: 0.9,
    seed: undefined,
    constraint: undefined,
    logprobs: undefined,
    frequencyPenalty: 0.0,
    presencePenalty: 0.0,
    logitBias: [],
  };
  let result;
  try {
    result = infer(MODEL, prompt, params);
  } catch (error) {
    // A WIT `err` is thrown: its `payload` is one case of the WIT `error` variant, `{ tag, val }`.
    const { tag, val } = error.payload ?? { tag: "error", val: String(error) };
    console.error(`hello-js: ${tag}: ${val ?? ""}`);
    return 1;
  }
  console.log(result.text);
  console.log(`finish-reason: ${result.finishReason}`);
  console.log(`usage: prompt=${result.usage.promptTokenCount} generated=${result.usage.generatedTokenCount}`);
  return 0;
}
