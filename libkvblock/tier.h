// One tier of blocks, the device's or the host's. Both keep the same things per block (metadata and
// tokens, a queue, an index from key to block, the event bookkeeping), so both are this one type,
// instantiated twice in Manager (device_, host_): a helper written for one tier works for the other.
// What only one tier has (the device's parked blocks, the host's empty stack and twins) stays beside it.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "block_pool.h"
#include "hash_counts.h"
#include "prefix_index.h"

namespace kvb {

// A block's parent as events report it (kept only when events are on).
struct ParentRef {
  uint64_t hash = 0;
  uint8_t kind = 0;
};

struct Tier {
  Tier(uint32_t num_blocks, uint32_t block_size, uint32_t index_slots_per_block, const char* pool_name,
       const char* index_name)
      : pool(num_blocks, block_size, pool_name), index(pool, index_slots_per_block, index_name) {}
  Tier(const Tier&) = delete;  // the index refers to the pool
  Tier& operator=(const Tier&) = delete;

  // The KV cache group of block b's indexed content (0 when the manager has one group).
  uint32_t group_of(int32_t b) const { return group.empty() ? 0 : group[b]; }

  BlockPool pool;  // the device's queue is the free queue; the host's holds its cached blocks, LRU first
  PrefixIndex index;
  // (group, public hash) counts of indexed blocks, when events are on (one table for every group; the
  // host's only with the host cache).
  std::unique_ptr<HashCounts> hashes;
  std::vector<uint8_t> group;       // group of each block's indexed content (only with groups)
  std::vector<ParentRef> parents;   // per block, when events are on
};

}  // namespace kvb
