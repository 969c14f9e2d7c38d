"""prompt-templates: a `command` guest whose few-shot prompts are Jinja templates (jinja2, a PyPI dependency declared
in pyproject.toml) filled from labelled examples kept in the key-value store `default`.

    add TEXT LABEL     keep one labelled example; prints how many there are
    render TEXT        print the few-shot prompt for TEXT (no model)
    classify TEXT      the model completes that prompt (greedy, one line): prints {"text", "label"}
"""

import json

import jinja2
import wit_world
from llmhost_guest import kv, llm

MODEL = "gemma-3-270m"  # a completion (base) model: it continues the pattern of the examples
KEY = "examples"
TEMPLATE = jinja2.Template(
    "Label each review as positive or negative.\n\n"
    "{% for example in examples %}Review: {{ example.text }}\nLabel: {{ example.label }}\n\n{% endfor %}"
    "Review: {{ text }}\nLabel:"
)


def examples(store):
    stored = store.get(KEY)
    return [] if stored is None else json.loads(stored)


class WitWorld(wit_world.WitWorld):
    def run(self, args):
        store = kv.open("default")
        op, rest = (args[0], args[1:]) if args else ("", [])
        if op == "add" and len(rest) == 2:
            kept = examples(store) + [{"text": rest[0], "label": rest[1]}]
            store.set(KEY, json.dumps(kept))
            print(f"{len(kept)} examples")
        elif op == "render" and len(rest) == 1:
            print(TEMPLATE.render(examples=examples(store), text=rest[0]))
        elif op == "classify" and len(rest) == 1:
            prompt = TEMPLATE.render(examples=examples(store), text=rest[0])
            result = llm.infer(prompt, MODEL, max_tokens=4, temperature=0.0, repeat_penalty=1.0, stop=["\n"])
            print(json.dumps({"text": rest[0], "label": result.text.strip()}))
        else:
            print("usage: add TEXT LABEL | render TEXT | classify TEXT")
            return 2
        return 0
