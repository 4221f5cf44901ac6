"""Helpers shared by the kvblock.events tests: a manager with events on and a few one-line workloads."""
import indexer_client  # noqa: F401  (examples/, on sys.path through conftest.py; re-exported for the tests)
import kvblock
from kvblock import events  # noqa: F401  (re-exported for the tests)


class EvManager(kvblock.Manager):
    """kvblock.Manager(events=True) plus the workloads these tests run."""

    def __init__(self, num_blocks, block_size=4, event_capacity=65536, **options):
        super().__init__(num_blocks, block_size, events=True, event_capacity=event_capacity, **options)
        self._next_seq = 1

    def new_seq_id(self):
        self._next_seq += 1
        return self._next_seq - 1

    def run(self, tokens, keep=False):
        """allocate + commit the whole prompt (+ free unless keep); returns (seq id, cached tokens)."""
        sid = self.new_seq_id()
        cached = self.allocate(sid, tokens)
        self.drain_host_transfers()  # no K/V here: the host cache's copies are only handed out
        self.commit(sid, len(tokens) - cached)
        if not keep:
            self.free(sid)
        return sid, cached

    def run_twins(self, tokens):
        """Two sequences compute the same blocks at once (both allocated before either commits): the
        second commit re-enters hashes the first already stored."""
        sids = [self.new_seq_id(), self.new_seq_id()]
        done = []
        try:
            for sid in sids:
                cached = self.allocate(sid, tokens)
                done.append(sid)
            self.drain_host_transfers()
            for sid in sids:
                self.commit(sid, len(tokens) - cached)
        finally:
            for sid in done:
                self.free(sid)

    def cached(self, tokens):
        """Prefix-cached tokens an allocate of tokens would reuse now."""
        return self.can_allocate(tokens)

    def cached_blocks_tokens(self, tokens):
        """Tokens in the full blocks of `tokens` that the cache holds as a prefix: what a router scores.
        (allocate never reuses a prompt's last block, so one more token makes every full block count.)"""
        return self.can_allocate(list(tokens) + [0])

    def device_blocks_tokens(self, tokens):
        """Tokens in the full blocks of `tokens` whose chain hashes some device block holds, as a prefix:
        what a router scores for the "GPU" tier. (kvb_block_hash also answers for free blocks no longer
        indexed after a reset: not for workloads that reset.)"""
        held = {self.block_hash(b) for b in range(self.num_blocks)} - {None}
        n, parent, bs = 0, None, self.block_size
        for i in range(0, len(tokens) - len(tokens) % bs, bs):
            parent = kvblock.hash_tokens(tokens[i:i + bs], parent)
            if parent not in held:
                break
            n += bs
        return n

    def reset(self):
        self.reset_prefix_cache()
