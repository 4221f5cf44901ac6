// The shared-prefix cost model (kernels/cascade_cost.h): which groups it keeps for given shapes, the
// description it hands the kernels (the original, a copy of the kept groups, or none), the policy
// field (ALWAYS, and AUTO for callers whose struct_size predates it), the CUDA bound, and the CPU
// constants of each vector path. That AUTO gives the plain kernel's results is tested with the kernels
// (tests/cpp/cascade_attention.cpp, test_auto_policy).
#include <cstddef>
#include <vector>

#include "../../kernels/cascade/cascade_cost.h"
#include "../../kernels/common/amx_cpu.h"
#include "../../kernels/common/simd_cpu.h"
#include "harness.h"

using namespace kvb::kern;

namespace {

const GroupCost kCost{0.30, 0.50, 64};

GroupShape decode_group(int64_t members, int64_t shared, int64_t own) {
  return GroupShape{members, shared, double(members) * double(own)};
}

// The CPU rows (64 sequences of 4,224 tokens): short shared parts lose, long ones win.
void test_decode_splits() {
  CHECK(!group_pays(kCost, decode_group(64, 32, 4192)));
  CHECK(!group_pays(kCost, decode_group(64, 256, 3968)));
  CHECK(!group_pays(kCost, decode_group(64, 1024, 3200)));
  CHECK(group_pays(kCost, decode_group(64, 2048, 2176)));  // 0.7 * 2048 * 64 >= 0.5 * 2176 * 64 + 64 * 64
  CHECK(group_pays(kCost, decode_group(64, 4096, 128)));
  // The header's worked example: 64 shared keys save less than the merges of two rows cost.
  CHECK(!group_pays(kCost, decode_group(2, 64, 7)));
  CHECK(group_pays(kCost, decode_group(2, 256, 7)));
  // The boundary: (1 - c) S = a o + m exactly.
  CHECK(group_pays(GroupCost{0.5, 0.5, 0}, decode_group(8, 100, 100)));
  CHECK(!group_pays(GroupCost{0.5, 0.5, 0}, decode_group(8, 100, 101)));
  // Nothing shared, no rows, or a product that costs what it saves: never.
  CHECK(!group_pays(kCost, decode_group(64, 0, 10)));
  CHECK(!group_pays(kCost, GroupShape{0, 512, 0}));
  CHECK(!group_pays(GroupCost{1.0, 0, 0}, decode_group(256, 16384, 1)));
}

// Extends weigh each member's own keys by its rows.
void test_rows_weigh_own_keys() {
  // One member with 16 rows and a long own part, another with 1 row: the long one dominates.
  CHECK(!group_pays(kCost, GroupShape{17, 512, 16.0 * 4000 + 1.0 * 10}));
  CHECK(group_pays(kCost, GroupShape{17, 512, 16.0 * 10 + 1.0 * 4000}));
}

struct Desc {
  std::vector<int32_t> start, members, shared;
  kvb_prefix_groups g;
  Desc(std::vector<int32_t> s, std::vector<int32_t> m, std::vector<int32_t> sh)
      : start(std::move(s)), members(std::move(m)), shared(std::move(sh)) {
    kvb_prefix_groups_init(&g);
    g.group_start = start.data();
    g.members = members.data();
    g.shared_blocks = shared.data();
    g.num_groups = uint32_t(shared.size());
    g.num_members = uint32_t(members.size());
  }
};

BatchShape batch(int64_t n, const int32_t* lens, const int32_t* qs = nullptr, int64_t max_len = 1 << 20) {
  BatchShape b;
  b.num_seqs = n;
  b.block_size = 16;
  b.max_len = max_len;
  b.seq_lens = lens;
  b.query_start = qs;
  return b;
}

// Three groups over 8 rows: the first and last pay, the middle one (1 block shared, long own parts) does not.
void test_kept_groups_copy() {
  Desc d({0, 2, 5, 7}, {0, 3, 1, 4, 6, 2, 5}, {64, 1, 32});
  const int32_t lens[8] = {64 * 16 + 5, 4000, 32 * 16 + 9, 64 * 16 + 7, 4000, 32 * 16 + 1, 4100, 77};
  const KeptGroups k(d.g, kCost, batch(8, lens));
  const kvb_prefix_groups* u = k.get();
  CHECK(u != nullptr && u != &d.g);
  if (!u) return;
  CHECK(u->num_groups == 2 && u->num_members == 4);
  CHECK(u->group_start[0] == 0 && u->group_start[1] == 2 && u->group_start[2] == 4);
  CHECK(u->members[0] == 0 && u->members[1] == 3 && u->members[2] == 2 && u->members[3] == 5);
  CHECK(u->shared_blocks[0] == 64 && u->shared_blocks[1] == 32);
  CHECK(u->struct_size == d.g.struct_size && u->policy == d.g.policy);
  // The caller's description is untouched.
  CHECK(d.g.num_groups == 3 && d.start[3] == 7 && d.members[2] == 1);
}

void test_all_none_always() {
  Desc d({0, 3}, {0, 1, 2}, {100});
  const int32_t long_own[3] = {1600 + 9000, 1600 + 8000, 1600 + 7000}, short_own[3] = {1601, 1610, 1700};
  {
    const KeptGroups k(d.g, kCost, batch(3, short_own));
    CHECK(k.get() == &d.g);  // every group kept: the description itself
  }
  {
    const KeptGroups k(d.g, kCost, batch(3, long_own));
    CHECK(k.get() == nullptr);  // none kept: the plain kernel
  }
  d.g.policy = KVB_PREFIX_GROUPS_ALWAYS;
  {
    const KeptGroups k(d.g, kCost, batch(3, long_own));
    CHECK(k.get() == &d.g);
  }
  // A caller whose struct_size predates the policy field gets AUTO, whatever lies beyond its struct.
  d.g.struct_size = uint32_t(offsetof(kvb_prefix_groups, policy));
  {
    const KeptGroups k(d.g, kCost, batch(3, long_own));
    CHECK(k.get() == nullptr);
  }
}

// query_start gives each member's rows: a member with many rows and a long own part tips the group over.
void test_query_rows() {
  Desc d({0, 2}, {0, 1}, {32});
  const int32_t lens[2] = {512 + 1000, 512 + 10};
  const int32_t one_row[3] = {0, 1, 2}, many_rows[3] = {0, 40, 41};
  const KeptGroups a(d.g, kCost, batch(2, lens, one_row));
  CHECK(a.get() == &d.g);  // 2 rows: 0.7 * 512 * 2 = 717 >= 0.5 * 1010 + 64 * 2 = 633
  const KeptGroups b(d.g, kCost, batch(2, lens, many_rows));
  CHECK(b.get() == nullptr);  // 41 rows: 0.7 * 512 * 41 = 14,694 < 0.5 * (40 * 1000 + 10) + 64 * 41 = 22,629
}

// CUDA: no seq_lens, every length at max_len (an upper bound): a group kept with the true lengths can be
// dropped with the bound, never the reverse.
void test_cuda_bound() {
  Desc d({0, 4}, {0, 1, 2, 3}, {64});
  const int32_t lens[4] = {1100, 1100, 1100, 1100};
  const KeptGroups exact(d.g, kCost, batch(4, lens, nullptr, 1100));
  CHECK(exact.get() == &d.g);
  const KeptGroups bound_short(d.g, kCost, batch(4, nullptr, nullptr, 1100));
  CHECK(bound_short.get() == &d.g);
  const KeptGroups bound_long(d.g, kCost, batch(4, nullptr, nullptr, 64 * 16 + 8000));
  CHECK(bound_long.get() == nullptr);
}

// A description the kernels will refuse is handed on whole (their checks name the bad value).
void test_invalid_passed_on() {
  const int32_t lens[4] = {5000, 5000, 5000, 5000};
  Desc out_of_range({0, 2}, {0, 9}, {1});
  CHECK(KeptGroups(out_of_range.g, kCost, batch(4, lens)).get() == &out_of_range.g);
  Desc bad_start({1, 2}, {0, 1}, {1});
  CHECK(KeptGroups(bad_start.g, kCost, batch(4, lens)).get() == &bad_start.g);
  Desc too_many_blocks({0, 2}, {0, 1}, {1000});
  CHECK(KeptGroups(too_many_blocks.g, kCost, batch(4, lens, nullptr, 5000)).get() == &too_many_blocks.g);
  Desc negative({0, 2}, {0, 1}, {-1});
  CHECK(KeptGroups(negative.g, kCost, batch(4, lens)).get() == &negative.g);
  Desc null_members({0, 2}, {0, 1}, {1});
  null_members.g.members = nullptr;
  CHECK(KeptGroups(null_members.g, kCost, batch(4, lens)).get() == &null_members.g);
}

// Each CPU path's constants keep the long-shared row and drop its short-shared rows.
void test_cpu_constants() {
  namespace simd = cpu::simd;
  namespace amx = cpu::amx;
  const simd::Isa start = simd::isa();
  const bool amx_start = amx::active();
  for (int isa = 0; isa < simd::kNumIsas; ++isa)
    for (bool tiles : {false, true}) {
      if (!simd::force_isa(simd::Isa(isa))) continue;
      if (tiles && (simd::Isa(isa) != simd::Isa::avx512 || !amx::supported())) continue;
      amx::force(tiles);
      const GroupCost k = cpu_group_cost();
      CHECK(k.shared_row_key > 0 && k.own_key_extra >= 0 && k.merge_row >= 0);
      CHECK(!group_pays(k, decode_group(64, 32, 4192)));
      CHECK(!group_pays(k, decode_group(64, 256, 3968)));
      CHECK(!group_pays(k, decode_group(64, 1024, 3200)));
      CHECK(group_pays(k, decode_group(64, 4096, 128)));
    }
  simd::force_isa(start);
  amx::force(amx_start);
  const GroupCost g = cuda_group_cost();
  CHECK(group_pays(g, decode_group(256, 16384, 256)));
  CHECK(!group_pays(g, decode_group(64, 32, 4192)));
}

}  // namespace

int main() {
  RUN_TEST(test_decode_splits);
  RUN_TEST(test_rows_weigh_own_keys);
  RUN_TEST(test_kept_groups_copy);
  RUN_TEST(test_all_none_always);
  RUN_TEST(test_query_rows);
  RUN_TEST(test_cuda_bound);
  RUN_TEST(test_invalid_passed_on);
  RUN_TEST(test_cpu_constants);
  TEST_SUMMARY();
}
