// The manager's sequences: pooled Sequence objects, found by id through an open-addressing table of
// (id, slot). Objects are reused (their vectors keep their capacity), so creating and dropping a
// sequence on a warm pool allocates nothing. Behaviour lives in manager_seqs.cpp.
#pragma once
#include <cstdint>
#include <vector>

#include "hash.h"
#include "open_table.h"
#include "sequence.h"

namespace kvb {

struct SequenceTable {
  struct Slot {
    int64_t id;
    uint32_t index;  // into pool
  };
  struct Traits {
    static Slot empty() { return Slot{0, UINT32_MAX}; }
    static bool is_empty(const Slot& s) { return s.index == UINT32_MAX; }
    uint64_t home(const Slot& s) const { return mix64(static_cast<uint64_t>(s.id)); }
  };

  SequenceTable() : table(64, Traits{}, "the sequence table") {}

  OpenTable<Slot, Traits> table;
  std::vector<Sequence> pool;         // live and free objects; a live one's slot is its index here
  std::vector<uint32_t> free_slots;   // room for every slot is reserved (drop_seq cannot fail)
  size_t live = 0;
  uint64_t export_epoch = 0;  // batch_export calls so far (marks sequences to find duplicate ids)
};

}  // namespace kvb
