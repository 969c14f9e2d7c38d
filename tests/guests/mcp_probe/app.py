"""mcp_probe: the tool guest of tests/e2e/test_mcp.py (its world: wit/world.wit)."""

from componentize_py_types import Err
from llmhost_guest import LlmError, llm
from wit_world import Options, Report, WitWorld, exports

GREEDY = dict(temperature=0.0, top_k=0, top_p=1.0, repeat_penalty=1.0, repeat_penalty_last_n_token_count=0)


class WitWorld(WitWorld):
    def generate(self, prompt: str, max_tokens: int) -> Report:
        try:
            result = llm.infer(prompt, "gemma-3-270m", max_tokens=max_tokens, **GREEDY)
        except LlmError as error:
            raise Err(f"{type(error).__name__}: {error.message}") from None
        return Report(generated=result.usage.generated_tokens, text=result.text, finish=result.finish_reason)

    def echo(self, options: Options, count: int) -> Options:
        return Options(options.tone, options.target, options.tags * max(count, 0), options.note)

    def fail(self, how: str) -> str:
        if how == "err":
            raise Err("failed on purpose")
        if how == "trap":
            raise ValueError("trapped on purpose")
        if how == "spin":
            while True:
                pass
        if how == "hog":
            hoard = []
            while True:
                hoard.append(bytearray(1 << 20))
        return "did not fail"


class Extra(exports.Extra):
    def echo(self, text: str) -> str:
        return text
