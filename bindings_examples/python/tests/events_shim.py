"""Test helpers for kvblock.events: the library (ffi, lib), a manager with events enabled, and the
kvblock.events / kvblock.indexer_client modules, loaded the same way before and after the package
layout (kvblock/_lib.py) exists."""
import importlib
import importlib.util
import sys
from pathlib import Path

_PKG = Path(__file__).resolve().parent.parent / "kvblock"
if str(_PKG.parent) not in sys.path:
    sys.path.insert(0, str(_PKG.parent))


def _load(name):
    try:
        return importlib.import_module("kvblock." + name)
    except ImportError:  # kvblock is still the single-file module: load the file directly
        spec = importlib.util.spec_from_file_location("kvblock_" + name, _PKG / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        return mod


def ffi_lib():
    try:
        from kvblock._lib import ffi, lib
    except ImportError:
        from kvblock import ffi, lib
    return ffi, lib


events = _load("events")
indexer_client = _load("indexer_client")
ffi, lib = ffi_lib()


def check(status):
    if status != lib.KVB_OK:
        raise RuntimeError("%s: %s" % (ffi.string(lib.kvb_status_string(status)).decode(),
                                       ffi.string(lib.kvb_last_error()).decode()))


class EvManager:
    """A bare kvb_manager with KVB_CONFIG_EVENTS (only what these tests need)."""

    def __init__(self, num_blocks, block_size=4, event_capacity=65536):
        cfg = ffi.new("kvb_config*")
        lib.kvb_config_init(cfg)
        cfg.num_blocks, cfg.block_size = num_blocks, block_size
        cfg.flags = lib.KVB_CONFIG_EVENTS
        cfg.event_capacity = event_capacity
        out = ffi.new("kvb_manager**")
        check(lib.kvb_manager_create(cfg, out))
        self._handle = out[0]
        self.block_size = block_size
        self._next_seq = 1

    def run(self, tokens, keep=False):
        """allocate + commit the whole prompt (+ free unless keep); returns (seq id, cached tokens)."""
        sid = self._next_seq
        self._next_seq += 1
        buf = ffi.new("int64_t[]", list(tokens))
        cached = ffi.new("size_t*")
        check(lib.kvb_seq_allocate(self._handle, sid, buf, len(tokens), cached))
        check(lib.kvb_seq_commit(self._handle, sid, len(tokens) - cached[0]))
        if not keep:
            check(lib.kvb_seq_free(self._handle, sid))
        return sid, cached[0]

    def free(self, sid):
        check(lib.kvb_seq_free(self._handle, sid))

    def cached(self, tokens):
        """Prefix-cached tokens an allocate of tokens would reuse now (the oracle for router scores)."""
        buf = ffi.new("int64_t[]", list(tokens))
        n = ffi.new("size_t*")
        check(lib.kvb_seq_can_allocate(self._handle, buf, len(tokens), n))
        return n[0]

    def cached_blocks_tokens(self, tokens):
        """Tokens in the full blocks of `tokens` that the cache holds as a prefix: what a router scores.
        (allocate never reuses a prompt's last block, so one more token makes every full block count.)"""
        return self.cached(list(tokens) + [0])

    def reset(self):
        check(lib.kvb_reset_prefix_cache(self._handle))

    def close(self):
        if self._handle is not None:
            lib.kvb_manager_destroy(self._handle)
            self._handle = None
