"""classify: label texts by `select` (SGLang's select): the host scores every label as a continuation of the
prompt in one batch, and the most likely one is appended."""

import sys

from llmhost_guest import LlmError, Sequence
from wit_world import WitWorld as _World

MODEL = "gemma-3-270m"
LABELS = [" positive", " negative", " neutral"]
# A few labelled examples first: the small base model follows the pattern far better than an instruction.
SHOTS = (
    "Review: Great phone, it works perfectly.\nSentiment: positive\n"
    "Review: It broke after one day, a waste of money.\nSentiment: negative\n"
    "Review: The shirt is blue and made of cotton.\nSentiment: neutral\n"
)
REVIEWS = [
    "I loved this film, the acting was wonderful.",
    "Terrible service, cold food and a rude waiter.",
    "The package arrived on Tuesday.",
]


class WitWorld(_World):
    def run(self, args: list[str]) -> int:
        reviews = [" ".join(args)] if args else REVIEWS
        try:
            for review in reviews:
                with Sequence(MODEL, f"{SHOTS}Review: {review}\nSentiment:") as seq:
                    scores = seq.score(LABELS)
                    label = seq.select(LABELS)
                    shown = " ".join(f"{name.strip()}={value:.2f}" for name, value in zip(LABELS, scores, strict=True))
                    print(f"{label.strip():8} | {shown} | {review}")
        except LlmError as error:
            print(f"classify: {type(error).__name__}: {error.message}", file=sys.stderr)
            return 1
        return 0
