"""continuous: a numbered list written by interleaving the program's own text with model generations.

The sequence keeps the model state between steps, so each step evaluates only its new tokens; with plain
`infer` the whole growing prompt would be evaluated again at every step.
"""

import sys

from componentize_py_types import Err
from wit_world import WitWorld as _World
from wit_world.imports import llm, sequences

MODEL = "gemma-3-270m"
PROMPT = "What are the most popular types of vehicles?\n"
ITEMS = 5


class WitWorld(_World):
    def run(self, args: list[str]) -> int:
        prompt = " ".join(args) + "\n" if args else PROMPT
        params = llm.InferencingParams(
            max_tokens=24,
            repeat_penalty=1.1,
            repeat_penalty_last_n_token_count=64,
            stop=["\n"],
            temperature=0.0,  # greedy: the same list every run
            top_k=40,
            top_p=0.9,
            seed=None,
            constraint=None,
            logprobs=None,
            frequency_penalty=0.0,
            presence_penalty=0.0,
            logit_bias=[],
        )
        try:
            with sequences.Sequence.open(MODEL) as seq:
                seq.append(prompt)
                for i in range(ITEMS):
                    seq.append(f"{i}, ")
                    seq.generate(params)
                    seq.append("\n")
                print(seq.text(), end="")
                print(f"tokens: {seq.len()}")
                print(f"evaluated: {seq.evaluated_token_count()}")
                print(f"log-likelihood: {seq.log_likelihood():.3f}")
        except Err as error:
            print(f"continuous: {type(error.value).__name__}: {getattr(error.value, 'value', '')}", file=sys.stderr)
            return 1
        return 0
