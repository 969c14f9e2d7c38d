// js_probe: the behaviour the e2e tests check for JavaScript guests (tests/e2e/test_js_guests.py). Each command
// prints one JSON value on stdout; a WIT `err` is printed as {"error": {"tag", "val"}} (exit code 0).
//   infer MODEL PROMPT MAX_TOKENS STOPS_JSON      infer, greedy
//   stream MODEL PROMPT MAX_TOKENS                infer-stream, greedy: every event
//   seq MODEL PROMPT                              sequences: append, generate, fork, truncate, token ids
//   error MODEL                                   an unknown model, then invalid params
import { infer, inferStream } from "llmhost:llm/llm@0.2.2";
import { Sequence } from "llmhost:llm/sequences@0.2.2";

function greedy(maxTokens, stop = []) {
  return {
    maxTokens, repeatPenalty: 1.0, repeatPenaltyLastNTokenCount: 0, stop, temperature: 0.0, topK: 40, topP: 0.9,
    seed: undefined, constraint: undefined, logprobs: undefined, frequencyPenalty: 0.0, presencePenalty: 0.0,
    logitBias: [],
  };
}

function caught(fn) {
  try {
    return fn();
  } catch (error) {
    if (error.payload === undefined) throw error;
    return { error: { tag: error.payload.tag, val: error.payload.val ?? null } };
  }
}

function usage(u) {
  return { prompt: u.promptTokenCount, generated: u.generatedTokenCount };
}

const commands = {
  infer(model, prompt, maxTokens, stops) {
    return caught(() => {
      const r = infer(model, prompt, greedy(Number(maxTokens), JSON.parse(stops)));
      return { text: r.text, finish: r.finishReason, usage: usage(r.usage) };
    });
  },
  stream(model, prompt, maxTokens) {
    return caught(() => {
      const stream = inferStream(model, prompt, greedy(Number(maxTokens)));
      const events = [];
      for (let e = stream.next(); e !== undefined; e = stream.next()) {
        events.push(e.tag === "chunk"
          ? { chunk: e.val.text, ids: Array.from(e.val.tokenIds) }
          : { done: e.val.finishReason, usage: usage(e.val.usage) });
      }
      return events;
    });
  },
  seq(model, prompt) {
    return caught(() => {
      const seq = Sequence.open(model);
      seq.append(prompt);
      const first = seq.generate(greedy(6));
      const fork = seq.fork();
      const length = seq.len();
      seq.truncate(length - first.usage.generatedTokenCount);
      const again = seq.generate(greedy(6));
      fork.append(" And");
      return {
        first: first.text, again: again.text, text: seq.text(), ids: Array.from(seq.tokenIds()),
        forkText: fork.text(), forkLen: fork.len(),
      };
    });
  },
  error(model) {
    return {
      unknown: caught(() => infer("no-such-model", "x", greedy(2))),
      invalid: caught(() => infer(model, "x", { ...greedy(2), topP: 5.0 })),
    };
  },
};

export function run(args) {
  const [name, ...rest] = args;
  if (!(name in commands)) {
    console.error(`js_probe: unknown command ${name}`);
    return 2;
  }
  console.log(JSON.stringify(commands[name](...rest)));
  return 0;
}
