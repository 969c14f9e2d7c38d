// Benchmark guest in JavaScript, the counterpart of bench/guest/app.py (bench/js_guests.py): `infer MODEL N
// PROMPT` makes one greedy `infer` call and prints {"generated", "seconds"}, timed inside the guest; `noop` returns
// at once (for start-up timing).
import { infer } from "llmhost:llm/llm@0.2.3";

const greedy = (maxTokens) => ({
  maxTokens, repeatPenalty: 1.0, repeatPenaltyLastNTokenCount: 0, stop: [], temperature: 0.0, topK: 0, topP: 1.0,
  seed: undefined, constraint: undefined, logprobs: undefined, frequencyPenalty: 0.0, presencePenalty: 0.0,
  logitBias: [],
});

export function run(args) {
  if (args[0] === "infer") {
    const [, model, n, prompt] = args;
    const started = performance.now();
    const result = infer(model, prompt, greedy(Number(n)));
    const seconds = (performance.now() - started) / 1000;
    console.log(JSON.stringify({ generated: result.usage.generatedTokenCount, seconds }));
  }
  return 0;
}
