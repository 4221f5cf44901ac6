"""A tiny engine for the store tier tests: a manager with a host cache and a store, real device and host
K/V caches, and block bytes that are a function of the block's whole prefix (what its K/V would be), so
that every block a step would attend is checked for a wrong byte (tests/c/store_tier.c does the same in C).
Also a redis-server on a loopback port, started and killed by the tests."""
from __future__ import annotations

import shutil
import socket
import subprocess
import time
import zlib
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

import kvblock
from kvblock.store import CallbackStore

BS, LAYERS, HEADS, DIM = 4, 2, 2, 8


def block_value(tokens: Sequence[int], b: int, layer: int, kv: int, dtype: Any = np.float32) -> np.ndarray:
    """The K (kv=0) or V (kv=1) of block b in layer `layer`: a function of tokens[0 .. (b + 1) * BS). dtype
    uint8: an fp8 cache's bytes."""
    seed = zlib.crc32(np.asarray(tokens[:(b + 1) * BS], np.int64).tobytes()) ^ (layer * 2 + kv) << 20
    rng = np.random.default_rng(seed)
    if np.dtype(dtype) == np.uint8:
        return rng.integers(0, 256, (BS, HEADS, DIM), dtype=np.uint8)
    return rng.standard_normal((BS, HEADS, DIM)).astype(np.float32)


