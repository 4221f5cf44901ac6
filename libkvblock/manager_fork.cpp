// Fork, copy-on-write and rollback (docs/ARCHITECTURE.md, "Fork, rollback, sliding window"): a child
// shares its parent's blocks, a shared partial block is copied (the pairs drained by kvb_drain_copies),
// and a rollback drops tokens and the index entries they made.
#include <algorithm>
#include <cinttypes>

#include "error.h"
#include "manager.h"

namespace kvb {

// The chain link that block `num_hashed` of s would hash against, recomputed after num_hashed moved
// back (fork at an earlier position, rollback). The block before may have been released by the
// window: its link was kept then (released_links) while its next block is held.
static ChainLink chain_at(const Sequence& s, const GroupTable& t, uint32_t num_hashed, const BlockPool& pool,
                          const char* what) {
  if (num_hashed == t.num_hashed) return t.chain;
  if (num_hashed == 0) return t.first_link;
  int32_t b = t.table[num_hashed - 1];
  if (b < 0) {
    if (const ChainLink* l = t.released_link(num_hashed - 1)) return *l;
    fail(Code::bad_state, "seq %" PRId64 ": %s needs the hash of block %u, which the sliding window released", s.id,
         what, num_hashed - 1);
  }
  const BlockMeta& m = pool.meta(b);
  ChainLink l;
  if (m.has_hash) {  // otherwise the chain is already broken by a non-cacheable block: l is unused
    l.kind = ChainLink::parent;
    l.hash = m.hash;
    l.key = m.key;
  }
  return l;
}

// ---- fork ---------------------------------------------------------------------------------------

void Manager::fork(int64_t parent_id, int64_t child_id, size_t pos) {
  Sequence& p = device_seq(parent_id);
  if (p.tree_nodes) refuse_pending_tree(p, "a fork");
  if (parent_id == child_id) fail(Code::sequence_exists, "fork of seq %" PRId64 " onto itself", parent_id);
  if (find_seq(child_id)) fail(Code::sequence_exists, "sequence id %" PRId64 " already exists", child_id);
  if (pos == 0 || pos > p.num_tokens)
    fail(Code::invalid_argument, "seq %" PRId64 ": fork position %zu is not in [1, %" PRIu64 "]", parent_id, pos,
         p.num_tokens);
  if (pos > p.num_computed)
    fail(Code::bad_state, "seq %" PRId64 ": fork of %zu token%s but only %" PRIu64 " %s committed", parent_id, pos,
         plural_s(pos), p.num_computed, is_are(p.num_computed));
  const uint32_t nb = blocks_for(pos, bs_);
  const uint32_t hashed = std::min<uint32_t>(p.groups[0].num_hashed, static_cast<uint32_t>(pos / bs_));
  ChainLink chains[kMaxForkGroups];
  for (uint32_t g = 0; g < groups_.count; ++g) {  // every group is checked before anything changes
    const GroupTable& pg = p.groups[g];
    const uint32_t released = first_released_needed(pg, pos, nb);
    if (released != kNoBlockIndex)
      fail(Code::bad_state, "seq %" PRId64 ": a fork at %zu token%s needs block %u (the window of its next query), which "
           "the sliding window released%s", parent_id, pos, plural_s(pos), released,
           groups_.count > 1 ? " (in a window group)" : "");
    chains[g] = chain_at(p, pg, hashed, device_.pool, "fork position");
  }

  const size_t parent_index = static_cast<size_t>(&p - seqs_.pool.data());  // new_seq may move seqs_.pool
  Sequence& c = new_seq(child_id);
  Sequence& par = seqs_.pool[parent_index];
  try {
    c.extra_keys = par.extra_keys;
    for (uint32_t g = 0; g < groups_.count; ++g) {
      GroupTable& cg = c.groups[g];
      const GroupTable& pg = par.groups[g];
      cg.table.assign(pg.table.begin(), pg.table.begin() + nb);
      for (const auto& e : pg.released_links)
        if (e.first + 1 < nb) cg.released_links.push_back(e);
      for (const auto& e : pg.released_blocks)  // the shared prefix ages with the child too
        if (e.index < nb) cg.released_blocks.push_back(e);
      reserve_window_link(cg, pg.window);
    }
  } catch (...) {
    drop_seq(c);
    throw;
  }
  c.num_tokens = c.num_computed = pos;
  c.num_cached = std::min<uint64_t>(par.num_cached, pos);
  // Group 0 last: the order in which apply_window's releases reach the free queue.
  for (uint32_t k = 1; k <= groups_.count; ++k) {
    const uint32_t g = k % groups_.count;
    GroupTable& cg = c.groups[g];
    const GroupTable& pg = par.groups[g];
    for (int32_t b : cg.table)
      if (b >= 0) acquire_cached(b);
    cg.num_hashed = hashed;
    cg.uncacheable_from = pg.uncacheable_from < hashed ? pg.uncacheable_from : kNoBlockIndex;
    cg.chain = chains[g];
    cg.first_link = pg.first_link;
    cg.window = pg.window;
    cg.sink = pg.sink;
    cg.window_next = std::min(pg.window_next, nb);
    apply_window(c, cg);
  }
}

// ---- rollback -----------------------------------------------------------------------------------

void Manager::rollback(int64_t id, size_t n) {
  Sequence& s = device_seq(id);
  if (s.tree_nodes) refuse_pending_tree(s, "kvb_seq_rollback");
  if (n == 0) return;
  if (n >= s.num_tokens)
    fail(Code::invalid_argument, "seq %" PRId64 ": rollback of %zu token%s must leave at least 1 of %" PRIu64, id, n,
         plural_s(n),
         s.num_tokens);
  const uint64_t len = s.num_tokens - n;
  const uint32_t nb = blocks_for(len, bs_);
  const uint32_t hashed = std::min<uint32_t>(s.groups[0].num_hashed, static_cast<uint32_t>(len / bs_));
  ChainLink chains[kMaxForkGroups];
  for (uint32_t g = 0; g < groups_.count; ++g) {  // every group is checked before anything changes
    const GroupTable& sg = s.groups[g];
    const uint32_t released = first_released_needed(sg, std::min(s.num_computed, len), nb);
    if (released != kNoBlockIndex)
      fail(Code::bad_state, "seq %" PRId64 ": rollback to %" PRIu64 " token%s needs block %u (its last block or the "
           "window of its next query), which the sliding window released (only committed tokens can lie there)%s",
           id, len, plural_s(len), released, groups_.count > 1 ? " (in a window group)" : "");
    chains[g] = chain_at(s, sg, hashed, device_.pool, "rollback");
  }
  for (uint32_t g = groups_.count; g-- > 0;) rollback_apply(s, s.groups[g], len, nb, hashed, chains[g]);
  s.num_tokens = len;
  s.num_computed = std::min(s.num_computed, len);
  s.num_cached = std::min(s.num_cached, len);
}

void Manager::rollback_apply(const Sequence& s, GroupTable& t, uint64_t len, uint32_t nb, uint32_t hashed,
                             const ChainLink& chain) {
  for (size_t i = t.table.size(); i-- > nb;)
    if (t.table[i] >= 0) release_block(t.table[i]);
  t.table.resize(nb);
  while (!t.released_links.empty() && t.released_links.back().first + 1 >= nb) t.released_links.pop_back();
  for (; !t.released_blocks.empty() && t.released_blocks.back().index >= nb; t.released_blocks.pop_back())
    requeue_released(t.released_blocks.back(), s.id);
  // A committed full block that is about to be overwritten leaves the index, unless another sequence
  // still holds it as it is (the next append here then copies it first).
  if (len % bs_ != 0) {
    int32_t last = t.table.back();
    if (device_.pool.meta(last).has_hash && sequence_holders(last) == 1) forget_hash(last);
  }
  t.num_hashed = hashed;
  t.chain = chain;
  if (t.uncacheable_from >= hashed) t.uncacheable_from = kNoBlockIndex;
  t.window_next = std::min(t.window_next, nb);
}


// ---- copy-on-write drain -----------------------------------------------------------------------

void Manager::release_pending_copies() {
  // The caller has the pairs and runs them before the next forward step: sources may be reused after.
  // No source is also a destination (append folds such chains), so these releases drop no pair.
  for (const BlockPair& p : pending_.copies) release_block(p.first);
  pending_.copies.clear();
}

}  // namespace kvb
