"""continuous: a numbered list written by interleaving the program's own text with model generations, on the
guest SDK (`llmhost_guest`). Between generations the program measures each generated name and writes its length
into the sequence, so the model sees it before the next item.

The sequence keeps the model state between steps, so each step evaluates only its new tokens; with plain
`infer` the whole growing prompt would be evaluated again at every step.
"""

import sys

from llmhost_guest import LlmError, Sequence
from wit_world import WitWorld as _World

MODEL = "gemma-3-270m"
PROMPT = "What are the most popular types of vehicles?\n"
ITEMS = 5


class WitWorld(_World):
    def run(self, args: list[str]) -> int:
        prompt = " ".join(args) + "\n" if args else PROMPT
        try:
            with Sequence(MODEL, prompt) as seq:
                for i in range(ITEMS):
                    seq += f"{i}, "
                    # greedy: the same list every run; the newline is not returned, the state ends right before it
                    name = seq.generate(max_tokens=24, stop="\n", temperature=0.0)
                    seq += f" ({len(name.strip())} characters)\n"
                print(seq, end="")
                print(f"tokens: {seq.token_count}")
                print(f"evaluated: {seq.evaluated_token_count}")
                print(f"log-likelihood: {seq.log_likelihood:.3f}")
        except LlmError as error:
            print(f"continuous: {type(error).__name__}: {error.message}", file=sys.stderr)
            return 1
        return 0
