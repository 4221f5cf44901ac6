// Slot copy (kvb_copy_slots: token-tree compaction within a cache): the validated, grouped form and the
// two back ends (copy_slots_capi.cpp is the C boundary).
#pragma once
#include <cstdint>
#include <vector>

#include "../common/types.h"

namespace kvb {
namespace kern {

// Most pairs linked through their slots (one reads the slot another writes) that one CUDA thread block
// copies at once; a token tree (at most 64 nodes) compacts with at most 63 pairs.
constexpr int64_t kMaxSlotGroup = 64;

// Pairs ordered by group: group g is pairs [group_start[g], group_start[g + 1]), and no slot a pair of
// one group writes is read or written by another group, so groups run in any order or in parallel.
struct SlotCopy {
  const Cache* layers = nullptr;  // [num_layers], same shape, strides and device
  int64_t num_layers = 0;
  std::vector<int64_t> pairs;        // [2 * n]: source slot, destination slot
  std::vector<int32_t> group_start;  // [num_groups + 1]
  // [num_groups]: 1 when no pair of the group reads a slot an earlier pair of it writes, so copying the
  // pairs one after another in their order reads every source before it is overwritten (a compaction's
  // pairs, listed by destination, are such a group); 0: the group's sources must be read first.
  std::vector<uint8_t> in_order;
  int64_t largest_group = 0;
};

// Checks the host pairs against num_slots (invalid_argument naming the pair) and groups them.
SlotCopy plan_slot_copy(const int64_t* pairs, size_t num_pairs, int64_t num_slots);

namespace cpu {
void copy_slots(const SlotCopy& s);
}
namespace cuda {
void copy_slots(const SlotCopy& s, void* stream);  // unsupported without nvcc
}

}  // namespace kern
}  // namespace kvb
