"""The KV copies that the manager's decisions hand out, run on the engine's caches in the order the header
requires (kvblock.h, "Host cache"): the host cache's pending transfers (all offloads, then all loads)
before any copy of the engine's own (swap-out, swap-in, copy-on-write) and before the forward step, so that
every offload reads its device block before anything overwrites it and every loaded block holds its KV
before a kernel reads it or a later copy overwrites its source."""
from __future__ import annotations

from typing import Any, Callable, ContextManager, List, Optional, Tuple

import numpy as np

from ..kernels import KVCache, copy_blocks, swap_blocks
from ..manager import Manager
from .config import Metrics


class BlockMover:
    """cache: the device pool's KV cache; host: the host blocks' one (None without host blocks). A separate
    draft model's caches (speculative.py) hold other layers of the same blocks: add_caches makes every copy
    run on them too."""

    def __init__(self, mgr: Manager, cache: KVCache, host: Optional[KVCache], metrics: Metrics,
                 mgr_clock: ContextManager[Any], kernel_clock: ContextManager[Any]) -> None:
        self.mgr, self.cache, self.host, self.metrics = mgr, cache, host, metrics
        self.mgr_clock, self.kernel_clock = mgr_clock, kernel_clock
        # Set with a store tier on an asynchronous device: the store reads host blocks (puts, inside any
        # manager call that evicts a host block) and writes them (gets), so the copies of a drain must be
        # done before the next manager call, not only queued.
        self.sync_after_transfers: Optional[Callable[[], None]] = None
        self.caches: List[Tuple[KVCache, Optional[KVCache]]] = [(cache, host)]  # (device, host) of each model

    def add_caches(self, cache: KVCache, host: Optional[KVCache]) -> None:
        """Another model's caches over the same block ids (the draft's): each copy runs on them as well."""
        self.caches.append((cache, host))

    def _swap(self, pairs: np.ndarray, to_host: bool) -> None:
        for dev, host in self.caches:
            h = self._host_cache(host)
            if to_host:
                swap_blocks(dev, h, pairs)
            else:
                swap_blocks(h, dev, pairs)

    @staticmethod
    def _host_cache(host: Optional[KVCache]) -> KVCache:
        if host is None:  # the manager hands out host copies only when it has host blocks
            raise RuntimeError("engine: the manager asked for a host copy, but the engine has no host blocks")
        return host

    def host_transfers(self) -> None:
        """Runs the host cache's pending transfers (none without the host cache)."""
        if not self.mgr.host_cache:
            return
        with self.mgr_clock:
            offloads, loads = self.mgr.drain_host_transfers()
        if len(offloads) or len(loads):
            with self.kernel_clock:
                self._swap(offloads, to_host=True)
                self._swap(loads, to_host=False)
                if self.sync_after_transfers is not None:
                    self.sync_after_transfers()
            self.metrics.offloaded_blocks += len(offloads)
            self.metrics.loaded_blocks += len(loads)

    def swap_out(self, pairs: np.ndarray) -> None:
        """(device src, host dst) pairs of Manager.swap_out."""
        self.host_transfers()
        with self.kernel_clock:
            self._swap(pairs, to_host=True)

    def swap_in(self, pairs: np.ndarray) -> None:
        """(host src, device dst) pairs of Manager.swap_in."""
        self.host_transfers()
        with self.kernel_clock:
            self._swap(pairs, to_host=False)
            if self.sync_after_transfers is not None:  # its host blocks may stage a store get next
                self.sync_after_transfers()

    def copy_on_write(self, pairs: np.ndarray) -> None:
        """(src, dst) pairs of Manager.drain_copies."""
        self.host_transfers()
        with self.kernel_clock:
            for dev, _ in self.caches:
                copy_blocks(dev, pairs)
        self.metrics.cow_copies += len(pairs)
