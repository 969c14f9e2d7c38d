"""rag: retrieval-augmented generation. Embed a small corpus with the built-in embedding model, take the passages
nearest to the question (cosine of unit vectors: a dot product), and answer with `infer`, those passages as the
context. Prints whether it built the index or reused it, which passages it used, then the answer.

The index (the corpus's vectors) is kept in the key-value store `default` (`llmhost_guest.kv`), under a key named
after the embedding model and a digest of the corpus: the first run embeds the corpus and stores it, later runs
(other processes, other days) read it back instead, and a changed corpus gets a new key. Without the store granted
(`key-value-stores = ["default"]`) it still answers, embedding the corpus every run."""

import hashlib
import sys
from array import array

from llmhost_guest import LlmError, kv, llm
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
STORE = "default"


def index_key(corpus: list[str]) -> str:
    """The store key of the corpus's index: its embedding model and a digest of its passages."""
    digest = hashlib.sha256("\n".join(corpus).encode()).hexdigest()[:16]
    return f"rag/index/{EMBEDDING_MODEL}/{digest}"


def load_index(store: kv.Store, key: str, count: int) -> list[list[float]] | None:
    """The stored vectors (float32, as the host returns them, so exactly the same), or None if there are none."""
    data = store.get(key)
    if data is None:
        return None
    values = array("f")
    values.frombytes(data)
    size = len(values) // count
    return [list(values[i * size : (i + 1) * size]) for i in range(count)]


def corpus_vectors(corpus: list[str]) -> tuple[list[list[float]], str]:
    """The corpus's vectors, from the store when it has them; and what happened, for the first line. A store that
    is not granted (or fails) costs only the reuse: the corpus is embedded, and the reason goes to stderr."""
    key = index_key(corpus)
    try:
        store = kv.open(STORE)
        found = load_index(store, key, len(corpus))
    except kv.KvError as error:
        print(f"rag: the index is not kept ({error.kind}: {error.message})", file=sys.stderr)
        return llm.embed(corpus, EMBEDDING_MODEL), f"index: built ({len(corpus)} passages)"
    if found is not None:
        return found, f"index: reused from key-value store {STORE!r} ({len(corpus)} passages)"
    passages = llm.embed(corpus, EMBEDDING_MODEL)
    try:
        store.set(key, b"".join(array("f", vector).tobytes() for vector in passages))
    except kv.KvError as error:
        print(f"rag: the index is not kept ({error.kind}: {error.message})", file=sys.stderr)
        return passages, f"index: built ({len(corpus)} passages)"
    return passages, f"index: built and stored in key-value store {STORE!r} ({len(corpus)} passages)"


def nearest(question: list[float], passages: list[list[float]], k: int) -> list[tuple[int, float]]:
    """The k passages with the highest cosine to the question, best first (the vectors are unit length)."""
    scores = [sum(a * b for a, b in zip(question, p, strict=True)) for p in passages]
    return sorted(enumerate(scores), key=lambda item: -item[1])[:k]


class WitWorld(_World):
    def run(self, args: list[str]) -> int:
        question = " ".join(args) if args else QUESTION
        try:
            passages, how = corpus_vectors(CORPUS)
            print(how)
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
