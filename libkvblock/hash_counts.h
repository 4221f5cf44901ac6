// Public hash -> number of indexed blocks that carry it. Two blocks with different histories can share
// a public xxh64 hash (the index keeps them apart by key); events speak in public hashes, so they
// describe the set of hashes the cache holds: STORED when a hash's count leaves 0, REMOVED when it
// returns to 0. Used only when events are on; sized once, so counting never allocates.
#pragma once
#include <cstddef>
#include <cstdint>

#include "open_table.h"

namespace kvb {

class HashCounts {
 public:
  explicit HashCounts(size_t max_entries) : table_(max_entries, Traits{}), max_entries_(max_entries) {}

  // Counts one more block with hash h; true if h was absent before.
  bool add(uint64_t h) {
    bool found = false;
    size_t pos = table_.find_or_empty(mix64(h), [&](const Slot& s) { return s.hash == h; }, &found);
    if (found) {
      ++table_.at(pos).count;
      return false;
    }
    table_.occupy(pos, Slot{h, 1});
    return true;
  }
  // Counts one block less with hash h (which must be counted); true if h is now absent.
  bool remove(uint64_t h) {
    long pos = table_.find(mix64(h), [&](const Slot& s) { return s.hash == h; });
    if (pos < 0) return true;  // not counted: nothing to keep alive
    Slot& s = table_.at(static_cast<size_t>(pos));
    if (--s.count > 0) return false;
    table_.erase(static_cast<size_t>(pos));
    return true;
  }
  uint32_t count(uint64_t h) const {
    long pos = table_.find(mix64(h), [&](const Slot& s) { return s.hash == h; });
    return pos < 0 ? 0 : table_.at(static_cast<size_t>(pos)).count;
  }
  size_t size() const { return table_.size(); }
  void clear() { table_.reset(max_entries_); }

 private:
  struct Slot {
    uint64_t hash;
    uint32_t count;  // 0 = empty slot
  };
  struct Traits {
    static Slot empty() { return Slot{0, 0}; }
    static bool is_empty(const Slot& s) { return s.count == 0; }
    uint64_t home(const Slot& s) const { return mix64(s.hash); }
  };
  OpenTable<Slot, Traits> table_;
  size_t max_entries_;
};

}  // namespace kvb
