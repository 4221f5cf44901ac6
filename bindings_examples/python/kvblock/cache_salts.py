"""Request cache salts (strings, as vLLM's OpenAI API takes them) <-> the 64-bit salts libkvblock hashes.

A router that scores salted prompts (llm-d's precise prefix scorer, for one) folds the request's
`cache_salt` string into the first block's key; the events must carry that same string, exactly where
vLLM puts it (see kvblock.events). The manager only knows a u64 (kvb_seq_options.cache_salt), so an engine
turns each request's string into a u64 here and hands this table to the publisher, which writes the string
back out:

    salts = CacheSalts()
    mgr.allocate(seq_id, prompt, cache_salt=salts.salt(request_cache_salt))
    pub = KvEventPublisher(mgr, ..., salt_names=salts)

A salt that the table never saw goes out as its decimal digits (kvblock.events.salt_wire_name), so an
engine that uses numeric salts directly (cache_salt=int(request_cache_salt)) needs no table at all.
"""
import hashlib
import threading
from collections.abc import Iterator, Mapping
from typing import Dict


class CacheSalts(Mapping[int, str]):
    """u64 salt -> the request's cache_salt string (a read-only Mapping); salt(name) adds an entry.

    The u64 is a fixed function of the string (the first 8 bytes of its BLAKE2b digest, little-endian), so
    every engine process maps a tenant's salt to the same u64 without sharing this table. Thread-safe:
    the engine's scheduler adds names while the publisher's flush reads them."""

    def __init__(self) -> None:
        self._names: Dict[int, str] = {}
        self._lock = threading.Lock()

    @staticmethod
    def salt_of(name: str) -> int:
        """The u64 that `name` maps to (without remembering it)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"cache salt must be a non-empty str (as vLLM's cache_salt), got {name!r}")
        return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little")

    def salt(self, name: str) -> int:
        """The u64 for Manager.allocate(cache_salt=...) of a request whose cache_salt is `name`; remembered
        so that its events carry `name`. Raises ValueError when another name already has that u64 (two
        tenants would share blocks: 64-bit collisions are rare, and never silent)."""
        s = self.salt_of(name)
        with self._lock:
            have = self._names.setdefault(s, name)
        if have != name:
            raise ValueError(f"cache salts {have!r} and {name!r} map to the same 64-bit salt {s:#018x}")
        return s

    def __getitem__(self, salt: int) -> str:
        with self._lock:
            return self._names[salt]

    def __iter__(self) -> Iterator[int]:
        with self._lock:
            return iter(list(self._names))

    def __len__(self) -> int:
        with self._lock:
            return len(self._names)
