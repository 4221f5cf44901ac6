// Batched decode calls: append one token to each of N sequences, and commit a count for each of N
// sequences, in one call each. A Python (or any FFI) engine then crosses the boundary a fixed number of
// times per step instead of once per sequence. Both calls validate everything before changing anything,
// so they are all-or-nothing like their per-sequence counterparts.
#include <algorithm>
#include <cinttypes>
#include <climits>
#include <vector>

#include "error.h"
#include "manager.h"

namespace kvb {

namespace {

// Per-thread scratch: a stamp per pooled sequence slot to find duplicate ids in O(n), and the shared
// partial blocks a batch append would copy. Reused across calls, so a warm decode loop allocates nothing.
struct BatchScratch {
  std::vector<uint32_t> stamp;
  uint32_t generation = 0;
  std::vector<int32_t> shared_partial;
};
thread_local BatchScratch scratch;

uint32_t next_generation(size_t num_slots) {
  if (scratch.stamp.size() < num_slots) scratch.stamp.resize(num_slots, 0);
  if (++scratch.generation == 0) {  // wrapped: old stamps could collide
    std::fill(scratch.stamp.begin(), scratch.stamp.end(), 0);
    scratch.generation = 1;
  }
  return scratch.generation;
}

}  // namespace

// ---- prefix groups of a batch export (kvb_prefix_groups) ------------------------------------------

namespace {

// Per-thread scratch of find_prefix_groups, reused across calls: a warm decode loop allocates nothing.
struct GroupScratch {
  struct Candidate {
    int32_t first, last;  // batch rows: first member, last member so far (members linked by next)
    uint32_t count, shared;
  };
  std::vector<uint32_t> block_stamp;  // per block id: generation that saw it as a grouping key
  std::vector<uint32_t> block_cand;   // ... and its candidate
  uint32_t generation = 0;
  std::vector<const int32_t*> table;  // per batch row
  std::vector<int32_t> next;          // per batch row: next member of its candidate, -1 = last
  std::vector<Candidate> cands;
};
thread_local GroupScratch gscratch;

template <class T>
void grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(std::max(n, 2 * v.size()));
}

}  // namespace

// Rows are keyed by the block at column k - 1 (k = min_shared), so that sequences sharing a short
// common head (one system prompt block) but longer fork prefixes still group by the longer prefix;
// each candidate's first k columns are checked against its first member, since one block id at one
// column does not prove the columns before it equal. Every step reads each table entry at most a few
// times: O(total blocks).
void Manager::find_prefix_groups(const int64_t* ids, size_t n, uint32_t group, PrefixGroupsOut& out) {
  GroupScratch& g = gscratch;
  const uint32_t k = out.min_shared;
  grow(g.block_stamp, device_.pool.num_blocks());
  grow(g.block_cand, device_.pool.num_blocks());
  if (++g.generation == 0) {
    std::fill(g.block_stamp.begin(), g.block_stamp.end(), 0);
    g.generation = 1;
  }
  grow(g.table, n);
  grow(g.next, n);
  if (g.cands.capacity() < n) g.cands.reserve(std::max(n, 2 * g.cands.capacity()));
  g.cands.clear();
  for (size_t i = 0; i < n; ++i) {
    const Sequence& s = *find_seq(ids[i]);
    const std::vector<int32_t>& table = s.groups[group].table;
    const int32_t* t = table.data();
    g.table[i] = t;
    g.next[i] = -1;
    // Shareable: full blocks whose tokens are all computed, up to the first window-released entry.
    uint32_t limit = static_cast<uint32_t>(std::min<uint64_t>(s.num_computed / bs_, table.size()));
    uint32_t share = 0;
    while (share < limit && t[share] >= 0) ++share;
    if (share < k) continue;
    const int32_t key = t[k - 1];
    if (g.block_stamp[key] != g.generation) {
      g.block_stamp[key] = g.generation;
      g.block_cand[key] = static_cast<uint32_t>(g.cands.size());
      g.cands.push_back({static_cast<int32_t>(i), static_cast<int32_t>(i), 1, share});
      continue;
    }
    GroupScratch::Candidate& c = g.cands[g.block_cand[key]];
    const int32_t* f = g.table[c.first];
    if (!std::equal(t, t + k, f)) continue;  // the same block at column k - 1 after different heads
    uint32_t common = k;
    const uint32_t bound = std::min(c.shared, share);
    while (common < bound && t[common] == f[common]) ++common;
    c.shared = common;
    g.next[c.last] = static_cast<int32_t>(i);
    c.last = static_cast<int32_t>(i);
    ++c.count;
  }
  uint32_t groups = 0, members = 0;
  for (const GroupScratch::Candidate& c : g.cands)
    if (c.count >= 2) {
      ++groups;
      members += c.count;
    }
  out.num_groups = groups;
  out.num_members = members;
  if (groups > out.group_capacity)
    fail(Code::buffer_too_small, "prefix groups: %u group%s, group_capacity is %u", groups, plural_s(groups),
         out.group_capacity);
  if (members > out.member_capacity)
    fail(Code::buffer_too_small, "prefix groups: %u member%s, member_capacity is %u", members, plural_s(members),
         out.member_capacity);
}

