// hello-js: complete a prompt with the host's LLM and print the text, the finish reason and the token usage.
// A JavaScript guest of the `command` world, built with componentize-js by `llmhost build`; `llmhost` is the
// JavaScript SDK, bundled in by the build (docs/js-sdk.md): no package.json dependency needed.
import { llm, LlmError } from "llmhost";

const MODEL = "gemma-3-270m";
const DEFAULT_PROMPT = "The capital of France is";

export function run(args) {
  const prompt = args.length > 0 ? args.join(" ") : DEFAULT_PROMPT;
  let result;
  try {
    // Only what differs from the host's defaults: greedy (the same answer every run), 32 tokens, one line.
    result = llm.infer(prompt, { model: MODEL, maxTokens: 32, stop: "\n", temperature: 0, repeatPenalty: 1.1 });
  } catch (error) {
    if (!(error instanceof LlmError)) throw error;
    console.error(`hello-js: ${error.kind}: ${error.message}`); // e.g. "model-not-supported: ..."
    return 1;
  }
  console.log(result.text);
  console.log(`finish-reason: ${result.finishReason}`);
  console.log(`usage: prompt=${result.usage.promptTokens} generated=${result.usage.generatedTokens}`);
  return 0;
}
