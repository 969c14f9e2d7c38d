"""llmhost_guest: a small Python SDK for llmhost guests, over the generated `wit_world` bindings.

    from llmhost_guest import llm, Sequence

    print(llm.infer("The capital of France is", max_tokens=8, temperature=0.0))
    seq = Sequence("gemma-3-270m", "Q: What is 2 + 2?\\nA:")
    seq.generate(max_tokens=8, stop="\\n", temperature=0.0)
    print(str(seq))

`llmhost build` puts this package on componentize-py's module path. See docs/guest-sdk.md.
"""

from . import config as config  # config values (wasi:config): `from llmhost_guest import config`
from . import http as http  # outbound HTTP (and http-app responses of any size): `from llmhost_guest import http`
from . import kv as kv  # key-value state (wasi:keyvalue): `from llmhost_guest import kv`
from . import llm, processors
from .errors import InvalidInput, LlmError, ModelNotSupported, RuntimeError_
from .llm import Interleaved, interleave
from .params import DEFAULT_CHAT_MODEL, DEFAULT_MODEL, Chunk, Completion, Done, TokenLogprob, Usage, defaults
from .sequence import Sequence

__all__ = [
    "DEFAULT_CHAT_MODEL",
    "DEFAULT_MODEL",
    "Chunk",
    "Completion",
    "Done",
    "Interleaved",
    "InvalidInput",
    "LlmError",
    "ModelNotSupported",
    "RuntimeError_",
    "Sequence",
    "TokenLogprob",
    "Usage",
    "defaults",
    "interleave",
    "llm",
    "processors",
]
