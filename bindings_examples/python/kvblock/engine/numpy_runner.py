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
    def __init__(self, model: Model, cache: KVCache, kernel_clock: ContextManager[Any],
                 kv_dtype: str = "float32") -> None:
        self.model, self.cache, self.kernel_clock = model, cache, kernel_clock
        # q / out / new K/V dtype of the numpy forward: the cache's for fp32 and fp16 caches, fp32 for fp8
        # (the CPU kernels read fp32 q and quantize fp32 new K/V)
        self.act_dtype = np.float16 if kv_dtype == "float16" else np.float32

    def run(self, b: StepBatch) -> Tuple[np.ndarray, Optional[List[int]]]:
        """(logits [len(b.rows), vocab], None: the engine samples them)."""
        mc = self.model.cfg
        nd = len(b.decodes)

        def attention(layer: int, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
            if self.act_dtype != np.float32:
                q, k, v = (x.astype(self.act_dtype) for x in (q, k, v))
            out = np.empty_like(q)
            window, sink = mc.layer_window(layer)
            group = 1 if mc.hybrid and window == 0 else 0
            slots, bt_d, bt_p = b.per_group[group]
            pg_d, pg_p = b.prefix_groups[group] if b.prefix_groups else (None, None)
            with self.kernel_clock:
                write_kv(self.cache, layer, k, v, slots)
                if nd:
                    paged_attention(self.cache, layer, q[:nd], bt_d, b.seq_lens_d, out[:nd], window=window,
                                    sink=sink, prefix_groups=pg_d)
                if b.prefills:
                    prefill_attention(self.cache, layer, q[nd:], b.query_start_p, b.seq_lens_p, bt_p, out[nd:],
                                      window=window, sink=sink, prefix_groups=pg_p, tree_mask=b.tree_mask)
            return out.astype(np.float32, copy=False)

        return self.model.forward(b.tokens, b.positions, attention, logit_rows=b.rows), None
