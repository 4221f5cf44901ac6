"""A Mooncake Store back end for kvblock.store.CallbackStore: each block one object (header, checksum and
bytes: kvblock.store.RECORD_HEADER) under its namespaced key, in a Mooncake Store cluster (its master, and
the memory segments of its clients: `mooncake_client` processes, or engines that lend memory).

    mooncake://MASTER_HOST:PORT?metadata=http://HOST:8080/metadata&local_hostname=HOST
                               &segment=BYTES&buffer=BYTES&protocol=tcp

metadata: the transfer engine's metadata server (the master's own with --enable_http_metadata_server; or
etcd://..., P2PHANDSHAKE); local_hostname: this machine's address as the others reach it (default
127.0.0.1); segment: memory this engine lends to the store (default 0: the objects live in the cluster's
other segments, so they outlive this engine; an engine that lends memory takes its objects with it when
it exits); buffer: its transfer buffer (default 64 MiB, at least one block's value); protocol: tcp (rdma
where the machines have it). Needs the `mooncake` module: pip install mooncake-transfer-engine-non-cuda
(or mooncake-transfer-engine on a machine with CUDA). One round trip per call: a lookup is one
batch_is_exist, the gets of a poll one get_batch, a put one put."""
from __future__ import annotations

from typing import Any, List, Optional, Sequence
from urllib.parse import parse_qs, urlparse

from .errors import KvbArgumentError

_KEYS = ("metadata", "local_hostname", "segment", "buffer", "protocol")


class MooncakeBackend:
    def __init__(self, url: str) -> None:
        u = urlparse(url)
        if u.scheme != "mooncake" or not u.hostname or not u.port:
            raise KvbArgumentError(f"store {url!r}: use mooncake://MASTER_HOST:PORT?metadata=...")
        q = {k: v[-1] for k, v in parse_qs(u.query).items()}
        unknown = sorted(set(q) - set(_KEYS))
        if unknown:
            raise KvbArgumentError(f"store {url!r}: unknown parameter {unknown[0]!r} (known: {', '.join(_KEYS)})")
        try:
            segment, buffer = int(q.get("segment", 0)), int(q.get("buffer", 64 << 20))
        except ValueError:
            raise KvbArgumentError(f"store {url!r}: segment and buffer are byte counts") from None
        try:
            from mooncake.store import MooncakeDistributedStore
        except ImportError as e:
            raise KvbArgumentError(f"store {url!r}: the Mooncake back end needs the mooncake module (pip install "
                                   f"mooncake-transfer-engine-non-cuda): {e}") from None
        self.url = url
        self.store: Any = MooncakeDistributedStore()
        metadata = q.get("metadata", f"http://{u.hostname}:8080/metadata")
        rc = self.store.setup(q.get("local_hostname", "127.0.0.1"), metadata, segment, buffer,
                              q.get("protocol", "tcp"), "", f"{u.hostname}:{u.port}")
        if rc != 0:
            raise KvbArgumentError(f"store {url!r}: Mooncake setup failed ({rc}): is its master running at "
                                   f"{u.hostname}:{u.port}, its metadata server at {metadata}?")

    def exists_prefix(self, names: Sequence[str]) -> int:
        if not names:
            return 0
        found = 0
        for hit in self.store.batch_is_exist(list(names)):
            if hit != 1:  # 0: missing, -1: an error
                break
            found += 1
        return found

    def put(self, name: str, value: bytes) -> None:
        rc = self.store.put(name, value)
        if rc != 0:
            raise RuntimeError(f"Mooncake put {name}: error {rc}")

    def get_many(self, names: Sequence[str]) -> List[Optional[bytes]]:
        if not names:
            return []
        # A missing object comes back empty; a stored value never is (it has a header).
        return [v if v else None for v in self.store.get_batch(list(names))]

    def close(self) -> None:
        self.store.close()

    def __repr__(self) -> str:
        return f"MooncakeBackend({self.url!r})"
