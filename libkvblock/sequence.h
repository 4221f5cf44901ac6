// One sequence's state. Sequence objects are pooled by the manager and reused, so their vectors keep
// their capacity and the decode path does not allocate.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "hash.h"

namespace kvb {

constexpr uint32_t kNoBlockIndex = UINT32_MAX;

struct Sequence {
  int64_t id = 0;
  bool live = false;
  bool swapped = false;            // blocks live in host_table, table holds -1 placeholders
  std::vector<int32_t> table;      // device block per block index; -1 = released by the window
  std::vector<int32_t> host_table; // host block per block index while swapped (-1 = none)
  uint64_t num_tokens = 0;
  uint64_t num_computed = 0;       // tokens whose K/V are written
  uint64_t num_cached = 0;         // prefix-hit tokens at allocation
  uint32_t num_hashed = 0;         // blocks already considered for the index (refmodel "hashed")
  uint32_t uncacheable_from = kNoBlockIndex;  // first block that broke the chain (non-cacheable token)
  ChainLink chain;                 // what block num_hashed's hash is chained to
  ChainLink first_link;            // none, or the cache salt
  std::vector<std::pair<uint32_t, uint64_t>> extra_keys;  // (block index, key), sorted by index
  uint32_t window = 0, sink = 0;   // sliding window; window == 0: off
  uint64_t export_epoch = 0;       // batch_export call that last listed this sequence (duplicate check)
  size_t export_index = 0;         // ... and where in seq_ids
  uint32_t window_next = 0;        // next block index the window may release
  // Chain links of released blocks whose next block is still held: rollback or fork_at into that next
  // block must hash it again, and the released block's metadata may be reused by then. Few entries
  // (one per released -> held boundary), kept sorted by block index.
  std::vector<std::pair<uint32_t, ChainLink>> released_links;
  // With KV cache groups only: the cached blocks this window group released while the sequence runs,
  // sorted by block index. They are parked, and freeing the sequence moves those still cached to the
  // tail of the free queue with the rest of the sequence (Manager::free_group_blocks). The key tells
  // whether the block still holds that content.
  struct ReleasedBlock {
    uint32_t index;
    int32_t block;
    Key128 key;
  };
  std::vector<ReleasedBlock> released_blocks;
  // KV cache groups (kvb_config.groups): this object is group 0; more[g - 1] is group g, with its own
  // table, chain (keyed by its group) and window. Token counts are kept equal in every group. Empty when
  // the manager has a single group, so that case runs exactly the single-table code.
  uint32_t group = 0;
  std::vector<Sequence> more;
  // Store tier: gets in flight for this sequence (while > 0 it is "filling": nothing may run, commit,
  // export, fork or swap it), and the allocation it belongs to (a freed id may come back).
  uint32_t store_filling = 0;
  uint64_t store_serial = 0;

  uint32_t num_blocks() const { return static_cast<uint32_t>(table.size()); }
  const ChainLink* released_link(uint32_t block_index) const {
    for (const auto& e : released_links)
      if (e.first == block_index) return &e.second;
    return nullptr;
  }
  ExtraKey extra_key(uint32_t block_index) const {
    // Few entries per sequence (images, LoRA): a linear scan beats a map.
    for (const auto& e : extra_keys)
      if (e.first == block_index) return ExtraKey{true, e.second};
    return ExtraKey{};
  }
};

}  // namespace kvb
