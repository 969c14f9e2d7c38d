"""contrastive: contrastive decoding (Li et al., 2023) as a logits processor that runs in this guest.

Two sequences of one model: the *expert* holds the whole prompt, the *amateur* only its last line, so it knows
the form of an answer but not the question. At each step the processor reads both next-token distributions
(`next_token_logprobs`, decoded in the host's shared batch), keeps the expert's plausible candidates (within
log(ALPHA) of its best) and scores each by how much more the expert believes it than the amateur:
log p_expert - log p_amateur. Greedy on that score favours what the context implies over generic continuations.
The same prompt decoded greedily by the expert alone is printed first, for comparison.
"""

import math
import sys

from llmhost_guest import LlmError, Sequence
from wit_world import WitWorld as _World

MODEL = "gemma-3-270m"
PROMPT = "Question: Which planet is known as the red planet, and why?\nAnswer:"
MAX_TOKENS = 32
TOP = 64  # expert candidates per step
AMATEUR_TOP = 256  # amateur candidates read per step; a token outside them gets the lowest of theirs
ALPHA = 0.1  # plausibility: keep candidates with p >= ALPHA * p(best)


def contrast(amateur):
    """A processor `(seq, candidates) -> candidates` that keeps `amateur` in step with the expert `seq` (it
    appends the tokens the expert gained since the last call) and rescores the candidates."""
    seen = []

    def processor(seq, candidates):
        ids = seq.token_ids
        if not seen:
            seen.append(len(ids))
        amateur.append_tokens(ids[seen[0] :])
        seen[0] = len(ids)
        weak = {token: lp for token, lp, _ in amateur.next_token_logprobs(AMATEUR_TOP)}
        floor = min(weak.values())
        plausible = candidates[0][1] + math.log(ALPHA)
        return [(t, lp - weak.get(t, floor), piece) for t, lp, piece in candidates if lp >= plausible]

    return processor


class WitWorld(_World):
    def run(self, args: list[str]) -> int:
        prompt = " ".join(args) if args else PROMPT
        amateur_prompt = prompt.rsplit("\n", 1)[-1]
        steps = {"max_tokens": MAX_TOKENS, "top": TOP, "temperature": 0.0, "stop": "\n"}
        try:
            with Sequence(MODEL, prompt) as expert:
                greedy = expert.fork()
                plain = greedy.generate_with([], **steps)
                greedy.close()
                with Sequence(MODEL, amateur_prompt) as amateur:
                    text = expert.generate_with([contrast(amateur)], **steps)
        except LlmError as error:
            print(f"contrastive: {type(error).__name__}: {error.message}", file=sys.stderr)
            return 1
        print(prompt)
        print(f"greedy (expert alone):{plain}")
        print(f"contrastive (expert - amateur {amateur_prompt!r}):{text}")
        return 0
