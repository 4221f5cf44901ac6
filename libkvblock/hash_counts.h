// (KV cache group, public hash) -> number of indexed blocks of that group that carry the hash. Two blocks
// with different histories can share a public xxh64 hash (the index keeps them apart by key); events
// speak in public hashes and groups, so they describe the set of (group, hash) pairs the cache holds:
// STORED when a pair's count leaves 0, REMOVED when it returns to 0. One table for every group: a block
// belongs to one group at a time, so a medium of N blocks never needs more than N entries, however many
// groups there are. Used only when events are on; sized once, so counting never allocates.
#pragma once
#include <cstddef>
#include <cstdint>

#include "open_table.h"

namespace kvb {

class HashCounts {
 public:
  HashCounts(size_t max_entries, const char* what) : table_(max_entries, Traits{}, what), max_entries_(max_entries) {}

  // Counts one more block of group g with hash h; true if (g, h) was absent before.
  bool add(uint32_t g, uint64_t h) {
    bool found = false;
    size_t pos = table_.find_or_empty(home_of(g, h), [&](const Slot& s) { return s.hash == h && s.group == g; }, &found);
    if (found) {
      ++table_.at(pos).count;
      return false;
    }
    table_.occupy(pos, Slot{h, 1, g});
    return true;
  }
  // Counts one block less of group g with hash h (which must be counted); true if (g, h) is now absent.
  bool remove(uint32_t g, uint64_t h) {
    long pos = table_.find(home_of(g, h), [&](const Slot& s) { return s.hash == h && s.group == g; });
    if (pos < 0) return true;  // not counted: nothing to keep alive
    Slot& s = table_.at(static_cast<size_t>(pos));
    if (--s.count > 0) return false;
    table_.erase(static_cast<size_t>(pos));
    return true;
  }
  uint32_t count(uint32_t g, uint64_t h) const {
    long pos = table_.find(home_of(g, h), [&](const Slot& s) { return s.hash == h && s.group == g; });
    return pos < 0 ? 0 : table_.at(static_cast<size_t>(pos)).count;
  }
  size_t size() const { return table_.size(); }  // (group, hash) pairs, all groups together
  void clear() { table_.reset(max_entries_); }

 private:
  struct Slot {
    uint64_t hash;
    uint32_t count;  // 0 = empty slot
    uint32_t group;  // in the padding a 12-byte (hash, count) slot had anyway: still 16 bytes
  };
  // The same public hash in two groups lands on unrelated probe paths.
  static uint64_t home_of(uint32_t g, uint64_t h) { return mix64(h + g * 0x9e3779b97f4a7c15ULL); }
  struct Traits {
    static Slot empty() { return Slot{0, 0, 0}; }
    static bool is_empty(const Slot& s) { return s.count == 0; }
    uint64_t home(const Slot& s) const { return home_of(s.group, s.hash); }
  };
  OpenTable<Slot, Traits> table_;
  size_t max_entries_;
};

}  // namespace kvb