class Rig:
    """One engine's manager, device cache and host cache; store_factory(host_cache) makes its store.
    cache_args: KVCache's dtype and scales (an fp8 cache's blocks are random bytes)."""

    def __init__(self, store_factory: Any, num_blocks: int = 8, num_host_blocks: int = 4, events: bool = False,
                 **cache_args: Any) -> None:
        self.mgr = kvblock.Manager(num_blocks, BS, num_host_blocks=num_host_blocks, host_cache=True, events=events)
        self.dev = kvblock.KVCache(LAYERS, num_blocks, BS, HEADS, DIM, **cache_args)
        self.host = kvblock.KVCache(LAYERS, num_host_blocks, BS, HEADS, DIM, **cache_args)
        self.item = self.dev.k[0].dtype
        self.store = store_factory(self.host)
        self.mgr.set_store(self.store)
        self.next_id = 1

    def transfers(self) -> None:
        off, load = self.mgr.drain_host_transfers()
        kvblock.swap_blocks(self.dev, self.host, off)
        kvblock.swap_blocks(self.host, self.dev, load)

    def check_attended(self, tokens: Sequence[int], table: np.ndarray, computed: int) -> None:
        """Every block the step would attend as computed holds its prefix's K/V."""
        for b in range(computed // BS):
            for layer in range(LAYERS):
                for kv, cache in enumerate((self.dev.k, self.dev.v)):
                    got = cache[layer][table[b]]
                    assert np.array_equal(got, block_value(tokens, b, layer, kv, self.item)), \
                        f"block {b} (device {table[b]}) layer {layer} {'KV'[kv]} holds wrong bytes"

    def start(self, tokens: Sequence[int]) -> Tuple[int, int]:
        """Allocates a sequence for tokens: (its id, the cached count allocate reported)."""
        sid, self.next_id = self.next_id, self.next_id + 1
        return sid, self.mgr.allocate(sid, list(tokens))

    def finish(self, sid: int, tokens: Sequence[int]) -> int:
        """Polls, checks what is attended, computes the rest, commits and frees; the computed count the
        step started from."""
        m = self.mgr
        m.store_poll()
        computed, filling = m.store_state(sid)
        assert filling == 0
        self.transfers()
        table = m.block_table(sid)
        self.check_attended(tokens, table, computed)
        for b in range(computed // BS, len(table)):  # "compute": the K/V of the blocks not cached
            for layer in range(LAYERS):
                self.dev.k[layer][table[b]] = block_value(tokens, b, layer, 0, self.item)
                self.dev.v[layer][table[b]] = block_value(tokens, b, layer, 1, self.item)
        m.batch_commit([sid])
        m.free(sid)
        self.transfers()
        m.store_poll()  # write-through puts of the offloads just run
        m.check_invariants()
        return computed

    def run(self, tokens: Sequence[int]) -> Tuple[int, int]:
        """(cached at allocation, computed after the store's gets)."""
        sid, cached = self.start(tokens)
        return cached, self.finish(sid, tokens)

    def close(self) -> None:
        self.mgr.check_invariants()
        self.mgr.close()
        self.store.close()


def prompt(seed: int, blocks: int) -> List[int]:
    """blocks full blocks and one more token (the last block is never a store hit: it is computed)."""
    return [seed * 1000 + i for i in range(blocks * BS + 1)]


class Recording:
    """A back end proxy that remembers the names of the last lookup (the blocks' keys, in order)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.looked_up = inner, []

    def exists_prefix(self, names: Sequence[str]) -> int:
        self.looked_up = list(names)
        return int(self.inner.exists_prefix(names))

    def put(self, name: str, value: bytes) -> None:
        self.inner.put(name, value)

    def get_many(self, names: Sequence[str]) -> List[Optional[bytes]]:
        return list(self.inner.get_many(names))

    def close(self) -> None:
        self.inner.close()


def callback_store(backend: Any) -> Any:
    return lambda host: CallbackStore(backend, host, write_through=True)


# -- a redis-server on loopback -------------------------------------------------------------------------
def redis_unavailable() -> Optional[str]:
    """Why the Redis tests cannot run here, or None."""
    if shutil.which("redis-server") is None:
        return "no redis-server on PATH (apt-get install redis-server; .ci/run installs it)"
    try:
        import redis  # noqa: F401
    except ImportError:
        return "no redis client (pip install redis; .ci/run installs it)"
    return None


class RedisServer:
    def __init__(self) -> None:
        with socket.socket() as s:  # a free port (another process may take it first: start retries)
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        import redis
        self.client = redis.Redis(port=self.port)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.client.ping()
                break
            except redis.ConnectionError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                    raise RuntimeError(f"redis-server on port {self.port} did not start: {err}") from None
                time.sleep(0.05)
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.client.close()


# -- a Mooncake Store cluster on loopback: its master (with its HTTP metadata server) and one client process
# that lends the memory the objects live in ------------------------------------------------------------
def mooncake_unavailable() -> Optional[str]:
    """Why the Mooncake store tests cannot run here, or None."""
    try:
        import mooncake
        from mooncake.store import MooncakeDistributedStore  # noqa: F401
    except ImportError as e:
        return (f"no usable mooncake module ({e}); pip install mooncake-transfer-engine-non-cuda (needs "
                "libibverbs1), .ci/run installs both")
    from pathlib import Path
    here = Path(mooncake.__file__).parent
    missing = [b for b in ("mooncake_master", "mooncake_client") if not (here / b).exists()]
    return f"the mooncake wheel lacks {', '.join(missing)}" if missing else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MooncakeCluster:
    def __init__(self, segment_mb: int = 64) -> None:
        from pathlib import Path

        import mooncake
        here = Path(mooncake.__file__).parent
        rpc, http, metrics, client = free_port(), free_port(), free_port(), free_port()
        self.metadata = f"http://127.0.0.1:{http}/metadata"
        self.procs = [subprocess.Popen([str(here / "mooncake_master"), f"--rpc_port={rpc}",
                                        "--enable_http_metadata_server=true", "--http_metadata_server_host=127.0.0.1",
                                        f"--http_metadata_server_port={http}", f"--metrics_port={metrics}"],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
        self._wait_port(http)
        self._wait_port(rpc)
        self.procs.append(subprocess.Popen([str(here / "mooncake_client"), "--host=127.0.0.1",
                                            f"--global_segment_size={segment_mb} MB", "--local_buffer_size=16 MB",
                                            f"--master_server_address=127.0.0.1:{rpc}",
                                            f"--metadata_server={self.metadata}", f"--port={client}",
                                            "--protocol=tcp"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        self._wait_port(client)
        self.url = f"mooncake://127.0.0.1:{rpc}?metadata={self.metadata}&buffer={16 << 20}"

    def _wait_port(self, port: int) -> None:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return
            except OSError:
                if any(p.poll() is not None for p in self.procs) or time.monotonic() > deadline:
                    self.kill()
                    raise RuntimeError(f"the Mooncake cluster did not open port {port}") from None
                time.sleep(0.1)

    def kill(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.kill()
                p.wait()
