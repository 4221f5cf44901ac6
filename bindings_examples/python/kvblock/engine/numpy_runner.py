"""The numpy model runner: one step's batch (StepBatch) through model.Model, with libkvblock's write_kv,
paged attention for the decode rows and prefill attention for the prompt chunks on the engine's KV cache,
each layer reading its KV cache group's slots and block tables (a hybrid model's full layers group 1)."""
from __future__ import annotations

from typing import Any, ContextManager, List, Optional, Tuple

import numpy as np

from ..kernels import KVCache, paged_attention, prefill_attention, write_kv
from .model import Model
from .step import StepBatch


class NumpyRunner:
    def __init__(self, model: Model, cache: KVCache, kernel_clock: ContextManager[Any]) -> None:
        self.model, self.cache, self.kernel_clock = model, cache, kernel_clock

    def run(self, b: StepBatch) -> Tuple[np.ndarray, Optional[List[int]]]:
        """(logits [len(b.rows), vocab], None: the engine samples them)."""
        mc = self.model.cfg
        nd = len(b.decodes)

        def attention(layer: int, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
            out = np.empty_like(q)
            window, sink = mc.layer_window(layer)
            slots, bt_d, bt_p = b.per_group[1 if mc.hybrid and window == 0 else 0]
            with self.kernel_clock:
                write_kv(self.cache, layer, k, v, slots)
                if nd:
                    paged_attention(self.cache, layer, q[:nd], bt_d, b.seq_lens_d, out[:nd], window=window,
                                    sink=sink)
                if b.prefills:
                    prefill_attention(self.cache, layer, q[nd:], b.query_start_p, b.seq_lens_p, bt_p, out[nd:],
                                      window=window, sink=sink)
            return out

        return self.model.forward(b.tokens, b.positions, attention, logit_rows=b.rows), None
