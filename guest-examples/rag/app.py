"""rag: retrieval-augmented generation. Embed a small corpus with the built-in embedding model, take the passages
nearest to the question (cosine of unit vectors: a dot product), and answer with `infer`, those passages as the
context. Prints which passages it used, then the answer."""

import sys

from llmhost_guest import LlmError, llm
from wit_world import WitWorld as _World

EMBEDDING_MODEL = "all-minilm-l6-v2"
MODEL = "gemma-3-270m"
TOP_K = 2
QUESTION = "How tall is Kilimanjaro?"
CORPUS = [
    "The Danube flows through ten countries, from the Black Forest in Germany to the Black Sea in Romania.",
    "Kilimanjaro in Tanzania rises 5,895 metres above sea level; it is the highest mountain in Africa.",
    "Honey bees turn flower nectar into honey by adding enzymes and fanning it until most of the water evaporates.",
    "The Berlin Wall fell on 9 November 1989, when crowds crossed as guards opened the checkpoints.",
    "Mount Kenya, an extinct volcano, is the second-highest peak in Africa at 5,199 metres.",
    "A cheetah can sprint at about 110 kilometres per hour in short bursts.",
    "Canberra became the seat of Australia's federal parliament in 1927.",
    "Sunlight takes about eight minutes and twenty seconds to reach the Earth.",
]
PROMPT = "Answer the question from the context.\n\nContext:\n{context}\n\nQuestion: {question}\nAnswer:"
PARAMS = {"max_tokens": 24, "temperature": 0.0, "stop": ["\n"]}


def nearest(question: list[float], passages: list[list[float]], k: int) -> list[tuple[int, float]]:
    """The k passages with the highest cosine to the question, best first (the vectors are unit length)."""
    scores = [sum(a * b for a, b in zip(question, p, strict=True)) for p in passages]
    return sorted(enumerate(scores), key=lambda item: -item[1])[:k]


class WitWorld(_World):
    def run(self, args: list[str]) -> int:
        question = " ".join(args) if args else QUESTION
        try:
            passages = llm.embed(CORPUS, EMBEDDING_MODEL)
            query = llm.embed(question, EMBEDDING_MODEL)[0]
            used = nearest(query, passages, TOP_K)
            for index, score in used:
                print(f"used [{index}] {score:.3f} {CORPUS[index]}")
            context = "\n".join(f"- {CORPUS[index]}" for index, _ in used)
            answer = llm.infer(PROMPT.format(context=context, question=question), MODEL, **PARAMS)
            print(f"answer:{answer.text}")
        except LlmError as error:
            print(f"rag: {type(error).__name__}: {error.message}", file=sys.stderr)
            return 1
        return 0
