"""A model file's vocabulary alone (llama.cpp `vocab_only`: no weights, no context, ~0.1 s to load): how remote
models whose GGUF is known here tokenize exactly as their server does, with no round trip."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmhost.domain.errors import EngineError
from llmhost.engine.local.llama_decoder import LlamaVocabCalls, llama_lib


class LlamaVocab(LlamaVocabCalls):
    def __init__(self, path: Path, name: str) -> None:
        self.lib = llama_lib()
        mparams = self.lib.llama_model_default_params()
        mparams.vocab_only = True
        self.model: Any = self.lib.llama_model_load_from_file(str(path).encode(), mparams)
        if not self.model:
            raise EngineError(f"llama.cpp could not read the vocabulary of {path} (check `models.{name}.path`)")
        self.vocab = self.lib.llama_model_get_vocab(self.model)
        self.n_vocab = int(self.lib.llama_vocab_n_tokens(self.vocab))

    def close(self) -> None:
        if self.model:
            self.lib.llama_model_free(self.model)
            self.model = None
