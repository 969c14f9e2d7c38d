"""The JavaScript sources of tests/e2e/test_js_versions.py, one per shipped `llmhost:llm` version (generated from
the template below): written by its fixture, and by the prebuild of `make test` (tests/conftest.py), whose builds of the
same sources the fixture's `llmhost build` then finds in the cache."""

from __future__ import annotations

from pathlib import Path

MAX_TOKENS = 12
# The params record each version's `infer` takes: 0.1.0's has 8 fields, 0.2.0 added five.
PARAMS_0_1_0 = (
    "maxTokens: 12, repeatPenalty: 1.0, repeatPenaltyLastNTokenCount: 0, stop: [], temperature: 0.0, topK: 40, "
    "topP: 0.9, seed: undefined"
)
PARAMS = PARAMS_0_1_0 + (
    ", constraint: undefined, logprobs: undefined, frequencyPenalty: 0.0, presencePenalty: 0.0, logitBias: []"
)
# What each version added, called by that version's source: (extra imports, an expression for `extra`).
ADDED = {
    "0.1.0": ("", "null"),
    "0.2.0": ('import { listModels } from "llmhost:llm/llm@{v}";', "listModels().map((m) => m.name)"),
    "0.2.1": ('import { defaultParams } from "llmhost:llm/llm@{v}";', "defaultParams(model).maxTokens"),
    "0.2.2": (
        'import { Sequence } from "llmhost:llm/sequences@{v}";',
        "Sequence.open(model).appendTokensWithLogprobs(tokenize(model, prompt), 0).map((p) => p === undefined)",
    ),
    # Outbound HTTP without a grant: `denied`, nothing sent.
    "0.2.3": (
        'import { send } from "llmhost:llm/outbound-http@{v}";',
        "caught(() => send({ method: 'GET', url: 'http://127.0.0.1:9/', headers: [], body: undefined, "
        "timeoutMs: undefined }))",
    ),
    # A response whose body is read in chunks, without a grant: `denied` the same way.
    "0.2.4": (
        'import { sendStreamed } from "llmhost:llm/outbound-http@{v}";',
        "caught(() => sendStreamed({ method: 'GET', url: 'http://127.0.0.1:9/', headers: [], body: undefined, "
        "timeoutMs: undefined }))",
    ),
    # The residency of the model the guest just ran: loaded, holding memory.
    "0.2.5": (
        'import { listModelStatus } from "llmhost:llm/llm@{v}";',
        "listModelStatus().filter((s) => s.name === model).map((s) => [s.state, s.memoryBytes > 0])",
    ),
}
TEMPLATE = """\
// A guest written against llmhost:llm@{v}: it names that version in its imports, and builds against it.
import {{ infer, tokenize }} from "llmhost:llm/llm@{v}";
{imports}

function caught(fn) {{
  try {{
    return fn();
  }} catch (error) {{
    return {{ tag: error.payload.tag }};
  }}
}}

export function run(args) {{
  const [model, prompt] = args;
  const result = infer(model, prompt, {{ {params} }});
  const extra = {extra};
  console.log(JSON.stringify({{ text: result.text, tokens: tokenize(model, prompt).length, extra }}));
  return 0;
}}
"""


def write_sources(root: Path) -> dict[str, Path]:
    """Each version's guest directory under `root` (`guest-VERSION/app.js`)."""
    sources = {}
    for version, (extra_imports, extra) in ADDED.items():
        source = root / f"guest-{version}"
        source.mkdir(parents=True, exist_ok=True)
        params = PARAMS_0_1_0 if version == "0.1.0" else PARAMS
        text = TEMPLATE.format(v=version, imports=extra_imports.replace("{v}", version), params=params, extra=extra)
        (source / "app.js").write_text(text)
        sources[version] = source
    return sources
