// Commit and append (docs/ARCHITECTURE.md, "Sequences"): committed full blocks enter the prefix index,
// appended tokens take blocks from the free queue, and a shared last block is copied first
// (copy-on-write, after a fork).
#include <algorithm>
#include <cinttypes>
#include <cstring>

#include "error.h"
#include "manager.h"

namespace kvb {

// ---- commit -------------------------------------------------------------------------------------

void Manager::hash_committed_blocks(const Sequence& s, GroupTable& t) {
  const uint32_t end = static_cast<uint32_t>(s.num_computed / bs_);
  if (t.num_hashed >= end) return;
  if (t.uncacheable_from == kNoBlockIndex) {
    // Every block's index slot is prefetched when it is hashed, and the block is entered later, in order:
    // a plain manager kLag blocks later in the same loop (below), the others in chunks of kChunk blocks
    // (hash every block of the chunk, then enter them). On large pools the index slots are the miss
    // path's stall (DRAM misses); the hashes in between give the slots the time to load, where entering
    // each block one block after its hash left one hash of time for each miss. Hashing reads nothing
    // that entering writes, so the index ends as it would block by block (same order, same events).
    constexpr uint32_t kChunk = 32;
    // A plain manager (no host level, no KV cache groups, no events) enters a block with the index put
    // and the cached-free count alone (enter_plain); the usual 16-token block without an extra key is
    // hashed by the inline hash_and_key_16. Both spare the miss path calls and per-block feature tests.
    const bool plain = !cfg_.host_cache && groups_.cached.empty() && !events_.enabled();
    const bool no_extras = s.extra_keys.empty();
    // index_block for a plain manager: no groups, host twins or events to keep in step.
    auto enter_plain = [this](int32_t b) __attribute__((always_inline)) {
      BlockMeta& m = device_.pool.meta(b);
      const int32_t old = device_.index.put(m.key, b);
      if (old == b) return;
      if (!m.indexed && m.in_free) ++counters_.cached_free;
      m.indexed = 1;
      if (old >= 0) {  // a recomputed copy replaces the cached block
        BlockMeta& o = device_.pool.meta(old);
        o.indexed = 0;
        if (o.in_free) --counters_.cached_free;
        if (o.in_free == 2) {  // (as index_block does; only KV cache groups park blocks)
          device_.pool.unlink(old);
          device_.pool.push_head(old);
        }
      }
    };
    // hash_and_key for one block: false (and t.uncacheable_from set) where the block is not cacheable.
    auto hash_block = [&](uint32_t i, ChainLink& chain) __attribute__((always_inline)) {
      int32_t b = t.table[i];
      ExtraKey extra = no_extras ? ExtraKey{} : s.extra_key(i);
      const int64_t* toks = device_.pool.tokens(b);
      // Once a block holds a non-cacheable token (without an extra key), no later block is cacheable:
      // its hash chain would describe content that the index cannot reproduce.
      if (!is_cacheable(toks, bs_, extra)) {
        t.uncacheable_from = i;
        return false;
      }
      BlockMeta& m = device_.pool.meta(b);
      if (bs_ == 16 && !extra.present && chain.kind != ChainLink::none)
        keys_.hasher.hash_and_key_16(chain, toks, &m.hash, &m.key);
      else
        keys_.hasher.hash_and_key(chain, toks, bs_, extra, &m.hash, &m.key);
      m.has_hash = 1;
      m.has_extra = extra.present;
      m.extra = extra.value;
      device_.index.prefetch(m.key);
      chain = link_after(m);
      return true;
    };
    ChainLink chain = t.chain;  // a local: the stores into block metadata cannot alias it
    uint32_t i = t.num_hashed;
    if (plain) {
      // Software-pipelined: block i is entered kLag blocks after it was hashed, in the same loop body as
      // the hash of block i + kLag. Each hash waits on its parent's (the chain), and the put of an earlier
      // block, which does not, runs in those waits; its index slot has had kLag hashes' time to load.
      // Same order of puts as block by block, and no put reads what a later block's hash writes (above).
      // 16: on a 2^20-block pool (index beyond the caches) the put's slot takes longer to load than 8
      // hashes; 16 measured 1.5-4 ns per block faster there and the same on a cached index.
      constexpr uint32_t kLag = 16;
      const uint32_t first = i;
      const uint32_t fill = std::min(end, first + kLag);
      bool cacheable = true;
      while (i < fill && (cacheable = hash_block(i, chain))) ++i;
      // Steady state: block i - kLag is entered after block i is hashed (no counter of entered blocks).
      if (cacheable)
        for (; i < end; ++i) {
          if (!hash_block(i, chain)) break;
          enter_plain(t.table[i - kLag]);
        }
      for (uint32_t k = i - first >= kLag ? i - kLag : first; k < i; ++k) enter_plain(t.table[k]);  // the last kLag
      t.chain = chain;
      t.num_hashed = end;
      return;
    }
    while (i < end) {
      const uint32_t first = i;
      const ChainLink first_parent = chain;
      const uint32_t stop = std::min(end, first + kChunk);
      for (; i < stop; ++i)
        if (!hash_block(i, chain)) break;
      // Each block's parent is the link of the block before it (the chunk's first: the chain it began with).
      if (first < i) index_block(t.table[first], first_parent, t.group);
      for (uint32_t k = first + 1; k < i; ++k)
        index_block(t.table[k], link_after(device_.pool.meta(t.table[k - 1])), t.group);
      if (t.uncacheable_from != kNoBlockIndex) break;
    }
    t.chain = chain;
  }
  t.num_hashed = end;
}

void Manager::commit(int64_t id, size_t n) {
  Sequence& s = device_seq(id);
  if (s.tree_nodes) refuse_pending_tree(s, "kvb_seq_commit");
  uint64_t uncomputed = s.num_tokens - s.num_computed;
  if (n > uncomputed)
    fail(Code::invalid_argument, "seq %" PRId64 ": commit of %zu token%s exceeds %" PRIu64 " uncomputed token%s", id, n,
         plural_s(n), uncomputed, plural_s(uncomputed));
  for (GroupTable& t : s.groups) reserve_window_link(t, t.window);
  commit_apply(s, n);
}

// ---- append -------------------------------------------------------------------------------------

// Inline: on a decode step's append the call and its register saves cost as much as its loop.
inline size_t Manager::blocks_needed_to_append(const Sequence& s, size_t n, size_t* copies) const {
  size_t needed = 0, cows = 0;
  if (n > 0) {
    const uint64_t total = blocks_for(s.num_tokens + n, bs_);
    const bool partial = s.num_tokens % bs_ != 0;
    for (const GroupTable& t : s.groups) {  // groups hold distinct blocks: their needs add up
      needed += static_cast<size_t>(total - t.table.size());
      // Writing into a partial block that another sequence shares needs a private copy first.
      cows += partial && sequence_holders(t.table.back()) > 1;
    }
  }
  if (copies) *copies = cows;
  return needed + cows;
}

bool Manager::can_append(int64_t id, size_t n) {
  Sequence& s = device_seq(id);
  if (n > static_cast<size_t>(kMaxSeqBlocks) * bs_ || s.num_tokens + n > static_cast<uint64_t>(kMaxSeqBlocks) * bs_)
    return false;
  return device_.pool.num_free() >= blocks_needed_to_append(s, n, nullptr);
}

void Manager::append(int64_t id, const int64_t* tokens, size_t n) {
  Sequence& s = device_seq(id);
  if (s.tree_nodes) refuse_pending_tree(s, "kvb_seq_append");
  if (n == 0) return;
  if (n > static_cast<size_t>(kMaxSeqBlocks) * bs_ || s.num_tokens + n > static_cast<uint64_t>(kMaxSeqBlocks) * bs_)
    fail(Code::invalid_argument, "seq %" PRId64 ": append of %zu tokens to %" PRIu64 " would exceed %u blocks", id, n,
         s.num_tokens, kMaxSeqBlocks);
  size_t cows;
  const size_t needed = blocks_needed_to_append(s, n, &cows);
  if (device_.pool.num_free() < needed)
    fail(Code::out_of_blocks, "seq %" PRId64 ": append of %zu token%s needs %zu free block%s, %u %s free", id, n,
         plural_s(n), needed, plural_s(needed), device_.pool.num_free(), is_are(device_.pool.num_free()));
  // Reserve for every group first: nothing below allocates, so the append is all-or-nothing across groups.
  const size_t total = blocks_for(s.num_tokens + n, bs_);
  for (GroupTable& t : s.groups)
    if (total > t.table.capacity()) t.table.reserve(std::max(total, 2 * t.table.capacity()));
  if (pending_.copies.size() + cows > pending_.copies.capacity())
    pending_.copies.reserve(std::max<size_t>(16, 2 * (pending_.copies.size() + cows)));
  for (GroupTable& t : s.groups) append_apply(s, t, tokens, n);
  s.num_tokens += n;
}

void Manager::append_apply(const Sequence& s, GroupTable& t, const int64_t* tokens, size_t n) {
  const size_t total = blocks_for(s.num_tokens + n, bs_);
  const bool cow = s.num_tokens % bs_ != 0 && sequence_holders(t.table.back()) > 1;
  if (cow) {
    int32_t src = t.table.back();
    int32_t dst = take_free_block();
    std::memcpy(device_.pool.tokens(dst), device_.pool.tokens(src), (s.num_tokens % bs_) * sizeof(int64_t));
    // The sequence's reference on src passes to the pending copy, so src cannot be reused before the
    // copy runs. If src is itself waiting for a copy from s0, copy from s0: its content is what src
    // will hold, and the drained list then never depends on the order of its pairs.
    int32_t from = src;
    for (const BlockPair& p : pending_.copies)
      if (p.second == src) from = p.first;
    if (from != src) {
      acquire_cached(from);  // held by its own pending copy: never in the free queue
      release_block(src);    // still held by the sequences it is shared with
    }
    pending_.copies.emplace_back(from, dst);
    ++counters_.cow_copies;
    t.table.back() = dst;
  } else if (s.num_tokens % bs_ != 0 && device_.pool.meta(t.table.back()).has_hash) {
    // A committed full block that this sequence shares only partially (fork_at or rollback into a block
    // that was shared then) and now holds alone: writing changes its content, so it leaves the index.
    forget_hash(t.table.back());
  }
  while (t.table.size() < total) t.table.push_back(take_free_block());
  write_tokens(t, s.num_tokens, tokens, n);
  // No window release here: the new tokens' queries attend back from their own positions (see
  // apply_window), and a rejected draft must be rollback-able.
}

}  // namespace kvb
