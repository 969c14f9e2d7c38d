"""A plain numpy forward pass of a sentence-transformers BERT from its original safetensors weights: a second
implementation against which the GGUF conversion (engine/local/convert_bert.py) is checked.

Embeddings (word + position + token type 0) and LayerNorm, then post-LayerNorm encoder layers (self-attention,
GELU feed-forward), then mean pooling over the tokens and L2 normalization, as sentence-transformers' Transformer,
Pooling and Normalize modules do for all-MiniLM-L6-v2.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _layer_norm(x: Any, weight: Any, bias: Any, eps: float) -> Any:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


class BertReference:
    def __init__(self, model_dir: Path) -> None:
        from safetensors.numpy import load_file

        self.config = json.loads((model_dir / "config.json").read_text())
        self.w = {k: v.astype(np.float64) for k, v in load_file(str(model_dir / "model.safetensors")).items()}

    def hidden_states(self, ids: list[int]) -> Any:
        w, c = self.w, self.config
        eps = float(c["layer_norm_eps"])
        heads = int(c["num_attention_heads"])
        n = len(ids)
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:n]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
        dim = x.shape[1] // heads
        for layer in range(int(c["num_hidden_layers"])):
            p = f"encoder.layer.{layer}."

            def linear(x: Any, name: str, p: str = p) -> Any:
                return x @ w[p + name + ".weight"].T + w[p + name + ".bias"]

            q, k, v = (
                linear(x, f"attention.self.{m}").reshape(n, heads, dim).transpose(1, 0, 2)
                for m in ("query", "key", "value")
            )
            scores = q @ k.transpose(0, 2, 1) / math.sqrt(dim)
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            attention = (scores / scores.sum(axis=-1, keepdims=True)) @ v
            attention = attention.transpose(1, 0, 2).reshape(n, heads * dim)
            x = _layer_norm(
                x + linear(attention, "attention.output.dense"),
                w[p + "attention.output.LayerNorm.weight"],
                w[p + "attention.output.LayerNorm.bias"],
                eps,
            )
            up = linear(x, "intermediate.dense")
            up = 0.5 * up * (1.0 + _erf(up / math.sqrt(2.0)))  # BERT's exact GELU
            x = _layer_norm(
                x + linear(up, "output.dense"), w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], eps
            )
        return x

    def embed(self, ids: list[int], pooling: str = "mean") -> list[float]:
        states = self.hidden_states(ids)
        vector = states.mean(axis=0) if pooling == "mean" else states[0]
        return [float(v) for v in vector / np.linalg.norm(vector)]
