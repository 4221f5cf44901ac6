"""The torch model runner: one engine step's host inputs (StepBatch) -> device tensors -> the model with
libkvblock's write_kv and paged / prefill attention on the engine's KV cache -> logits and greedy tokens.

Decode-only steps replay a CUDA graph captured per batch-size bucket (1, 2, 4, 8, then multiples of 16 up to
max_num_seqs): the step's inputs are copied into static buffers padded to the bucket (padding rows: slot -1,
seq_len 0, which the kernels skip and answer with zeros), then one replay runs every layer. The kernels
check block tables, seq_lens and slots on the device; take_fault reads their record once per step, outside
capture, and raises KernelFault on bad input. A hybrid model (window and full layers as two KV cache
groups, e.g. Qwen2 with max_window_layers) runs eagerly: the graphs hold one group's block table."""
from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, ContextManager, Dict, List, Optional, Tuple, Union

import numpy as np
import torch

from .. import _lib
from ..errors import check
from ..kernels import KVCache, paged_attention, prefill_attention, take_fault, write_kv
from .engine import StepBatch
from .torch_model import TorchModel

_Q_DTYPE = {torch.float16: "KVB_DTYPE_FP16", torch.bfloat16: "KVB_DTYPE_BF16", torch.float32: "KVB_DTYPE_FP32"}


def graph_buckets(max_num_seqs: int) -> List[int]:
    """Batch sizes with a captured graph: a decode step of n sequences replays the smallest bucket >= n."""
    sizes = [b for b in (1, 2, 4, 8) if b < max_num_seqs] + list(range(16, max_num_seqs, 16))
    return sorted(set(sizes + [max_num_seqs]))


