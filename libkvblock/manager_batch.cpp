// Batched decode calls: append one token to each of N sequences, and commit a count for each of N
// sequences, in one call each. A Python (or any FFI) engine then crosses the boundary a fixed number of
// times per step instead of once per sequence. Both calls validate everything before changing anything,
// so they are all-or-nothing like their per-sequence counterparts.
#include <algorithm>
#include <cinttypes>
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

void Manager::check_batch_ids(const int64_t* ids, size_t n, const char* what) {
  const uint32_t gen = next_generation(seqs_.size());
  for (size_t i = 0; i < n; ++i) {
    Sequence& s = device_seq(ids[i]);
    uint32_t& st = scratch.stamp[static_cast<size_t>(&s - seqs_.data())];
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
    if (s.num_tokens % bs_ == 0) ++needed;
    else if (sequence_holders(s.table.back()) > 1) scratch.shared_partial.push_back(s.table.back());
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
  if (pool_.num_free() < needed)
    fail(Code::out_of_blocks, "batch append of %zu token%s needs %zu free block%s, %u %s free", n, plural_s(n), needed,
         plural_s(needed), pool_.num_free(), is_are(pool_.num_free()));
  // Reserve every container the appends may grow, so that nothing below can fail half-way.
  for (size_t i = 0; i < n; ++i) {
    Sequence& s = *find_seq(ids[i]);
    size_t total = static_cast<size_t>(s.num_tokens / bs_) + 1;
    if (total > s.table.capacity()) s.table.reserve(std::max(total, 2 * s.table.capacity()));
  }
  pending_copies_.reserve(pending_copies_.size() + scratch.shared_partial.size());
  for (size_t i = 0; i < n; ++i) append(ids[i], tokens + i, 1);
}

void Manager::batch_commit(const int64_t* ids, const size_t* counts, size_t n) {
  check_batch_ids(ids, n, "batch commit");
  if (counts)
    for (size_t i = 0; i < n; ++i) {
      const Sequence& s = *find_seq(ids[i]);
      uint64_t uncomputed = s.num_tokens - s.num_computed;
      if (counts[i] > uncomputed)
        fail(Code::invalid_argument, "seq %" PRId64 " (num_tokens[%zu]): commit of %zu token%s exceeds %" PRIu64
             " uncomputed token%s", ids[i], i, counts[i], plural_s(counts[i]), uncomputed, plural_s(uncomputed));
    }
  // The one allocation a commit may make (room for a windowed sequence's released chain link), made for
  // every sequence before the first commit, so that running out of memory cannot stop the batch half-way.
  for (size_t i = 0; i < n; ++i) {
    Sequence& s = *find_seq(ids[i]);
    reserve_window_link(s, s.window);
  }
  for (size_t i = 0; i < n; ++i) {
    const Sequence& s = *find_seq(ids[i]);
    commit(ids[i], counts ? counts[i] : static_cast<size_t>(s.num_tokens - s.num_computed));
  }
}

}  // namespace kvb
