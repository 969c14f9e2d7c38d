"""beam-search: a multi-step program (a short list, one item per step) searched with beams over the whole
program, against greedy generation at every step. Each step's `beam_search` decodes all its beams in one batch
on the host; across steps the program keeps the `WIDTH` best partial programs by joint log-likelihood.
"""

import sys

from llmhost_guest import LlmError, Sequence
from wit_world import WitWorld as _World

MODEL = "gemma-3-270m"
PROMPT = "Three famous painters and one painting by each:\n"
STEPS = ["1.", "\n2.", "\n3."]
WIDTH = 4
MAX_TOKENS = 12


def search(prompt: str, width: int) -> tuple[Sequence, float]:
    """The best program (sequence, joint log-likelihood of all generated parts) keeping `width` candidates."""
    candidates = [(Sequence(MODEL, prompt), 0.0)]
    for step in STEPS:
        pool = []
        for seq, total in candidates:
            seq += step
            start = len(seq)
            for child, score in seq.beam_search(width, MAX_TOKENS, stop="\n"):
                if str(child)[start:].strip():  # the program's own check between steps: an item may not be empty
                    pool.append((child, total + score))
                else:
                    child.close()
            seq.close()
        pool.sort(key=lambda pair: -pair[1])
        for seq, _ in pool[width:]:
            seq.close()
        candidates = pool[:width]
    best, total = candidates[0]
    for seq, _ in candidates[1:]:
        seq.close()
    return best, total


class WitWorld(_World):
    def run(self, args: list[str]) -> int:
        prompt = " ".join(args) + "\n" if args else PROMPT
        try:
            # Width 1 is greedy generation at every step (same tokens, same joint log-likelihood).
            for label, width in (("greedy", 1), (f"beam width {WIDTH}", WIDTH)):
                seq, total = search(prompt, width)
                print(f"== {label}: joint log-likelihood {total:.3f}")
                print(seq)
                seq.close()
        except LlmError as error:
            print(f"beam-search: {type(error).__name__}: {error.message}", file=sys.stderr)
            return 1
        return 0
