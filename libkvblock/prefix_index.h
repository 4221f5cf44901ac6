// hash -> block id for cached blocks. Slots hold a 32-bit fingerprint (the key's high 32 bits, which
// also choose the slot) and the block id: 8 bytes. The full 128-bit key is read from the block's
// metadata only when a fingerprint matches; moving slots on erase needs no metadata at all.
//
// The table has at least `slots_per_block` slots per pool block (a power of two in all), so its load
// never passes 1 / slots_per_block. The device index keeps it at 1/8 or less (64 to 128 bytes per
// block): a full pool (a server's steady state) has every block cached, every prompt block that misses
// erases the slot of the block it evicts and puts its own, and at a load of 1/2 those probes and the
// erase's backward shift ran over clusters of 2 to 3 slots, with a mispredicted loop exit each; on a pool
// whose index does not fit the caches, a mispredict that waits on a slot still loading stalls the loop
// for that load. `kvblock bench` miss on a full 2^20-block pool: 84-96 / 70-77 / 65-71 ns per block at
// 1/2 / 1/4 / 1/8. What a larger table costs is footprint where the pool is mostly empty (the entries
// spread over more lines than the caches hold): the replay of the full Mooncake trace on a pool three
// times its content took 0.64 / 0.75 / 1.15 s, until the prefix lookup stopped waiting on each hit's
// metadata (Manager::link_to): 0.55 / 0.61-0.65 s at 1/4 / 1/8 (docs/perf/manager.md). The host index,
// off the miss path and over pools that may be much larger, keeps 2 (16 to 32 bytes per block).
#pragma once
#include <cstdint>

#include "block_pool.h"
#include "open_table.h"

namespace kvb {

// The key's high 32 bits: stored in the slot, and the start of its probe sequence.
inline uint32_t fingerprint_of(const Key128& key) { return static_cast<uint32_t>(key.lo >> 32); }

struct IndexSlot {
  uint32_t fingerprint;
  int32_t block;  // -1 = empty
};

class PrefixIndex {
 public:
  // OpenTable takes a capacity and sizes itself to twice it (load <= 1/2): half of slots_per_block.
  PrefixIndex(BlockPool& pool, uint32_t slots_per_block, const char* what)
      : table_(size_t{pool.num_blocks()} * slots_per_block / 2, Traits{}, what), pool_(pool) {}

  // The block indexed under key, or -1.
  int32_t find(const Key128& key) const {
    long pos = locate(key);
    return pos < 0 ? -1 : table_.at(static_cast<size_t>(pos)).block;
  }
  // Starts loading the slot where a lookup of key begins.
  void prefetch(const Key128& key) const { table_.prefetch(fingerprint_of(key)); }
  // Points key at block b (its meta key must equal key), replacing an older entry. Returns the block
  // that was replaced (-1 if none); the caller clears that block's `indexed` flag.
  int32_t put(const Key128& key, int32_t b);
  // Removes the entry for key if it points at b; key must be b's own (meta) key, under which b was put.
  // Returns whether it did.
  bool erase_if_points_to(const Key128& key, int32_t b);
  void clear() { table_.reset(table_.capacity() / 2); }  // the same capacity (OpenTable doubles what it is asked)
  size_t size() const { return table_.size(); }
  size_t capacity() const { return table_.capacity(); }
  const IndexSlot& slot(size_t pos) const { return table_.at(pos); }
  long locate(const Key128& key) const;

 private:
  struct Traits {
    static IndexSlot empty() { return IndexSlot{0, -1}; }
    static bool is_empty(const IndexSlot& s) { return s.block < 0; }
    uint64_t home(const IndexSlot& s) const { return s.fingerprint; }
  };
  OpenTable<IndexSlot, Traits> table_;
  BlockPool& pool_;
};

// Inline: the commit loop enters every block it hashes (out of line, the call was a fifth of the put).
inline int32_t PrefixIndex::put(const Key128& key, int32_t b) {
  const uint32_t fp = fingerprint_of(key);
  bool found = false;
  size_t pos = table_.find_or_empty(
      fp, [&](const IndexSlot& s) { return s.fingerprint == fp && pool_.meta(s.block).key == key; }, &found);
  if (!found) {
    table_.occupy(pos, IndexSlot{fp, b});
    return -1;
  }
  IndexSlot& s = table_.at(pos);
  int32_t old = s.block;
  s.block = b;
  return old;
}

}  // namespace kvb
