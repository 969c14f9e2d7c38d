"""What a model is for (`models.NAME.kind`, `llmhost models`, WIT `get-model-kind`)."""

from __future__ import annotations

from enum import StrEnum


class ModelKind(StrEnum):
    BASE = "base"  # pretrained only: continues text; a chat template of the host's is no reply format it learned
    INSTRUCT = "instruct"  # tuned to follow a chat template of its own
    EMBEDDING = "embedding"  # an encoder, or a model configured only for embeddings
