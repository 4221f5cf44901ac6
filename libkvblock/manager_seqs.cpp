// The sequence table: pooled Sequence objects looked up by id (open addressing), created and dropped
// without allocating on the warm path; each sequence carries one GroupTable per KV cache group.
#include <algorithm>
#include <cinttypes>

#include "error.h"
#include "manager.h"

namespace kvb {

Sequence* Manager::find_seq(int64_t id) {
  long pos = seqs_.table.find(mix64(static_cast<uint64_t>(id)), [&](const SequenceTable::Slot& s) { return s.id == id; });
  return pos < 0 ? nullptr : &seqs_.pool[seqs_.table.at(static_cast<size_t>(pos)).index];
}

const Sequence* Manager::find_seq_const(int64_t id) const {
  return const_cast<Manager*>(this)->find_seq(id);
}

Sequence& Manager::seq(int64_t id) {
  Sequence* s = find_seq(id);
  if (!s) fail(Code::no_such_sequence, "no sequence with id %" PRId64, id);
  return *s;
}

Sequence& Manager::device_seq(int64_t id) {
  Sequence& s = seq(id);
  if (s.swapped) fail(Code::bad_state, "seq %" PRId64 " is swapped out; swap it in first", id);
  if (s.store_filling)
    fail(Code::bad_state, "seq %" PRId64 " is filling from the store (%u get%s in flight); kvb_store_poll until "
         "kvb_seq_store_state reports none", id, s.store_filling, s.store_filling == 1 ? "" : "s");
  return s;
}

Sequence& Manager::new_seq(int64_t id) {
  if (find_seq(id)) fail(Code::sequence_exists, "sequence id %" PRId64 " already exists", id);
  // Reserve everything first so that nothing below can fail half-way.
  seqs_.table.grow_for(seqs_.live + 1);
  if (seqs_.free_slots.empty()) {
    if (seqs_.pool.size() == seqs_.pool.capacity()) {  // geometric growth: pooled sequences move rarely
      seqs_.pool.reserve(std::max<size_t>(16, 2 * seqs_.pool.capacity()));
      seqs_.free_slots.reserve(seqs_.pool.capacity());  // drop_seq relies on room for every slot
    }
    seqs_.pool.emplace_back();
    seqs_.free_slots.push_back(static_cast<uint32_t>(seqs_.pool.size() - 1));
  }
  // A new pooled object gets its group tables once (before any change); a reused one has them already.
  if (seqs_.pool[seqs_.free_slots.back()].groups.size() != groups_.count)
    seqs_.pool[seqs_.free_slots.back()].groups.resize(groups_.count);
  uint32_t slot = seqs_.free_slots.back();
  seqs_.free_slots.pop_back();
  seqs_.table.insert(mix64(static_cast<uint64_t>(id)), SequenceTable::Slot{id, slot});
  // A reused slot starts empty; its buffers keep their capacity (no allocation on a warm pool).
  Sequence& s = seqs_.pool[slot];
  s.id = id;
  s.live = true;
  s.swapped = false;
  s.tree_nodes = 0;
  s.num_tokens = s.num_computed = s.num_cached = 0;
  s.extra_keys.clear();
  s.store_filling = 0;
  s.store_serial = 0;
  for (uint32_t g = 0; g < groups_.count; ++g) {
    GroupTable& t = s.groups[g];
    t.group = g;
    t.table.clear();
    t.host_table.clear();
    t.num_hashed = 0;
    t.uncacheable_from = kNoBlockIndex;
    t.chain = t.first_link = ChainLink{};
    t.window = t.sink = t.window_next = 0;
    t.released_links.clear();
    t.released_blocks.clear();
  }
  ++seqs_.live;
  return s;
}

void Manager::drop_seq(Sequence& s) {
  long pos = seqs_.table.find(mix64(static_cast<uint64_t>(s.id)), [&](const SequenceTable::Slot& e) { return e.id == s.id; });
  seqs_.table.erase(static_cast<size_t>(pos));
  s.live = false;
  seqs_.free_slots.push_back(static_cast<uint32_t>(&s - seqs_.pool.data()));  // capacity reserved in new_seq
  --seqs_.live;
}

// ---- free, queries ------------------------------------------------------------------------------

void Manager::free_seq(int64_t id) {
  Sequence& s = seq(id);
  if (s.swapped) {
    release_swapped(s);
    for (const GroupTable& t : s.groups)  // its parked blocks (if any) age from now on
      for (size_t i = t.released_blocks.size(); i-- > 0;) requeue_released(t.released_blocks[i], id);
  } else if (!cfg_.groups.empty()) {
    free_group_blocks(s);  // every group's blocks age together (manager_groups.cpp)
  } else {
    // The one full group: the order free_group_blocks gives it (last block first), without its per-group
    // bookkeeping, which cost a miss 8 instructions per block (1%; docs/perf/manager.md, "Sequence split").
    const std::vector<int32_t>& table = s.groups[0].table;
    if (pending_.copies.empty()) {
      // release_block inline, its pending-copy test made once (nothing below adds a copy): the call per
      // block was a third of the miss path's free.
      for (size_t i = table.size(); i-- > 0;) {
        const int32_t b = table[i];
        if (b < 0) continue;
        BlockMeta& m = device_.pool.meta(b);
        if (--m.ref > 0) continue;
        device_.pool.push_tail(b);
        counters_.cached_free += m.indexed;
      }
    } else {
      for (size_t i = table.size(); i-- > 0;)
        if (table[i] >= 0) release_block(table[i]);
    }
  }
  drop_seq(s);
}

const std::vector<int32_t>& Manager::block_table(int64_t id, uint32_t group) {
  Sequence& s = seq(id);
  if (group >= groups_.count)
    fail(Code::invalid_argument, "group %u is out of range: the manager has %u group%s", group, groups_.count,
         plural_s(groups_.count));
  if (s.swapped) fail(Code::bad_state, "seq %" PRId64 " is swapped out: it has no device block table", id);
  return s.groups[group].table;
}

void Manager::set_extra_key(int64_t id, uint32_t block_index, uint64_t key) {
  Sequence& s = seq(id);
  if (block_index >= kMaxSeqBlocks)
    fail(Code::invalid_argument, "seq %" PRId64 ": block index %u: no sequence has more than %u blocks", id,
         block_index, kMaxSeqBlocks);
  if (block_index < s.groups[0].num_hashed)  // the same in every group
    fail(Code::bad_state, "seq %" PRId64 ": block %u is already committed and hashed", id, block_index);
  if (s.store_filling)  // its store blocks' bytes were found under their extra keys as they are
    fail(Code::bad_state, "seq %" PRId64 " is filling from the store; poll it first", id);
  auto it = std::lower_bound(s.extra_keys.begin(), s.extra_keys.end(), std::make_pair(block_index, uint64_t{0}),
                             [](const auto& a, const auto& b) { return a.first < b.first; });
  if (it != s.extra_keys.end() && it->first == block_index) it->second = key;
  else s.extra_keys.insert(it, std::make_pair(block_index, key));
}

}  // namespace kvb
