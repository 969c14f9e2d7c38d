"""`FakeDecoder`: a deterministic decoder for unit tests of the engine's scheduling, slots, swapping, prefix
reuse and exact rewind, with no model.

Its "KV cache" is the list of tokens each slot holds, and the logits after a position are a pure function of
every token before it in that slot, so any bookkeeping error shows: evaluating a token at the wrong position, or
from a slot whose cells do not match the sequence, changes the logits (and a greedy text), and is recorded in
`violations`. Tokens are bytes (id = byte + 3; 1 = beginning of sequence, 2 = end of generation), as in the fake
engine.

`rounding=True` also imitates llama.cpp's kernels, whose rounding depends on the shape of the batch: each cell
remembers the shape of the row that evaluated it (its length, and whether its call held `tiled_at` tokens or more,
where llama.cpp's CPU backend takes another kernel), and the logits move with those shapes. Deterministic mode must
give the same text anyway.
"""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from llmhost.domain.types import InferencingParams
from llmhost.engine.local.decoder import BatchRow

if TYPE_CHECKING:
    from llmhost.engine.chat_template import TemplateInfo

BOS, EOG, BYTE_OFFSET = 1, 2, 3


class FakeSampler:
    def __init__(self, decoder: FakeDecoder, params: InferencingParams) -> None:
        self._decoder = decoder
        self._temperature = params.temperature
        self.plain_greedy = params.temperature == 0
        self._rng = np.random.default_rng(params.seed if params.seed is not None else 0)

    def accept(self, token: int) -> None:
        pass  # no penalties in the fake

    def sample(self, row: int) -> int:
        logits = self._decoder.logits(row).astype(np.float64)
        if self._temperature == 0:
            return int(np.argmax(logits))
        finite = np.isfinite(logits)
        weights = np.where(finite, np.exp((logits - logits[finite].max()) / self._temperature), 0.0)
        return int(self._rng.choice(len(logits), p=weights / weights.sum()))

    def close(self) -> None:
        pass


class FakeDecoder:
    def __init__(
        self,
        n_ctx: int = 64,
        n_batch: int = 16,
        n_slots: int = 4,
        eog_bias: float = -2.0,
        rounding: bool = False,
        tiled_at: int = 3,
        step_s: float = 0.0,
    ) -> None:
        """`step_s`: each decode call sleeps this long (a GPU-bound step: the host's CPU stays free)."""
        self.step_s = step_s
        self.n_vocab = 256 + BYTE_OFFSET
        self.n_ctx = n_ctx
        self.n_batch = n_batch
        self.n_slots = n_slots
        self.cells: dict[int, list[int]] = {slot: [] for slot in range(n_slots)}
        self.rounding = rounding
        self.tiled_at = tiled_at
        self.invariant_rows = tiled_at - 1
        self.shapes: dict[int, list[list[int]]] = {slot: [] for slot in range(n_slots)}  # per cell: [row length, tiled]
        self.calls: list[list[int]] = []  # the row lengths of each decode call
        self.violations: list[str] = []
        self.decodes = 0
        self._eog_bias = eog_bias
        self._kept: dict[int, Any] = {}
        self._last = -1

    # --- vocabulary --------------------------------------------------------------------------------------
    def tokenize(self, text: str, add_special: bool) -> list[int]:
        return ([BOS] if add_special else []) + [b + BYTE_OFFSET for b in text.encode()]

    def max_token_bytes(self) -> int:
        return 1  # a token per byte

    def piece(self, token: int) -> bytes:
        return bytes([token - BYTE_OFFSET]) if BYTE_OFFSET <= token < self.n_vocab else b""

    def is_eog(self, token: int) -> bool:
        return token == EOG

    def eos(self) -> int:
        return EOG

    def chat_template(self) -> TemplateInfo:
        from llmhost.engine.chat_template import TemplateInfo

        return TemplateInfo(source="", origin="the fake decoder", add_bos=True)

    # --- decoding ----------------------------------------------------------------------------------------
    def logits_after(self, history: Sequence[int], shapes: Sequence[Sequence[int]] = ()) -> Any:
        """The logits after `history`: a pure function of it (what a correct engine must always see), moved a
        little by the row shapes that evaluated it when `rounding` imitates llama.cpp."""
        seed = zlib.crc32(np.asarray(history, dtype=np.int32).tobytes())
        logits = np.random.default_rng(seed).standard_normal(self.n_vocab).astype(np.float32)
        if self.rounding and shapes:
            noise = np.random.default_rng(zlib.crc32(np.asarray(shapes, dtype=np.int32).tobytes()))
            logits += 0.3 * noise.standard_normal(self.n_vocab).astype(np.float32)
        logits[:BYTE_OFFSET] = -np.inf
        logits[BYTE_OFFSET + 128 :] = -np.inf  # ASCII only: every token is a whole character
        logits[EOG] = self._eog_bias  # ends sometimes, not always
        return logits

    def decode(self, rows: Sequence[BatchRow], logits_at: set[int]) -> int:
        if sum(len(c) for c in self.cells.values()) + sum(len(t) for _, _, t in rows) > self.n_ctx * self.n_slots:
            return 1  # no room in the (unified) cache
        if self.step_s:
            time.sleep(self.step_s)
        self.decodes += 1
        self.calls.append([len(tokens) for _, _, tokens in rows])
        total = sum(self.calls[-1])
        self._kept = {}
        index = 0
        for slot, start, tokens in rows:
            cells, shapes = self.cells[slot], self.shapes[slot]
            if start != len(cells):
                self.violations.append(f"slot {slot}: token at position {start} but {len(cells)} cells held")
                del cells[start:], shapes[start:]
            shape = [len(tokens), int(total >= self.tiled_at)]
            for token in tokens:
                cells.append(token)
                shapes.append(shape)
                if len(cells) > self.n_ctx:
                    self.violations.append(f"slot {slot}: {len(cells)} cells, over the window of {self.n_ctx}")
                if index in logits_at:
                    self._kept[index] = self.logits_after(cells, shapes)
                    self._last = index
                index += 1
        return 0

    def logits(self, index: int) -> Any:
        return self._kept[self._last if index == -1 else index]

    def argmax_rows(self, rows: Sequence[int]) -> list[int]:
        return [int(np.argmax(self.logits(row))) for row in rows]

    def new_sampler(self, params: InferencingParams) -> FakeSampler:
        return FakeSampler(self, params)

    # --- the KV cache ------------------------------------------------------------------------------------
    def seq_rm(self, slot: int, start: int) -> None:
        del self.cells[slot][max(0, start) :], self.shapes[slot][max(0, start) :]

    def seq_cp(self, source: int, target: int, end: int) -> None:
        end = len(self.cells[source]) if end < 0 else end
        self.cells[target], self.shapes[target] = self.cells[source][:end], self.shapes[source][:end]

    def save(self, slot: int) -> bytes | None:
        return json.dumps([self.cells[slot], self.shapes[slot]]).encode()

    def restore(self, slot: int, data: bytes) -> bool:
        self.cells[slot], self.shapes[slot] = json.loads(data)
        return True

    def close(self) -> None:
        pass
