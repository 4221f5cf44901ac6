"""kvblock: Python bindings of libkvblock, the KV-cache block manager and kernels of an LLM inference engine.

    import kvblock
    m = kvblock.Manager(num_blocks=1024, block_size=16)
    cached = m.allocate(1, prompt_tokens)

See Manager (the block manager), KVCache and the kernel functions (write_kv, paged_attention,
prefill_attention, copy_blocks, copy_slots, swap_blocks; take_fault for CUDA input faults), and
the store tier (kvblock.store: blocks that outlive the process, in a directory or Redis), and
`python -m kvblock.engine` (a mini serving engine).
"""
from __future__ import annotations

from . import _lib
from ._lib import ffi, load
from ._version import __version__
from .errors import FaultKind, KernelFault, KernelId, KvbArgumentError, KvbClosedError, KvbError, Status
from .kernels import (
    KVCache,
    copy_blocks,
    copy_slots,
    cuda_device_count,
    has_prefill_kernel,
    paged_attention,
    prefill_attention,
    swap_blocks,
    take_fault,
    write_kv,
)
from .manager import Availability, Batch, BatchBuffers, Event, Manager, Medium, SeqInfo, hash_tokens
from .prefix_groups import GroupedBatch, PrefixGroups
from .seq_ids import SeqIds
from .store import CallbackStore, DirStore, MemoryBackend, open_store


def library_version() -> str:
    """Version of the loaded libkvblock ("MAJOR.MINOR.PATCH")."""
    return ffi.string(_lib.lib.kvb_version_string()).decode()


def cpu_isa() -> str:
    """The CPU kernels' vector path ("avx512bf16", "avx512", "avx2" or "baseline", "+amx" while AMX tiles are
    used), as KVB_CPU_ISA and the CPU allow."""
    return ffi.string(_lib.lib.kvb_cpu_isa()).decode()


def library_path() -> str:
    return _lib.LIBRARY_PATH


__all__ = ["Manager", "KvbError", "KvbArgumentError", "KvbClosedError", "KernelFault", "Status", "FaultKind",
           "KernelId", "Availability", "SeqInfo", "Event", "Medium", "Batch", "BatchBuffers", "SeqIds", "hash_tokens",
           "KVCache", "write_kv", "paged_attention", "prefill_attention", "copy_blocks", "copy_slots", "swap_blocks",
           "take_fault", "cuda_device_count", "has_prefill_kernel", "library_version", "cpu_isa", "library_path",
           "load",
           "__version__", "PrefixGroups", "GroupedBatch", "DirStore", "CallbackStore", "MemoryBackend", "open_store"]
