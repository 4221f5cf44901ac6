// One tier of blocks, the device's or the host's. Both keep the same things per block (metadata and
// tokens, a queue, an index from key to block, the event bookkeeping), so both are this one type,
// instantiated twice in Manager (device_, host_): a helper written for one tier works for the other.
// A tier owns what goes with its index: a block entering or leaving it updates the KV cache group tag
// and count and, with events on, the (group, public hash) counts and the STORED / REMOVED records.
// What only one tier has (the device's parked blocks and free-queue counters, the host's empty stack
// and twins) stays in Manager.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "../abi/kvblock.h"
#include "block_pool.h"
#include "event_queue.h"
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
       const char* index_name, kvb_medium medium_)
      : pool(num_blocks, block_size, pool_name), index(pool, index_slots_per_block, index_name), medium(medium_) {}
  Tier(const Tier&) = delete;  // the index refers to the pool
  Tier& operator=(const Tier&) = delete;

  // The KV cache group of block b's indexed content (0 when the manager has one group).
  uint32_t group_of(int32_t b) const { return group.empty() ? 0 : group[b]; }
  ParentRef parent_of(int32_t b) const { return parents.empty() ? ParentRef{} : parents[b]; }

  // Block b's content (its metadata's key and hash) enters the index as group g's, with `parent` for its
  // STORED record. Returns the block that held the key before (-1 if none, b if b did: then nothing
  // changes); that block is no longer indexed. kPlain: the caller knows the manager has no KV cache
  // groups and no events (the plain miss path, which skips those tests per block).
  template <bool kPlain = false>
  int32_t enter(int32_t b, uint32_t g, const ParentRef& parent) {
    BlockMeta& m = pool.meta(b);
    const int32_t old = index.put(m.key, b);
    if (old == b) return b;
    if (!kPlain) {
      // Keys carry the group (the first link does), so a replaced block is always of the same group.
      if (!group.empty()) group[b] = static_cast<uint8_t>(g);
      if (!m.indexed && group_cached) ++group_cached[g];
      if (events) {
        parents[b] = parent;
        // The new block is counted before the one it replaces is uncounted: equal keys carry equal public
        // hashes, so replacing a block by a recomputed copy emits nothing.
        if (hashes->add(g, m.hash)) emit(KVB_EVENT_BLOCK_STORED, b);
      }
    }
    m.indexed = 1;
    if (old >= 0) {
      BlockMeta& o = pool.meta(old);
      o.indexed = 0;
      if (!kPlain) {
        if (group_cached) --group_cached[g];
        if (events && hashes->remove(g, o.hash)) emit(KVB_EVENT_BLOCK_REMOVED, old);
      }
    }
    return old;
  }
  // Indexed block b leaves the index (evicted, or its content changes): a REMOVED record when no indexed
  // block of its group carries its public hash any more.
  template <bool kPlain = false>
  void leave(int32_t b) {
    BlockMeta& m = pool.meta(b);
    index.erase_if_points_to(m.key, b);
    if (!kPlain) {
      if (m.indexed && group_cached) --group_cached[group_of(b)];
      if (events && hashes->remove(group_of(b), m.hash)) emit(KVB_EVENT_BLOCK_REMOVED, b);
    }
    m.indexed = 0;
  }
  // The whole index is emptied at once (a reset): b, one of its blocks, is no longer indexed (no record).
  void forget(int32_t b) {
    BlockMeta& m = pool.meta(b);
    if (m.indexed && group_cached) --group_cached[group_of(b)];
    m.indexed = m.has_hash = 0;
  }
  void clear_index() {  // after forget() of every indexed block
    index.clear();
    if (hashes) hashes->clear();
  }
  // The record of block b (STORED with its parent and tokens, REMOVED without); `as`: the medium it
  // names (the store's puts are recorded from the host block they read).
  void emit(kvb_event_type type, int32_t b, kvb_medium as) const;
  void emit(kvb_event_type type, int32_t b) const { emit(type, b, medium); }

  BlockPool pool;  // the device's queue is the free queue; the host's holds its cached blocks, LRU first
  PrefixIndex index;
  const kvb_medium medium;
  EventQueue* events = nullptr;  // when events are on (the manager's queue)
  // With KV cache groups: blocks indexed under each group, both tiers together (the manager's array: the
  // grouped lookup stops once a group has hit every block it has cached).
  uint32_t* group_cached = nullptr;
  // (group, public hash) counts of indexed blocks, when events are on (one table for every group; the
  // host's only with the host cache).
  std::unique_ptr<HashCounts> hashes;
  std::vector<uint8_t> group;       // group of each block's indexed content (only with several groups)
  std::vector<ParentRef> parents;   // per block, when events are on
};

}  // namespace kvb
