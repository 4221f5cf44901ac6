"""The engine on torch: the numpy engine's scheduler (continuous batching, chunked prefill, prefix caching,
preemption by recompute or swap, fork for n > 1, window, host cache, window and full layers as two KV cache
groups) with a torch model and the KV cache as torch tensors on `cuda` or `cpu`. libkvblock's kernels and
copy / swap run on those tensors in place; the only host <-> device traffic per step is the step's small
integer inputs in and the sampled tokens out."""
from __future__ import annotations

import contextlib
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np
import torch

from ..kernels import KVCache
from .config import Clock, EngineConfig
from .engine import Engine
from .runner import ModelRunner
from .sequence import Request
from .step import ModelShape
from .torch_model import DTYPES, TorchModel

# The torch engine's K/V cache dtypes (EngineConfig.kv_dtype): torch float8 tensors for the fp8 ones.
_FP8 = {"float8_e4m3": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}
KV_DTYPES: Dict[str, torch.dtype] = {**DTYPES, **_FP8}


class TorchEngine(Engine):
    """cuda_graph: capture decode steps per batch-size bucket (CUDA only). profile: synchronise the device
    around every timed section, so that metrics split the step time into manager, kernels, matmuls,
    elementwise work and Python (the remainder). It serialises the device and turns graphs off: use it for
    the breakdown, not for throughput."""

    model: TorchModel
    runner: ModelRunner

    def __init__(self, model: TorchModel, cfg: EngineConfig = EngineConfig(), *, cuda_graph: Union[bool, str] = True,
                 profile: bool = False, draft_model: Optional[TorchModel] = None) -> None:
        self._cuda_graph, self._profile = cuda_graph, profile  # for _make_runner, called by Engine.__init__
        super().__init__(model, cfg, draft_model)

    def _kv_dtype(self) -> Tuple[str, torch.dtype]:
        """The K/V caches' dtype (EngineConfig.kv_dtype; None: the model's), by name and as torch's."""
        name = self.cfg.kv_dtype or self.model.dtype_name
        if name not in KV_DTYPES:
            raise ValueError(f"EngineConfig.kv_dtype {name!r}: the torch engine's K/V caches are one of "
                             f"{', '.join(KV_DTYPES)}")
        if self.cfg.kv_scales is not None and name not in _FP8:
            raise ValueError(f"EngineConfig.kv_scales: scales are for fp8 K/V caches, kv_dtype is {name!r}")
        return name, KV_DTYPES[name]

    def _make_runner(self) -> ModelRunner:
        model = self.model
        if self._profile:
            sync = (lambda: torch.cuda.synchronize(model.device)) if model.device.type == "cuda" else (lambda: None)
            self._kernel_clock = self.mover.kernel_clock = Clock(self.metrics, "kernel_s", sync)
            model.matmul_clock = Clock(self.metrics, "matmul_s", sync)
            model.elementwise_clock = Clock(self.metrics, "elementwise_s", sync)
        else:
            model.matmul_clock = model.elementwise_clock = contextlib.nullcontext()
        name, dtype = self._kv_dtype()
        return ModelRunner(model, self.cache, self.cfg.max_num_seqs,
                           cuda_graph=False if self._profile else self._cuda_graph, kernel_clock=self._kernel_clock,
                           attn_dtype=None if name in _FP8 else dtype)

    def _make_caches(self, draft: Optional[ModelShape] = None) -> Tuple[KVCache, Optional[KVCache]]:
        """K/V as torch tensors on the model's device (the host blocks' on the CPU, page-locked for CUDA):
        in the model's dtype, another 16/32-bit one, or fp8 (float8_e4m3fn / float8_e5m2 tensors, stored =
        x / scale with EngineConfig.kv_scales per layer, 1.0 without them; q and the new K/V stay in the
        model's dtype, the kernels quantize and dequantize). On CUDA the library answers for what its CUDA
        kernels take on fp8 caches. With `draft`: a draft model's layers over the same blocks (unit scales)."""
        mc, cfg, m = draft or self.model.cfg, self.cfg, self.model
        name, dtype = self._kv_dtype()
        scales: Dict[str, Any] = {}
        if cfg.kv_scales is not None and draft is None:
            scales = dict(k_scale=np.asarray(cfg.kv_scales[0]), v_scale=np.asarray(cfg.kv_scales[1]))
        shape = (cfg.num_blocks, cfg.block_size, mc.num_kv_heads, mc.head_dim)

        def layers() -> List[torch.Tensor]:
            return [torch.zeros(shape, dtype=dtype, device=m.device) for _ in range(mc.num_layers)]

        cache = KVCache.wrap(layers(), layers(), **scales)
        host = None
        if cfg.num_host_blocks:
            host_shape = (cfg.num_host_blocks,) + shape[1:]
            pin = m.device.type == "cuda"  # page-locked host blocks: swaps run as async copies

            def host_layers() -> List[torch.Tensor]:
                return [torch.zeros(host_shape, dtype=dtype, pin_memory=pin) for _ in range(mc.num_layers)]

            host = KVCache.wrap(host_layers(), host_layers(), **scales)
        return cache, host

    def add_request(self, req: Request) -> None:
        longest = len(req.prompt) + req.max_tokens
        if longest > self.model.max_len:
            raise ValueError(f"request {req.req_id}: prompt {len(req.prompt)} + max_tokens {req.max_tokens} = "
                             f"{longest} tokens, the model takes at most {self.model.max_len}")
        bad = [t for t in req.prompt if not 0 <= t < self.model.cfg.vocab]
        if bad:
            raise ValueError(f"request {req.req_id}: token id {bad[0]} is outside the vocabulary [0, "
                             f"{self.model.cfg.vocab})")
        super().add_request(req)

    def _host_logits(self, logits: Any) -> np.ndarray:
        return logits.float().cpu().numpy()
