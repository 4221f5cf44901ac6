"""A Redis back end for kvblock.store.CallbackStore: each block is one string value (header, checksum and
bytes: kvblock.store.RECORD_HEADER) under its namespaced key, so any server that speaks the protocol Redis,
Valkey and their clusters share can hold a store (needs the `redis` client: pip install redis).

One round trip per manager call: a lookup pipelines one EXISTS per key (the longest stored prefix is the
run of leading hits), the gets of a store_poll are one MGET, a put is one SET (with an optional TTL, so that
a server without an eviction policy does not fill up). The server must answer when the back end is made
(a PING): a URL nobody listens on is refused there, naming it. Later, no retries: a server that is gone
fails the call at once (socket timeouts bound a hung one) and the manager recomputes; the next call
reconnects."""
from __future__ import annotations

from typing import Any, List, Optional, Sequence

from .errors import KvbArgumentError


class RedisBackend:
    def __init__(self, url: str, *, ttl_s: Optional[int] = None, timeout_s: float = 2.0) -> None:
        """url: redis://[user:password@]host:port/db (rediss:// for TLS, unix:///path.sock)."""
        try:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry
        except ImportError as e:
            raise KvbArgumentError(f"store {url!r}: the Redis back end needs the redis client "
                                   f"(pip install redis): {e}") from None
        if ttl_s is not None and ttl_s <= 0:
            raise KvbArgumentError(f"ttl_s must be positive or None, got {ttl_s}")
        self.url, self.ttl_s = url, ttl_s
        try:
            self.client: Any = redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
                                                    retry=Retry(NoBackoff(), 0), retry_on_error=[])
        except ValueError as e:  # a malformed URL (port, db, scheme)
            raise KvbArgumentError(f"store {url!r}: not a Redis URL ({e}); use redis://host:port/db") from None
        # A server that is not there now is a configuration error, not a store that fails every call later.
        try:
            self.client.ping()
        except Exception as e:
            self.client.close()
            raise KvbArgumentError(f"store {url!r}: no Redis server answers there ({type(e).__name__}: {e})") from None

    def exists_prefix(self, names: Sequence[str]) -> int:
        if not names:
            return 0
        pipe = self.client.pipeline(transaction=False)
        for n in names:
            pipe.exists(n)
        found = 0
        for hit in pipe.execute():
            if not hit:
                break
            found += 1
        return found

    def put(self, name: str, value: bytes) -> None:
        self.client.set(name, value, ex=self.ttl_s)

    def get_many(self, names: Sequence[str]) -> List[Optional[bytes]]:
        return list(self.client.mget(list(names))) if names else []

    def close(self) -> None:
        self.client.close()

    def __repr__(self) -> str:
        return f"RedisBackend({self.url!r})"