void Manager::write_prefix_groups(PrefixGroupsOut& out) {
  const GroupScratch& g = gscratch;
  uint32_t gi = 0, mi = 0;
  out.group_start[0] = 0;
  for (const GroupScratch::Candidate& c : g.cands) {
    if (c.count < 2) continue;
    for (int32_t r = c.first; r >= 0; r = g.next[r]) out.members[mi++] = r;
    out.shared_blocks[gi] = static_cast<int32_t>(c.shared);
    out.group_start[++gi] = static_cast<int32_t>(mi);
  }
}

void Manager::check_batch_ids(const int64_t* ids, size_t n, const char* what) {
  const uint32_t gen = next_generation(seqs_.pool.size());
  for (size_t i = 0; i < n; ++i) {
    Sequence& s = device_seq(ids[i]);
    uint32_t& st = scratch.stamp[static_cast<size_t>(&s - seqs_.pool.data())];
    if (st == gen) fail(Code::invalid_argument, "%s: seq %" PRId64 " appears twice (seq_ids[%zu])", what, ids[i], i);
    st = gen;
  }
}

void Manager::batch_append(const int64_t* ids, const int64_t* tokens, size_t n) {
  check_batch_ids(ids, n, "batch append");
  // Blocks the whole batch needs: a new block where the last one is full, plus a copy where the last
  // block is partial and shared. Sequences sharing one partial block (forked siblings) copy in turn, and
  // each copy leaves one holder less, so k appenders among h holders make min(k, h - 1) copies.
  size_t needed = 0;
  scratch.shared_partial.clear();
  for (size_t i = 0; i < n; ++i) {
    const Sequence& s = *find_seq(ids[i]);
    if (s.tree_nodes) refuse_pending_tree(s, "kvb_batch_append");
    // append()'s length limit, checked here for the whole batch before anything changes.
    if (s.num_tokens + 1 > static_cast<uint64_t>(kMaxSeqBlocks) * bs_)
      fail(Code::invalid_argument, "batch append: seq %" PRId64 " (seq_ids[%zu]) already holds %" PRIu64
           " tokens, the most %u blocks hold", ids[i], i, s.num_tokens, kMaxSeqBlocks);
    for (const GroupTable& t : s.groups) {  // groups hold distinct blocks: their needs add up
      if (s.num_tokens % bs_ == 0) ++needed;
      else if (sequence_holders(t.table.back()) > 1) scratch.shared_partial.push_back(t.table.back());
    }
  }
  if (!scratch.shared_partial.empty()) {
    std::vector<int32_t>& sp = scratch.shared_partial;
    std::sort(sp.begin(), sp.end());
    for (size_t i = 0; i < sp.size();) {
      size_t j = i;
      while (j < sp.size() && sp[j] == sp[i]) ++j;
      needed += std::min<size_t>(j - i, static_cast<size_t>(sequence_holders(sp[i]) - 1));
      i = j;
    }
  }
  if (device_.pool.num_free() < needed)
    fail(Code::out_of_blocks, "batch append of %zu token%s needs %zu free block%s, %u %s free", n, plural_s(n), needed,
         plural_s(needed), device_.pool.num_free(), is_are(device_.pool.num_free()));
  // Reserve every container the appends may grow, so that nothing below can fail half-way.
  for (size_t i = 0; i < n; ++i) {
    Sequence& s = *find_seq(ids[i]);
    const size_t total = static_cast<size_t>(s.num_tokens / bs_) + 1;
    for (GroupTable& t : s.groups)
      if (total > t.table.capacity()) t.table.reserve(std::max(total, 2 * t.table.capacity()));
  }
  pending_.copies.reserve(pending_.copies.size() + scratch.shared_partial.size());
  // Every check and reservation append() would repeat per sequence was made above for the whole batch:
  // the tokens go straight to append_apply (append's own checks were a third of a decode step's C time).
  for (size_t i = 0; i < n; ++i) {
    Sequence& s = *find_seq(ids[i]);
    for (GroupTable& t : s.groups) append_apply(s, t, tokens + i, 1);
    s.num_tokens += 1;
  }
}

