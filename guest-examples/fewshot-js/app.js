// fewshot-js: a JavaScript guest that depends on an npm package. Its few-shot prompt is a Mustache template
// (`mustache`, declared in package.json, bundled into the component by `llmhost build`); the model completes it.
import Mustache from "mustache";
import { infer } from "llmhost:llm/llm@0.2.4";

const MODEL = "gemma-3-270m"; // a completion (base) model: it continues the pattern of the examples
const TEMPLATE = "{{#examples}}Q: {{q}}\nA: {{a}}\n\n{{/examples}}Q: {{question}}\nA:";
const EXAMPLES = [
  { q: "What is the capital of Italy?", a: "Rome" },
  { q: "What is the capital of Japan?", a: "Tokyo" },
];

export function run(args) {
  const question = args.length > 0 ? args.join(" ") : "What is the capital of France?";
  const prompt = Mustache.render(TEMPLATE, { examples: EXAMPLES, question });
  const params = {
    maxTokens: 8,
    repeatPenalty: 1.0,
    repeatPenaltyLastNTokenCount: 64,
    stop: ["\n"],
    temperature: 0.0,
    topK: 40,
    topP: 0.9,
    seed: undefined,
    constraint: undefined,
    logprobs: undefined,
    frequencyPenalty: 0.0,
    presencePenalty: 0.0,
    logitBias: [],
  };
  console.log(prompt);
  console.log(`answer:${infer(MODEL, prompt, params).text}`);
  return 0;
}
