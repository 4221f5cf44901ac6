// A warm manager allocates nothing (issue 21 item 3: sequence objects are pooled, and each keeps its group
// tables and their capacity): the same workload run a second time on the same manager (allocate prompts
// that miss, commit them, decode token by token and in batches, verify token trees (append, export with
// tree masks, commit a path, drain the slot copies), fork, roll back, allocate a cached prompt, free
// everything) makes no call to operator new, without KV cache groups and with them (full and window
// groups). Counted with a global allocator that counts while a round runs (the library is linked
// statically into this binary).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <vector>

#include "harness.h"
#include "replace_new.h"

namespace {
bool g_counting = false;
long g_calls = 0;  // operator new calls while counting

void* counted_alloc(std::size_t n, std::size_t align) noexcept {
  if (g_counting) ++g_calls;
  return system_alloc(n, align);
}
}  // namespace

void* test_alloc(std::size_t n, std::size_t align) noexcept { return counted_alloc(n, align); }
void test_free(void* p) noexcept { std::free(p); }

namespace {

constexpr uint32_t kBlock = 16;
constexpr int kSeqs = 6;

// num_groups 0: no groups; else group 0 full, the others window groups of 40 tokens and 16 sinks.
kvb_manager* make(uint32_t num_groups) {
  std::vector<kvb_group_spec> specs(num_groups);
  for (uint32_t g = 0; g < num_groups; ++g) {
    kvb_group_spec_init(&specs[g]);
    if (g > 0) {
      specs[g].kind = KVB_GROUP_WINDOW;
      specs[g].window_tokens = 40;
      specs[g].sink_tokens = 16;
    }
  }
  kvb_config cfg;
  kvb_config_init(&cfg);
  cfg.block_size = kBlock;
  cfg.num_blocks = 1024;
  cfg.groups = num_groups ? specs.data() : nullptr;
  cfg.num_groups = num_groups;
  kvb_manager* m = nullptr;
  CHECK_OK(kvb_manager_create(&cfg, &m));
  return m;
}

// The workload's buffers, made before any round (the test's own allocations are not counted).
std::vector<int64_t> prompt(100), shared(64), toks(kSeqs);

// A 20-node draft tree (a bush under roots 0 and 1, a chain under root 12, a lone root 19) and the
// accepted paths: one moving nodes within the last block, one moving a node from a block past the path
// (held until the drain), one moving a chain down.
constexpr size_t kTreeNodes = 20;
const int32_t kParents[kTreeNodes] = {-1, -1, 0, 0, 1, 2, 2, 3, 5, 5, 6, 8, -1, 12, 13, 14, 15, 16, 17, -1};
const std::vector<int32_t> kPaths[3] = {{0, 2, 5, 8, 11}, {19}, {12, 13, 14, 15, 16, 17, 18}};
std::vector<int64_t> tree_toks(kTreeNodes), slots(kSeqs * kTreeNodes), slot_pairs(2 * 3 * kSeqs * kTreeNodes);
std::vector<uint64_t> masks(kSeqs * kTreeNodes);
std::vector<int32_t> depths(kTreeNodes), query_start(kSeqs + 1);

void tree_step(kvb_manager* m, const int64_t* ids, int64_t round) {
  for (int s = 0; s < kSeqs; ++s) {
    for (size_t i = 0; i < kTreeNodes; ++i) tree_toks[i] = round * 100000 + 70000 + s * 100 + static_cast<int64_t>(i);
    CHECK_OK(kvb_seq_append_tree(m, ids[s], tree_toks.data(), kParents, kTreeNodes, depths.data()));
  }
  kvb_batch b;
  kvb_batch_init(&b);
  b.query_start = query_start.data();
  b.slot_mapping = slots.data();
  b.tree_mask = masks.data();
  b.slot_capacity = slots.size();
  CHECK_OK(kvb_batch_export(m, ids, kSeqs, &b));
  for (int s = 0; s < kSeqs; ++s) CHECK_OK(kvb_seq_commit_tree(m, ids[s], kPaths[s % 3].data(), kPaths[s % 3].size()));
  size_t np = 0;
  CHECK_OK(kvb_drain_slot_copies(m, slot_pairs.data(), slot_pairs.size() / 2, &np));
  CHECK(np > 0);
}

// One round of the workload; `round` makes its prompts new (misses) while the shared prompt stays cached
// from the second round on.
void workload(kvb_manager* m, uint32_t num_groups, int64_t round) {
  int64_t ids[kSeqs];
  for (int s = 0; s < kSeqs; ++s) {
    ids[s] = s;
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = round * 100000 + s * 1000 + static_cast<int64_t>(i);
    kvb_seq_options o;
    kvb_seq_options_init(&o);
    if (num_groups == 0 && s % 2) o.window_tokens = 48;  // per-sequence windows without groups
    CHECK_OK(kvb_seq_allocate_ex(m, ids[s], prompt.data(), prompt.size(), &o, nullptr));
    CHECK_OK(kvb_seq_commit(m, ids[s], prompt.size()));
  }
  for (int t = 0; t < 40; ++t)  // decode, one call per sequence
    for (int s = 0; s < kSeqs; ++s) {
      const int64_t tok = round * 100000 + 50000 + t;
      CHECK_OK(kvb_seq_append(m, ids[s], &tok, 1));
      CHECK_OK(kvb_seq_commit(m, ids[s], 1));
    }
  for (int t = 0; t < 40; ++t) {  // decode, batched
    for (int s = 0; s < kSeqs; ++s) toks[s] = round * 100000 + 60000 + t;
    CHECK_OK(kvb_batch_append(m, ids, toks.data(), kSeqs));
    CHECK_OK(kvb_batch_commit(m, ids, nullptr, kSeqs));
  }
  CHECK_OK(kvb_seq_fork_at(m, ids[0], 100, 175));  // a child sharing the sequence but its last 5 tokens
  CHECK_OK(kvb_seq_rollback(m, 100, 3));
  CHECK_OK(kvb_seq_free(m, 100));
  tree_step(m, ids, round);
  for (size_t i = 0; i < shared.size(); ++i) shared[i] = 7000000 + static_cast<int64_t>(i);
  size_t cached = 0;
  CHECK_OK(kvb_seq_allocate(m, 200, shared.data(), shared.size(), &cached));
  CHECK_OK(kvb_seq_commit(m, 200, shared.size() - cached));
  CHECK_OK(kvb_seq_free(m, 200));
  for (int s = 0; s < kSeqs; ++s) CHECK_OK(kvb_seq_free(m, ids[s]));
}

void test_warm_rounds_allocate_nothing() {
  for (uint32_t num_groups : {0u, 1u, 3u}) {
    kvb_manager* m = make(num_groups);
    // Warm-up: the pool, the tables and the scratch grow here; two rounds, since the shared prompt
    // misses in the first and hits from the second on (the lookup's hit lists grow then).
    workload(m, num_groups, 1);
    workload(m, num_groups, 2);
    g_calls = 0;
    g_counting = true;
    workload(m, num_groups, 3);
    g_counting = false;
    std::printf("  %u group%s: %ld operator new calls in the warm round\n", num_groups, num_groups == 1 ? "" : "s",
                g_calls);
    CHECK(g_calls == 0);
    CHECK_OK(kvb_check_invariants(m));
    kvb_manager_destroy(m);
  }
}

}  // namespace

int main() {
  RUN_TEST(test_warm_rounds_allocate_nothing);
  TEST_SUMMARY();
}
