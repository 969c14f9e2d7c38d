"""A model file's vocabulary alone (llama.cpp `vocab_only`: no weights, no context, ~0.1 s to load): how remote
models whose GGUF is known here tokenize exactly as their server does, with no round trip."""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

from ..types import EngineError
from .llama_decoder import llama_lib


class LlamaVocab:
    def __init__(self, path: Path, name: str) -> None:
        self.lib = llama_lib()
        mparams = self.lib.llama_model_default_params()
        mparams.vocab_only = True
        self.model: Any = self.lib.llama_model_load_from_file(str(path).encode(), mparams)
        if not self.model:
            raise EngineError(f"llama.cpp could not read the vocabulary of {path} (check `models.{name}.path`)")
        self.vocab = self.lib.llama_model_get_vocab(self.model)
        self.n_vocab = int(self.lib.llama_vocab_n_tokens(self.vocab))

    # The same calls as LlamaDecoder's (special-token text parsed as special tokens, as every prompt is).
    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        data = text.encode()
        size = len(data) + 8
        while True:
            buf = (self.lib.llama_token * size)()
            n = self.lib.llama_tokenize(self.vocab, data, len(data), buf, size, add_special, True)
            if n >= 0:
                return list(buf[:n])
            size = -n

    def piece(self, token: int) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = self.lib.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = self.lib.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
        return bytes(buf.raw[:n])

    def close(self) -> None:
        if self.model:
            self.lib.llama_model_free(self.model)
            self.model = None
