// The sliding window (docs/ARCHITECTURE.md, "Sliding window"): blocks no coming query can attend are
// released as the sequence grows, keeping the chain links a rollback or fork would need.
#include <algorithm>
#include <cinttypes>

#include "error.h"
#include "manager.h"

namespace kvb {

void Manager::set_window(int64_t id, uint32_t window, uint32_t sink) {
  Sequence& s = device_seq(id);
  if (grouped())
    fail(Code::bad_state, "seq %" PRId64 ": the manager has KV cache groups; windows come from each group's "
         "kvb_group_spec, not from kvb_seq_set_window", id);
  if (window == 0 && sink != 0) fail(Code::invalid_argument, "seq %" PRId64 ": sink_tokens %u given without a window", id, sink);
  GroupTable& t = s.groups[0];  // the one full group
  reserve_window_link(t, window);  // before any change
  t.window = window;
  t.sink = sink;
  // A smaller sink frees former sink blocks too: rescan from the new sink boundary (released slots are
  // skipped). Switching the window off releases nothing and keeps the scan position.
  if (window > 0) t.window_next = std::min(t.window_next, blocks_for(sink, bs_));
  apply_window(s, t);
}

void Manager::reserve_window_link(GroupTable& t, uint32_t window) {
  // apply_window adds at most one released link per call; reserving first keeps it allocation-free.
  if (window && t.released_links.size() == t.released_links.capacity())
    t.released_links.reserve(t.released_links.size() + 2);
  // With groups, released cached blocks are remembered (one entry per block index at most, so the
  // table's capacity bounds them; it grows geometrically, so this reserves rarely).
  if (window && grouped() && t.released_blocks.capacity() < t.table.capacity())
    t.released_blocks.reserve(t.table.capacity());
}

uint32_t Manager::window_first_block(uint32_t window, uint64_t p) const {
  return static_cast<uint32_t>((p + 1 > window ? p + 1 - window : 0) / bs_);
}

// After a rollback or fork_at leaving nb blocks with `computed` tokens computed, the query of position
// `computed` comes next and attends [computed + 1 - window, computed] (apply_window's rule), and the last
// block is written or read: the first of those blocks that the window already released, or kNoBlockIndex.
uint32_t Manager::first_released_needed(const GroupTable& t, uint64_t computed, uint32_t nb) const {
  uint32_t first = nb - 1;
  if (t.window != 0) first = std::min(first, window_first_block(t.window, computed));
  for (uint32_t i = first; i < nb; ++i)
    if (t.table[i] < 0) return i;
  return kNoBlockIndex;
}

void Manager::release_outside_window(const Sequence& s, GroupTable& t) {
  // The earliest query still to come is that of position num_computed (the first uncomputed token, or
  // the next one appended); it attends [num_computed + 1 - window, num_computed]. Blocks wholly before
  // that are released, past the sink, except the block of the last computed token, so that rolling
  // back every uncomputed token always leaves a held last block.
  const uint32_t end = std::min(window_first_block(t.window, s.num_computed),
                                static_cast<uint32_t>((s.num_computed - 1) / bs_));
  const uint32_t start = std::max(t.window_next, blocks_for(t.sink, bs_));
  for (uint32_t i = start; i < end; ++i) {
    int32_t b = t.table[i];
    if (b < 0) continue;
    // Keep the link of the released block while the next one is held (an entry persists only for the
    // last block of the loop: the next iteration drops it); the previous block's is no longer needed.
    auto& links = t.released_links;
    auto pos = links.begin();
    while (pos != links.end() && pos->first < i) {
      if (pos->first + 1 == i) pos = links.erase(pos);
      else ++pos;
    }
    if (i + 1 < t.table.size() && t.table[i + 1] >= 0) links.emplace(pos, i, link_after(device_.pool.meta(b)));
    // With groups, a cached block the window lets go of is parked: it ages with its sequence (see
    // Manager::free_blocks(Grouped)). Room for the entry was reserved by reserve_window_link.
    const bool park = grouped() && device_.pool.meta(b).indexed;
    if (park) t.released_blocks.push_back(GroupTable::ReleasedBlock{i, b, device_.pool.meta(b).key});
    release_block(b, park ? &s : nullptr);
    t.table[i] = -1;
  }
  t.window_next = std::max(start, end);
}

}  // namespace kvb