void Manager::batch_commit(const int64_t* ids, const size_t* counts, size_t n) {
  check_batch_ids(ids, n, "batch commit");
  for (size_t i = 0; i < n; ++i)
    if (find_seq(ids[i])->tree_nodes) refuse_pending_tree(*find_seq(ids[i]), "kvb_batch_commit");
  if (counts)
    for (size_t i = 0; i < n; ++i) {
      const Sequence& s = *find_seq(ids[i]);
      uint64_t uncomputed = s.num_tokens - s.num_computed;
      if (counts[i] > uncomputed)
        fail(Code::invalid_argument, "seq %" PRId64 " (num_tokens[%zu]): commit of %zu token%s exceeds %" PRIu64
             " uncomputed token%s", ids[i], i, counts[i], plural_s(counts[i]), uncomputed, plural_s(uncomputed));
    }
  // The one allocation a commit may make (room for a windowed sequence's released chain link), made for
  // every group of every sequence before the first commit, so that running out of memory cannot stop the
  // batch half-way.
  for (size_t i = 0; i < n; ++i)
    for (GroupTable& t : find_seq(ids[i])->groups) reserve_window_link(t, t.window);
  // Checked and reserved above: straight to commit_apply (commit() would look each sequence up again).
  for (size_t i = 0; i < n; ++i) {
    Sequence& s = *find_seq(ids[i]);
    commit_apply(s, counts ? counts[i] : static_cast<size_t>(s.num_tokens - s.num_computed));
  }
}

// ---- batch export -------------------------------------------------------------------------------

void Manager::batch_export(const int64_t* ids, size_t n, BatchOut& out) {
  if (out.group >= groups_.count)
    fail(Code::invalid_argument, "batch group %u is out of range: the manager has %u group%s", out.group, groups_.count,
         plural_s(groups_.count));
  // First pass: validate and size everything, so that a failure writes nothing.
  size_t slots = 0;
  uint32_t max_blocks = 0;
  const uint64_t epoch = ++seqs_.export_epoch;
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
  if ((out.slot_mapping || out.tree_mask) && slots > out.slot_capacity)
    fail(Code::buffer_too_small, "%s needs %zu entr%s, slot_capacity is %zu", out.slot_mapping ? "slot mapping" : "tree mask", slots,
         slots == 1 ? "y" : "ies", out.slot_capacity);

  if (out.prefix_groups) find_prefix_groups(ids, n, out.group, *out.prefix_groups);

  if (out.prefix_groups) write_prefix_groups(*out.prefix_groups);
  size_t k = 0;
  if (out.query_start) out.query_start[0] = 0;
  for (size_t i = 0; i < n; ++i) {
    const Sequence& s = *find_seq(ids[i]);
    const std::vector<int32_t>& table = s.groups[out.group].table;
    if (out.block_tables) {
      int32_t* row = out.block_tables + i * out.max_blocks_per_seq;
      std::copy(table.begin(), table.end(), row);
      std::fill(row + table.size(), row + out.max_blocks_per_seq, -1);
    }
    if (out.seq_lens) out.seq_lens[i] = static_cast<int32_t>(s.num_tokens);
    if (out.slot_mapping)
      for (uint64_t pos = s.num_computed; pos < s.num_tokens; ++pos)
        out.slot_mapping[k++] = static_cast<int64_t>(table[pos / bs_]) * bs_ + static_cast<int64_t>(pos % bs_);
    else
      k += s.num_tokens - s.num_computed;
    if (out.tree_mask) write_tree_mask(s, out.tree_mask + (k - (s.num_tokens - s.num_computed)));
    if (out.query_start) out.query_start[i + 1] = static_cast<int32_t>(k);
  }
  if (out.slot_mapping) std::fill(out.slot_mapping + k, out.slot_mapping + out.slot_capacity, int64_t{-1});
  if (out.tree_mask) std::fill(out.tree_mask + k, out.tree_mask + out.slot_capacity, uint64_t{0});
}

}  // namespace kvb
