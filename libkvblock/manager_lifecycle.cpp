// Beyond the core flow (docs/ARCHITECTURE.md, "Fork, rollback, sliding window"): fork with
// copy-on-write, rollback, sliding window, batch export for kernels and prefix-cache reset. (The host
// tier is in manager_host.cpp.)
#include <algorithm>
#include <cinttypes>
#include <climits>
#include <cstring>

#include "error.h"
#include "manager.h"

namespace kvb {

// The chain link that block `num_hashed` of s would hash against, recomputed after num_hashed moved
// back (fork at an earlier position, rollback). The block before may have been released by the
// window: its link was kept then (released_links) while its next block is held.
static ChainLink chain_at(const Sequence& s, uint32_t num_hashed, const BlockPool& pool, const char* what) {
  if (num_hashed == s.num_hashed) return s.chain;
  if (num_hashed == 0) return s.first_link;
  int32_t b = s.table[num_hashed - 1];
  if (b < 0) {
    if (const ChainLink* l = s.released_link(num_hashed - 1)) return *l;
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
  if (parent_id == child_id) fail(Code::sequence_exists, "fork of seq %" PRId64 " onto itself", parent_id);
  if (find_seq(child_id)) fail(Code::sequence_exists, "sequence id %" PRId64 " already exists", child_id);
  if (pos == 0 || pos > p.num_tokens)
    fail(Code::invalid_argument, "seq %" PRId64 ": fork position %zu is not in [1, %" PRIu64 "]", parent_id, pos,
         p.num_tokens);
  if (pos > p.num_computed)
    fail(Code::bad_state, "seq %" PRId64 ": fork of %zu token%s but only %" PRIu64 " %s committed", parent_id, pos,
         plural_s(pos), p.num_computed, is_are(p.num_computed));
  const uint32_t nb = blocks_for(pos, bs_);
  const uint32_t hashed = std::min<uint32_t>(p.num_hashed, static_cast<uint32_t>(pos / bs_));
  ChainLink chains[kMaxForkGroups];
  for (uint32_t g = 0; g < groups_; ++g) {  // every group is checked before anything changes
    const Sequence& pg = grp(p, g);
    const uint32_t released = first_released_needed(pg, pos, nb);
    if (released != kNoBlockIndex)
      fail(Code::bad_state, "seq %" PRId64 ": a fork at %zu token%s needs block %u (the window of its next query), which "
           "the sliding window released%s", parent_id, pos, plural_s(pos), released,
           groups_ > 1 ? " (in a window group)" : "");
    chains[g] = chain_at(pg, hashed, pool_, "fork position");
  }

  const size_t parent_index = static_cast<size_t>(&p - seqs_.data());  // new_seq may move seqs_
  Sequence& c = new_seq(child_id);
  Sequence& par = seqs_[parent_index];
  try {
    for (uint32_t g = 0; g < groups_; ++g) {
      Sequence& cg = grp(c, g);
      const Sequence& pg = grp(par, g);
      cg.table.assign(pg.table.begin(), pg.table.begin() + nb);
      cg.extra_keys = pg.extra_keys;
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
  // Group 0 last: the order in which apply_window's releases reach the free queue.
  for (uint32_t k = 1; k <= groups_; ++k) {
    const uint32_t g = k % groups_;
    Sequence& cg = grp(c, g);
    const Sequence& pg = grp(par, g);
    for (int32_t b : cg.table)
      if (b >= 0) acquire_cached(b);
    cg.num_tokens = cg.num_computed = pos;
    cg.num_cached = std::min<uint64_t>(pg.num_cached, pos);
    cg.num_hashed = hashed;
    cg.uncacheable_from = pg.uncacheable_from < hashed ? pg.uncacheable_from : kNoBlockIndex;
    cg.chain = chains[g];
    cg.first_link = pg.first_link;
    cg.window = pg.window;
    cg.sink = pg.sink;
    cg.window_next = std::min(pg.window_next, nb);
    apply_window(cg);
  }
}

// ---- rollback -----------------------------------------------------------------------------------

void Manager::rollback(int64_t id, size_t n) {
  Sequence& s = device_seq(id);
  if (n == 0) return;
  if (n >= s.num_tokens)
    fail(Code::invalid_argument, "seq %" PRId64 ": rollback of %zu token%s must leave at least 1 of %" PRIu64, id, n,
         plural_s(n),
         s.num_tokens);
  const uint64_t len = s.num_tokens - n;
  const uint32_t nb = blocks_for(len, bs_);
  const uint32_t hashed = std::min<uint32_t>(s.num_hashed, static_cast<uint32_t>(len / bs_));
  ChainLink chains[kMaxForkGroups];
  for (uint32_t g = 0; g < groups_; ++g) {  // every group is checked before anything changes
    const Sequence& sg = grp(s, g);
    const uint32_t released = first_released_needed(sg, std::min(s.num_computed, len), nb);
    if (released != kNoBlockIndex)
      fail(Code::bad_state, "seq %" PRId64 ": rollback to %" PRIu64 " token%s needs block %u (its last block or the "
           "window of its next query), which the sliding window released (only committed tokens can lie there)%s",
           id, len, plural_s(len), released, groups_ > 1 ? " (in a window group)" : "");
    chains[g] = chain_at(sg, hashed, pool_, "rollback");
  }
  for (uint32_t g = groups_; g-- > 0;) rollback_apply(grp(s, g), len, nb, hashed, chains[g]);
}

void Manager::rollback_apply(Sequence& s, uint64_t len, uint32_t nb, uint32_t hashed, const ChainLink& chain) {
  for (size_t i = s.table.size(); i-- > nb;)
    if (s.table[i] >= 0) release_block(s.table[i]);
  s.table.resize(nb);
  while (!s.released_links.empty() && s.released_links.back().first + 1 >= nb) s.released_links.pop_back();
  for (; !s.released_blocks.empty() && s.released_blocks.back().index >= nb; s.released_blocks.pop_back())
    requeue_released(s.released_blocks.back(), s.id);
  // A committed full block that is about to be overwritten leaves the index, unless another sequence
  // still holds it as it is (the next append here then copies it first).
  if (len % bs_ != 0) {
    int32_t last = s.table.back();
    if (pool_.meta(last).has_hash && sequence_holders(last) == 1) forget_hash(last);
  }
  s.num_tokens = len;
  s.num_computed = std::min(s.num_computed, len);
  s.num_cached = std::min(s.num_cached, len);
  s.num_hashed = hashed;
  s.chain = chain;
  if (s.uncacheable_from >= hashed) s.uncacheable_from = kNoBlockIndex;
  s.window_next = std::min(s.window_next, nb);
}

// ---- sliding window -----------------------------------------------------------------------------

void Manager::set_window(int64_t id, uint32_t window, uint32_t sink) {
  Sequence& s = device_seq(id);
  if (!cfg_.groups.empty())
    fail(Code::bad_state, "seq %" PRId64 ": the manager has KV cache groups; windows come from each group's "
         "kvb_group_spec, not from kvb_seq_set_window", id);
  if (window == 0 && sink != 0) fail(Code::invalid_argument, "seq %" PRId64 ": sink_tokens %u given without a window", id, sink);
  reserve_window_link(s, window);  // before any change
  s.window = window;
  s.sink = sink;
  // A smaller sink frees former sink blocks too: rescan from the new sink boundary (released slots are
  // skipped). Switching the window off releases nothing and keeps the scan position.
  if (window > 0) s.window_next = std::min(s.window_next, blocks_for(sink, bs_));
  apply_window(s);
}

void Manager::reserve_window_link(Sequence& s, uint32_t window) {
  // apply_window adds at most one released link per call; reserving first keeps it allocation-free.
  if (window && s.released_links.size() == s.released_links.capacity())
    s.released_links.reserve(s.released_links.size() + 2);
  // With groups, released cached blocks are remembered (one entry per block index at most, so the
  // table's capacity bounds them; it grows geometrically, so this reserves rarely).
  if (window && !cfg_.groups.empty() && s.released_blocks.capacity() < s.table.capacity())
    s.released_blocks.reserve(s.table.capacity());
}

uint32_t Manager::window_first_block(uint32_t window, uint64_t p) const {
  return static_cast<uint32_t>((p + 1 > window ? p + 1 - window : 0) / bs_);
}

// After a rollback or fork_at leaving nb blocks with `computed` tokens computed, the query of position
// `computed` comes next and attends [computed + 1 - window, computed] (apply_window's rule), and the last
// block is written or read: the first of those blocks that the window already released, or kNoBlockIndex.
uint32_t Manager::first_released_needed(const Sequence& s, uint64_t computed, uint32_t nb) const {
  uint32_t first = nb - 1;
  if (s.window != 0) first = std::min(first, window_first_block(s.window, computed));
  for (uint32_t i = first; i < nb; ++i)
    if (s.table[i] < 0) return i;
  return kNoBlockIndex;
}

void Manager::apply_window(Sequence& s) {
  if (s.window == 0 || s.num_computed == 0) return;
  // The earliest query still to come is that of position num_computed (the first uncomputed token, or
  // the next one appended); it attends [num_computed + 1 - window, num_computed]. Blocks wholly before
  // that are released, past the sink, except the block of the last computed token, so that rolling
  // back every uncomputed token always leaves a held last block.
  const uint32_t end = std::min(window_first_block(s.window, s.num_computed),
                                static_cast<uint32_t>((s.num_computed - 1) / bs_));
  const uint32_t start = std::max(s.window_next, blocks_for(s.sink, bs_));
  for (uint32_t i = start; i < end; ++i) {
    int32_t b = s.table[i];
    if (b < 0) continue;
    // Keep the link of the released block while the next one is held (an entry persists only for the
    // last block of the loop: the next iteration drops it); the previous block's is no longer needed.
    auto& links = s.released_links;
    auto pos = links.begin();
    while (pos != links.end() && pos->first < i) {
      if (pos->first + 1 == i) pos = links.erase(pos);
      else ++pos;
    }
    if (i + 1 < s.table.size() && s.table[i + 1] >= 0) links.emplace(pos, i, link_after(pool_.meta(b)));
    // With groups, a cached block the window lets go of is parked: it ages with its sequence (see
    // Manager::free_group_blocks). Room for the entry was reserved by reserve_window_link.
    const bool park = !cfg_.groups.empty() && pool_.meta(b).indexed;
    if (park) s.released_blocks.push_back(Sequence::ReleasedBlock{i, b, pool_.meta(b).key});
    release_block(b, park ? &s : nullptr);
    s.table[i] = -1;
  }
  s.window_next = std::max(start, end);
}

// ---- batch export -------------------------------------------------------------------------------

void Manager::batch_export(const int64_t* ids, size_t n, BatchOut& out) {
  if (out.group >= groups_)
    fail(Code::invalid_argument, "batch group %u is out of range: the manager has %u group%s", out.group, groups_,
         plural_s(groups_));
  // First pass: validate and size everything, so that a failure writes nothing.
  size_t slots = 0;
  uint32_t max_blocks = 0;
  const uint64_t epoch = ++export_epoch_;
  for (size_t i = 0; i < n; ++i) {
    Sequence& s = device_seq(ids[i]);
    // A sequence listed twice would get its slots twice: two writes of one token's K/V in one step.
    if (s.export_epoch == epoch)
      fail(Code::invalid_argument, "seq_ids[%zu] = %" PRId64 " repeats seq_ids[%zu]", i, ids[i], s.export_index);
    s.export_epoch = epoch;
    s.export_index = i;
    if (s.num_tokens > static_cast<uint64_t>(INT32_MAX))
      fail(Code::invalid_argument, "seq %" PRId64 ": %" PRIu64 " tokens do not fit int32 seq_lens", s.id, s.num_tokens);
    slots += s.num_tokens - s.num_computed;
    max_blocks = std::max(max_blocks, s.num_blocks());
  }
  out.num_slots = slots;
  out.max_blocks_needed = max_blocks;
  if (out.query_start && slots > static_cast<size_t>(INT32_MAX))
    fail(Code::invalid_argument, "batch of %zu new tokens does not fit int32 query_start", slots);
  if (out.block_tables && max_blocks > out.max_blocks_per_seq)
    fail(Code::buffer_too_small, "block tables need %u column%s, max_blocks_per_seq is %u", max_blocks,
         plural_s(max_blocks),
         out.max_blocks_per_seq);
  if (out.slot_mapping && slots > out.slot_capacity)
    fail(Code::buffer_too_small, "slot mapping needs %zu entr%s, slot_capacity is %zu", slots, slots == 1 ? "y" : "ies",
         out.slot_capacity);

  if (out.prefix_groups) find_prefix_groups(ids, n, out.group, *out.prefix_groups);

  if (out.prefix_groups) write_prefix_groups(*out.prefix_groups);
  size_t k = 0;
  if (out.query_start) out.query_start[0] = 0;
  for (size_t i = 0; i < n; ++i) {
    const Sequence& s = grp(*find_seq(ids[i]), out.group);
    if (out.block_tables) {
      int32_t* row = out.block_tables + i * out.max_blocks_per_seq;
      std::copy(s.table.begin(), s.table.end(), row);
      std::fill(row + s.table.size(), row + out.max_blocks_per_seq, -1);
    }
    if (out.seq_lens) out.seq_lens[i] = static_cast<int32_t>(s.num_tokens);
    if (out.slot_mapping)
      for (uint64_t pos = s.num_computed; pos < s.num_tokens; ++pos)
        out.slot_mapping[k++] = static_cast<int64_t>(s.table[pos / bs_]) * bs_ + static_cast<int64_t>(pos % bs_);
    else
      k += s.num_tokens - s.num_computed;
    if (out.query_start) out.query_start[i + 1] = static_cast<int32_t>(k);
  }
  if (out.slot_mapping) std::fill(out.slot_mapping + k, out.slot_mapping + out.slot_capacity, int64_t{-1});
}

// ---- prefix-cache reset -------------------------------------------------------------------------

void Manager::reset_prefix_cache() {
  if (pool_.num_free() != pool_.num_blocks())
    fail(Code::bad_state, "reset refused: %u block%s %s in use by running sequences",
         pool_.num_blocks() - pool_.num_free(), plural_s(pool_.num_blocks() - pool_.num_free()),
         is_are(pool_.num_blocks() - pool_.num_free()));
  index_.clear();
  while (pool_.num_parked() > 0) {  // parked blocks are cached ones (a swapped-out sequence's)
    int32_t b = pool_.parked_head();
    pool_.unlink(b);
    pool_.push_tail(b);
  }
  for (uint32_t b = 0; b < pool_.num_blocks(); ++b) {
    BlockMeta& m = pool_.meta(static_cast<int32_t>(b));
    if (m.indexed && !group_cached_.empty()) --group_cached_[block_group(static_cast<int32_t>(b))];
    m.has_hash = m.indexed = m.has_extra = 0;
  }
  cached_free_ = 0;
  if (stored_hashes_) stored_hashes_->clear();
  clear_host_cache();
  emit(3 /* KVB_EVENT_ALL_CLEARED */, -1, nullptr);
}

}  // namespace kvb
