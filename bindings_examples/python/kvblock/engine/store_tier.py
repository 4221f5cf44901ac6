"""The engine's store tier (EngineConfig.store: "dir:PATH", "redis://host:port/db", "memory:"): blocks that
outlive the engine and that other engines find, a level below the host cache (kvblock.store).

Bytes move the way the host cache moves them: a store get fills a host block, and its load (host ->
device) is a host transfer that BlockMover runs before the forward pass; a put reads a host block that an
offload (device -> host) filled. The engine opens its store write-through, so every block that reaches the
host tier is put at the next poll, and flush() pushes what is still cached only on the device (a prefill
engine handing its prompts to decode engines, an engine about to exit).

Keys are namespaced by the K/V layout (fp8 scales included) and a model id: by default a hash of the model's
config (the numpy model's weights are a function of it);
an engine on a checkpoint should pass EngineConfig.store_model_id."""
from __future__ import annotations

import hashlib
import secrets
from typing import Any, Callable, ContextManager, Dict, Optional

from ..manager import Manager
from ..store import open_store
from .config import EngineConfig


def default_model_id(model_cfg: Any) -> int:
    """A u64 of the model's config (its repr: a dataclass's fields)."""
    return int.from_bytes(hashlib.blake2b(repr(model_cfg).encode(), digest_size=8).digest(), "little")


class StoreTier:
    """The engine's store: opened on the host cache and registered with the manager; poll() each step."""

    def __init__(self, cfg: EngineConfig, mgr: Manager, host: Any, model_cfg: Any,
                 host_transfers: Callable[[], None], mgr_clock: ContextManager[Any],
                 device_sync: Optional[Callable[[], None]] = None) -> None:
        if not cfg.host_cache or host is None:
            raise ValueError(f"store {cfg.store!r} needs the host cache (host_cache=True, num_host_blocks > 0): "
                             "host blocks stage the store's bytes")
        # fp8 scales need no folding here: the namespace takes them from the host cache (kvblock.store).
        model_id = cfg.store_model_id if cfg.store_model_id is not None else default_model_id(model_cfg)
        self.store = open_store(cfg.store or "", host, model_id=model_id, write_through=True)
        self.mgr, self.cfg, self.host_transfers, self.mgr_clock = mgr, cfg, host_transfers, mgr_clock
        # An asynchronous device (CUDA) must finish its copies before the store reads or refills host blocks.
        self.device_sync = device_sync or (lambda: None)
        self._next_placeholder = 1 << 62  # seq ids the engine never gives (it counts up from 1)
        mgr.set_store(self.store)
        self.flushed_blocks = 0

    def poll(self) -> None:
        """Completed gets (failures shorten sequences) and the write-through puts of the offloads run."""
        self.device_sync()
        with self.mgr_clock:
            self.mgr.store_poll()

    def flush(self) -> int:
        """Puts every block cached only on the device to the store, between steps (no sequence running). It
        evicts them the way new allocations would: placeholder sequences under a fresh cache salt take the
        free device blocks, at most as many at a time as the host tier holds, so that each evicted block is
        offloaded, its offload run and the block put (write-through) before its host block is reused.
        The device cache is empty afterwards (its blocks are on the host and in the store). Returns the
        blocks put."""
        mgr, bs = self.mgr, self.cfg.block_size
        salt = secrets.randbits(64)
        before = mgr.stats()["store_put_blocks"]
        held = []
        try:
            while True:
                self.host_transfers()
                self.poll()
                take = min(mgr.num_free_blocks, self.cfg.num_host_blocks)
                if take == 0:
                    break
                sid = self._next_placeholder
                self._next_placeholder += 1
                with self.mgr_clock:
                    mgr.allocate(sid, [0] * (take * bs), cache_salt=salt)
                held.append(sid)
        finally:
            with self.mgr_clock:
                for sid in held:
                    mgr.free(sid)
        put = mgr.stats()["store_put_blocks"] - before
        self.flushed_blocks += put
        return put

    def summary(self, flushed: int) -> str:
        """The CLIs' line on the store (after a run and flush(), which put `flushed` blocks)."""
        st = self.mgr.stats()
        return (f"store:             {self.cfg.store}: {st['store_hit_tokens']} hit tokens ({st['store_get_blocks']} "
                f"blocks got, {st['store_get_failures']} failed, {st['store_recomputed_tokens']} tokens recomputed); "
                f"{st['store_put_blocks']} blocks put ({flushed} at exit), {st['store_put_failures']} refused")

    def stats(self) -> Dict[str, int]:
        st = self.mgr.stats()
        return {k: st[k] for k in st if k.startswith("store_")}

    def close(self) -> None:
        """Unregisters and closes the store (its blocks stay in it). Gets still in flight (an engine stopped
        mid-run on a store that has not answered) are abandoned: the manager never calls the store again."""
        self.host_transfers()
        self.poll()
        self.host_transfers()  # the loads of the gets that poll completed release their host blocks
        with self.mgr_clock:
            self.mgr.set_store(None)
        self.store.close()
