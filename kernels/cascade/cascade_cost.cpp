// The shared-prefix cost model (cascade_cost.h) and its constants per device.
#include "cascade_cost.h"

#include <algorithm>
#include <cstddef>

#include "../common/amx_cpu.h"
#include "../common/simd_cpu.h"

namespace kvb {
namespace kern {

// Fitted to `kvblock bench --only cascade` (the sweep of shared / own splits of 64 x 4,224 tokens, the
// ALWAYS column against plain; docs/perf/kernels_cpu.md, "When grouping pays"): the grouped call's own
// keys cost about 2.2x the plain kernel's (a = 1.2: its items walk one kv head at a time), and a shared
// key of one row about 0.3 of a plain one with AMX tiles (0.06-0.38 over the sweep). AVX2: a = 0.6-0.8,
// c = 0.33-0.48. AVX-512 without tiles: a = 1.05-1.4, c = 0.32-0.62. Portable path (its plain decode is
// compute-bound, so grouping pays sooner): a = 0.4, c = 0.2-0.28. The constants lean towards the plain kernel, so that a group
// kept near the break-even point still runs no slower than plain within the run-to-run noise.
GroupCost cpu_group_cost() {
  using cpu::simd::Isa;
  if (cpu::amx::active()) return GroupCost{0.35, 1.2, 64};
  switch (cpu::simd::isa()) {
    case Isa::avx512bf16:  // the cascade tiles run the AVX-512 code there (fitted on avx512 only)
    case Isa::avx512: return GroupCost{0.55, 1.2, 64};
    case Isa::avx2: return GroupCost{0.45, 0.9, 64};
    default: return GroupCost{0.35, 0.5, 64};
  }
}

// Not measured (no GPU here): the shared product on tensor cores costs a small fraction of a plain
// row-key, the own part runs a kernel like the plain one, and a merge per row.
GroupCost cuda_group_cost() { return GroupCost{0.25, 0.15, 64}; }

bool group_pays(const GroupCost& k, const GroupShape& g) {
  if (g.rows <= 0 || g.shared_tokens <= 0 || k.shared_row_key >= 1.0) return false;  // nothing saved
  const double R = double(g.rows);
  return (1.0 - k.shared_row_key) * double(g.shared_tokens) * R >= k.own_key_extra * g.own_row_keys + k.merge_row * R;
}

uint32_t policy_of(const kvb_prefix_groups& g) {
  return g.struct_size >= offsetof(kvb_prefix_groups, policy) + sizeof(uint32_t) ? g.policy : uint32_t(KVB_PREFIX_GROUPS_AUTO);
}

KeptGroups::KeptGroups(const kvb_prefix_groups& g, const GroupCost& k, const BatchShape& b) : view_(g) {
  use_ = &g;
  if (policy_of(g) == KVB_PREFIX_GROUPS_ALWAYS) return;
  const int64_t G = g.num_groups;
  if (!g.group_start || !g.members || !g.shared_blocks || g.group_start[0] != 0) return;
  for (int64_t gi = 0; gi < G; ++gi)  // a partition of rows in range (else the kernel's checks refuse it)
    if (g.group_start[gi + 1] <= g.group_start[gi] || g.group_start[gi + 1] > b.num_seqs || g.shared_blocks[gi] < 0 ||
        int64_t(g.shared_blocks[gi]) * b.block_size > b.max_len)
      return;
  for (int64_t i = 0; i < g.group_start[G]; ++i)
    if (g.members[i] < 0 || g.members[i] >= b.num_seqs) return;
  bool all = true;
  for (int64_t gi = 0; gi < G; ++gi) {
    GroupShape s;
    s.shared_tokens = int64_t(g.shared_blocks[gi]) * b.block_size;
    for (int64_t i = g.group_start[gi]; i < g.group_start[gi + 1]; ++i) {
      const int64_t row = g.members[i];
      const int64_t q = b.query_start ? int64_t(b.query_start[row + 1]) - b.query_start[row] : 1;
      const int64_t len = b.seq_lens ? b.seq_lens[row] : b.max_len;
      s.rows += q;
      s.own_row_keys += double(q) * double(std::max<int64_t>(0, len - s.shared_tokens));
    }
    if (!group_pays(k, s)) {
      all = false;
      continue;
    }
    members_.insert(members_.end(), g.members + g.group_start[gi], g.members + g.group_start[gi + 1]);
    shared_blocks_.push_back(g.shared_blocks[gi]);
    group_start_.push_back(int32_t(members_.size()));
  }
  if (all) return;
  use_ = nullptr;
  if (shared_blocks_.empty()) return;
  view_.group_start = group_start_.data();
  view_.members = members_.data();
  view_.shared_blocks = shared_blocks_.data();
  view_.num_groups = uint32_t(shared_blocks_.size());
  view_.num_members = uint32_t(members_.size());
  use_ = &view_;
}

}  // namespace kern
}  // namespace kvb