class ModelRunner:
    def __init__(self, model: TorchModel, cache: KVCache, max_num_seqs: int, *, cuda_graph: Union[bool, str] = True,
                 kernel_clock: Optional[ContextManager[Any]] = None, attn_dtype: Optional[torch.dtype] = None) -> None:
        self.model, self.cache = model, cache
        # q / out / new K/V dtype of the kernels when not the model's: a 16- or 32-bit cache in another dtype
        # than the model (an fp8 cache reads q and quantizes K/V in the model's dtype)
        self.attn_dtype = attn_dtype if attn_dtype != model.dtype else None
        self.device = model.device
        self.is_cuda = self.device.type == "cuda"
        self.kernel_clock = kernel_clock or contextlib.nullcontext()
        self.max_num_seqs = max_num_seqs
        # Graphs read a block table as wide as the longest sequence the model takes (max_len tokens).
        self.graph_cols = -(-model.max_len // cache.block_size)
        self.graphs: Dict[int, Tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        # cuda_graph="emulate" (tests, any device): the same static buffers, padding and bucket choice, but a
        # replay calls the decode forward eagerly instead of a captured graph.
        self.emulate = cuda_graph == "emulate"
        self.use_graphs = bool(cuda_graph) and (self.is_cuda or self.emulate) and not model.cfg.hybrid
        self.graph_replays = 0
        self.decode_steps, self.decode_s = 0, 0.0
        if self.use_graphs:
            self._capture()

    def _stream(self) -> Any:
        return torch.cuda.current_stream(self.device) if self.is_cuda else None

    def _dev(self, a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(a)).to(self.device)

    def _attention(self, cache: KVCache, nd: int, groups: List[tuple], seq_lens_d: Optional[torch.Tensor],
                   query_start_p: Optional[torch.Tensor], seq_lens_p: Optional[torch.Tensor],
                   prefix_groups: Optional[List[tuple]] = None, tree_mask: Optional[torch.Tensor] = None) -> Callable:
        """The model's attention callback for one step: decode rows [0, nd), prompt-chunk rows after them.
        prefix_groups: per KV cache group, the (decode, prefill) kvblock.PrefixGroups of StepBatch (host
        arrays, read by the kernel call itself); None = plain (the captured graphs)."""
        mc = self.model.cfg
        stream = self._stream()

        def attention(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            if self.attn_dtype is not None:
                q, k, v = q.to(self.attn_dtype), k.to(self.attn_dtype), v.to(self.attn_dtype)
            out = torch.empty_like(q)
            window, sink = mc.layer_window(layer)
            group = 1 if mc.hybrid and window == 0 else 0
            slots, bt_d, bt_p = groups[group]
            pg_d, pg_p = prefix_groups[group] if prefix_groups else (None, None)
            with self.kernel_clock:
                write_kv(cache, layer, k, v, slots, stream=stream)
                if nd:
                    paged_attention(cache, layer, q[:nd], bt_d, seq_lens_d, out[:nd], window=window, sink=sink,
                                    stream=stream, prefix_groups=pg_d)
                if query_start_p is not None:
                    prefill_attention(cache, layer, q[nd:], query_start_p, seq_lens_p, bt_p, out[nd:],
                                      window=window, sink=sink, stream=stream, prefix_groups=pg_p,
                                      tree_mask=tree_mask)
            return out if self.attn_dtype is None else out.to(self.model.dtype)

        return attention

    def run(self, b: StepBatch) -> Tuple[torch.Tensor, List[int]]:
        """(logits [len(b.rows), vocab] on the device, greedy token per row)."""
        t0 = time.perf_counter()
        nd = len(b.decodes)
        if (self.graphs and not b.prefills and nd <= self.max_num_seqs and len(b.per_group) == 1
                and self._columns(b) <= self.graph_cols):
            logits = self._replay(b)
        else:
            logits = self._eager(b)
        with self.model.elementwise_clock:
            tokens = logits.argmax(dim=-1)
        if self.is_cuda:
            with self.kernel_clock:  # once per step: raises KernelFault on bad kernel input
                take_fault(self.cache, self._stream())
        out = tokens.tolist()
        if not b.prefills:  # decode-only steps: the runner's share of them (inputs, forward, sampling)
            self.decode_steps += 1
            self.decode_s += time.perf_counter() - t0
        return logits, out

    def _eager(self, b: StepBatch) -> torch.Tensor:
        nd = len(b.decodes)
        groups = [(self._dev(s), self._dev(d), self._dev(p)) for s, d, p in b.per_group]
        qs_p = sl_p = None
        if b.prefills:
            qs_p, sl_p = self._dev(b.query_start_p), self._dev(b.seq_lens_p)
        mask = None if b.tree_mask is None else self._dev(b.tree_mask.view(np.int64))  # torch has no uint64 ops
        attn = self._attention(self.cache, nd, groups, self._dev(b.seq_lens_d) if nd else None, qs_p, sl_p,
                               b.prefix_groups, mask)
        hidden = self.model.forward(self._dev(b.tokens), self._dev(b.positions), attn)
        return self.model.logits(hidden[self._dev(b.rows)])

    # -- CUDA graphs --------------------------------------------------------------------------------------
    def _capture(self) -> None:
        n, cols, dev = self.max_num_seqs, self.graph_cols, self.device
        # The static inputs live in two flat device tensors (int64: tokens, positions, slots; int32: seq_lens,
        # block tables), filled from two page-locked host mirrors with one asynchronous copy each per step.
        pin = self.is_cuda
        self.h64 = torch.zeros(3 * n, dtype=torch.int64, pin_memory=pin)
        self.h32 = torch.zeros(n * (1 + cols), dtype=torch.int32, pin_memory=pin)
        self.d64, self.d32 = self.h64.to(dev), self.h32.to(dev)
        self.s_tokens, self.s_positions, self.s_slots = self.d64[:n], self.d64[n:2 * n], self.d64[2 * n:]
        self.s_seq_lens, self.s_block_tables = self.d32[:n], self.d32[n:].view(n, cols)
        self.s_slots.fill_(-1)
        h64, h32 = self.h64.numpy(), self.h32.numpy()
        self.h_tokens, self.h_positions, self.h_slots = h64[:n], h64[n:2 * n], h64[2 * n:]
        self.h_seq_lens, self.h_block_tables = h32[:n], h32[n:].reshape(n, cols)
        # A cache object of its own over the same tensors: its workspace, sized here for the largest bucket
        # before any capture, is never regrown (freed) while graphs hold its address.
        self.graph_cache = self.cache.alias()
        self.graph_cache.workspace(max(self._decode_workspace(bs) for bs in graph_buckets(n)))
        if self.emulate:
            for bs in graph_buckets(n):
                self.graphs[bs] = (_EagerReplay(self._graph_forward, bs), torch.empty(0))
            return
        pool = None
        for bs in reversed(graph_buckets(n)):  # largest first: smaller graphs reuse its memory pool
            self._graph_forward(bs)  # warm-up outside capture (lazy initialisation in torch and cuBLAS)
            torch.cuda.synchronize(dev)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool):
                out = self._graph_forward(bs)
            pool = g.pool()
            self.graphs[bs] = (g, out)
        torch.cuda.synchronize(dev)

    def _decode_workspace(self, bs: int) -> int:
        ffi, lib = _lib.ffi, _lib.lib
        a = ffi.new("kvb_attention_args*")
        lib.kvb_attention_args_init(a)
        a.num_seqs, a.num_q_heads, a.max_blocks_per_seq = bs, self.model.cfg.num_q_heads, self.graph_cols
        if self.cache.fp8:  # the queries' dtype, as paged_attention will pass it (the plan may depend on it)
            a.q_dtype = getattr(lib, _Q_DTYPE[self.model.dtype])
        size = ffi.new("size_t*")
        check(lib.kvb_paged_attention_workspace_size(self.graph_cache.desc(0), a, size))
        return int(size[0])

    def _graph_forward(self, bs: int) -> torch.Tensor:
        groups = [(self.s_slots[:bs], self.s_block_tables[:bs], None)]
        attn = self._attention(self.graph_cache, bs, groups, self.s_seq_lens[:bs], None, None)
        return self.model.logits(self.model.forward(self.s_tokens[:bs], self.s_positions[:bs], attn))

    def _columns(self, b: StepBatch) -> int:
        """Block-table columns the step's decode rows use (the export's table may be wider)."""
        return -(-int(b.seq_lens_d.max()) // self.cache.block_size) if len(b.seq_lens_d) else 0

    def _replay(self, b: StepBatch) -> torch.Tensor:
        nd = len(b.decodes)
        bs = next(x for x in sorted(self.graphs) if x >= nd)
        slots, bt, _ = b.per_group[0]
        # Padding rows up to the bucket have no token to write (slot -1) and nothing to attend (seq_len 0).
        self.h_tokens[:nd], self.h_tokens[nd:bs] = b.tokens, 0
        self.h_positions[:nd], self.h_positions[nd:bs] = b.positions, 0
        self.h_slots[:nd], self.h_slots[nd:bs] = slots, -1
        self.h_seq_lens[:nd], self.h_seq_lens[nd:bs] = b.seq_lens_d, 0
        # Only the columns some row's seq_len reaches; later ones keep stale ids, never read.
        cols = self._columns(b)
        self.h_block_tables[:nd, :cols] = bt[:, :cols]
        # The host mirrors are rewritten only after the previous step's tokens came back (a synchronisation),
        # so the asynchronous copies below never race with the writes above.
        self.d64.copy_(self.h64, non_blocking=True)
        self.d32.copy_(self.h32, non_blocking=True)
        g, out = self.graphs[bs]
        with self.kernel_clock:  # the replay runs the kernels and the matmuls together
            g.replay()
        if self.emulate:
            out = g.out
        self.graph_replays += 1
        return out[:nd]


class _EagerReplay:
    """Stands in for a captured graph (cuda_graph="emulate"): replay() runs the decode forward on the static
    buffers, so that tests without a GPU cover the replay path's inputs (padding, columns, buckets)."""

    def __init__(self, forward: Callable[[int], torch.Tensor], bs: int) -> None:
        self.forward, self.bs = forward, bs
        self.out = torch.empty(0)

    def replay(self) -> None:
        self.out = self.forward(self.bs)
