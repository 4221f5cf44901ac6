// One sequence's state: what the sequence is (id, location, token counts) in Sequence, and one
// GroupTable per KV cache group (its block table, hash chain and window). A manager without groups has
// exactly one group, a full-attention one, so every operation runs the same per-group code whatever
// the configuration, and nothing that belongs to the sequence is kept twice. Sequence objects are pooled
// by the manager and reused, so their vectors (the groups' included) keep their capacity and the decode
// path does not allocate.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "hash.h"

namespace kvb {

constexpr uint32_t kNoBlockIndex = UINT32_MAX;

// A sequence's blocks in one KV cache group. Every group of a sequence has as many table entries (its
// tokens' blocks); they differ in which blocks they hold (a window group releases those its queries no
// longer reach) and in their keys (a group's chain is keyed by its group).
struct GroupTable {
  uint32_t group = 0;              // its index in the manager's groups
  std::vector<int32_t> table;      // device block per block index; -1 = released by the window
  std::vector<int32_t> host_table; // host block per block index while swapped (-1 = none)
  uint32_t num_hashed = 0;         // blocks already considered for the index (refmodel "hashed")
  uint32_t uncacheable_from = kNoBlockIndex;  // first block that broke the chain (non-cacheable token)
  ChainLink chain;                 // what block num_hashed's hash is chained to
  ChainLink first_link;            // none, or the cache salt (keyed by the group)
  uint32_t window = 0, sink = 0;   // sliding window; window == 0: off
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

  const ChainLink* released_link(uint32_t block_index) const {
    for (const auto& e : released_links)
      if (e.first == block_index) return &e.second;
    return nullptr;
  }
};

// 128 bytes, aligned to a cache line: finding a pooled sequence by slot is then a shift (at 120 bytes, a
// multiply sequence that cost every decode call 3 instructions), and one never straddles more lines
// than it fills.
struct alignas(64) Sequence {
  int64_t id = 0;
  bool live = false;
  bool swapped = false;            // every group's blocks live in its host_table, its table holds -1 placeholders
  uint8_t tree_nodes = 0;          // nodes of a pending token tree (tree.h; its shape is kept by the manager)
  uint64_t num_tokens = 0;
  uint64_t num_computed = 0;       // tokens whose K/V are written
  uint64_t num_cached = 0;         // prefix-hit tokens at allocation
  std::vector<std::pair<uint32_t, uint64_t>> extra_keys;  // (block index, key), sorted by index
  uint64_t export_epoch = 0;       // batch_export call that last listed this sequence (duplicate check)
  size_t export_index = 0;         // ... and where in seq_ids
  // Store tier: gets in flight for this sequence (while > 0 it is "filling": nothing may run, commit,
  // export, fork or swap it), and the allocation it belongs to (a freed id may come back).
  uint32_t store_filling = 0;
  uint64_t store_serial = 0;
  // One per KV cache group of the manager, group g at index g; one (a full-attention group) when the
  // manager has no groups configured.
  std::vector<GroupTable> groups;

  uint32_t num_blocks() const { return static_cast<uint32_t>(groups[0].table.size()); }  // in every group
  // The options' extra keys (blocks in increasing order), at allocation; may throw bad_alloc.
  void set_extra_keys(const uint32_t* blocks, const uint64_t* keys, size_t n) {
    extra_keys.clear();
    extra_keys.reserve(n);
    for (size_t i = 0; i < n; ++i) extra_keys.emplace_back(blocks[i], keys[i]);
  }
  ExtraKey extra_key(uint32_t block_index) const {
    // Few entries per sequence (images, LoRA): a linear scan beats a map.
    for (const auto& e : extra_keys)
      if (e.first == block_index) return ExtraKey{true, e.second};
    return ExtraKey{};
  }
};
static_assert(sizeof(Sequence) == 128, "Sequence: see the comment above it");

}  // namespace kvb
