// When shared-prefix attention pays: the per-group cost model of kvb_prefix_groups (abi/kvblock.h, "When
// grouping pays") and the description reduced to the groups it keeps. The kernel launches (CPU and CUDA,
// kernels/capi_cascade.cpp) apply it to every description whose policy is KVB_PREFIX_GROUPS_AUTO.
#pragma once
#include <cstdint>
#include <vector>

#include "../../abi/kvblock.h"

namespace kvb {
namespace kern {

// A device's constants, each relative to one key of one query row in the plain kernel.
struct GroupCost {
  double shared_row_key = 1;  // c: one row and one shared key in the grouped product
  double own_key_extra = 0;   // a: the extra cost of one own key (the grouped call's walk of them)
  double merge_row = 0;       // m: the merge of one row, in keys
};

// The CPU's constants for its current vector path (AMX tiles, AVX-512, AVX2, portable).
GroupCost cpu_group_cost();
// CUDA's (not measured: estimates on the same model).
GroupCost cuda_group_cost();

// One group: R query rows (its members' q_len summed), S shared tokens, and sum_i q_i * o_i over its
// members (member i's rows times its own tokens after the shared ones).
struct GroupShape {
  int64_t rows = 0;
  int64_t shared_tokens = 0;
  double own_row_keys = 0;
};

// (1 - c) * S * R >= a * sum_i(q_i * o_i) + m * R.
bool group_pays(const GroupCost& k, const GroupShape& g);

// A batch as the model sees it: seq_lens NULL = every row's length taken as max_len (CUDA: an upper
// bound); query_start NULL = one query row per sequence.
struct BatchShape {
  int64_t num_seqs = 0, block_size = 0, max_len = 0;
  const int32_t* seq_lens = nullptr;
  const int32_t* query_start = nullptr;
};

// The groups of `g` the model keeps. The caller has checked `g` against the batch where seq_lens is
// given (every member a row in [0, num_seqs)); without seq_lens a description whose group_start is not
// a valid partition of at most num_seqs members is kept whole (the kernel's own checks then refuse it).
class KeptGroups {
 public:
  KeptGroups(const kvb_prefix_groups& g, const GroupCost& k, const BatchShape& b);
  KeptGroups(const KeptGroups&) = delete;  // get() may point into this object
  KeptGroups& operator=(const KeptGroups&) = delete;
  // The description to run: `g` itself when every group is kept (or its policy is ALWAYS), a copy of
  // the kept groups, or NULL when none is kept (the plain kernel).
  const kvb_prefix_groups* get() const { return use_; }

 private:
  std::vector<int32_t> group_start_{0}, members_, shared_blocks_;
  kvb_prefix_groups view_;
  const kvb_prefix_groups* use_ = nullptr;
};

// The policy of `g` (AUTO when its struct_size does not cover the field).
uint32_t policy_of(const kvb_prefix_groups& g);

}  // namespace kern
}  // namespace kvb
