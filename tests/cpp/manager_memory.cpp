// Host memory of a manager, measured with a counting global allocator (every operator new / delete of
// the library, linked statically into this binary, goes through it; the live byte count is exact).
//   - Per device block: with events and the host cache (one host block per device
//     block), KV cache groups must not multiply the per-block cost: one public-hash count table keyed by
//     (group, hash) serves every group, since a block belongs to one group at a time. Measured as the
//     slope between two pool sizes, so the fixed costs (event queue, sequence table) cancel out.
//   - The groups prefix lookup keeps no scratch beyond what the pool bounds: a prompt
//     far longer than the pool, checked or allocated with 64 groups, leaves the manager no bigger (it
//     kept 40 bytes per group per prompt block), with extra keys on every block too; and the hit found
//     on a cached prefix followed by a long tail is the cached prefix.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "harness.h"

// ---- counting allocator: a header before each block remembers its size ---------------------------

namespace {
long long g_live = 0;  // bytes currently allocated through operator new
constexpr std::size_t kHeader = 64;  // keeps every alignment up to 64 bytes

void* counted_alloc(std::size_t n, std::size_t align) noexcept {
  if (align > kHeader) return nullptr;  // not used by the library
  void* raw = nullptr;
  if (posix_memalign(&raw, kHeader, n + kHeader) != 0) return nullptr;
  *static_cast<std::size_t*>(raw) = n;
  g_live += static_cast<long long>(n);
  return static_cast<char*>(raw) + kHeader;
}
}  // namespace

void* test_alloc(std::size_t n, std::size_t align) noexcept { return counted_alloc(n, align); }
void test_free(void* p) noexcept {
  if (!p) return;
  char* raw = static_cast<char*>(p) - kHeader;
  g_live -= static_cast<long long>(*reinterpret_cast<std::size_t*>(raw));
  std::free(raw);
}
#include "replace_new.h"

namespace {

// A manager with events and the host cache (when it has host blocks); num_groups 0 = no groups, else
// half full, half window groups (all window groups with all_window).
kvb_manager* make(uint32_t block_size, uint32_t num_blocks, uint32_t num_host_blocks, uint32_t num_groups,
                  bool all_window = false) {
  std::vector<kvb_group_spec> specs(num_groups);
  for (uint32_t g = 0; g < num_groups; ++g) {
    kvb_group_spec_init(&specs[g]);
    if (g % 2 || all_window) {
      specs[g].kind = KVB_GROUP_WINDOW;
      specs[g].window_tokens = 64;
      specs[g].sink_tokens = g % 4 == 3 ? 16 : 0;
    }
  }
  kvb_config cfg;
  kvb_config_init(&cfg);
  cfg.block_size = block_size;
  cfg.num_blocks = num_blocks;
  cfg.num_host_blocks = num_host_blocks;
  cfg.flags = num_host_blocks ? (KVB_CONFIG_EVENTS | KVB_CONFIG_HOST_CACHE) : 0;
  cfg.event_capacity = 64;
  cfg.groups = num_groups ? specs.data() : nullptr;
  cfg.num_groups = num_groups;
  kvb_manager* m = nullptr;
  if (kvb_manager_create(&cfg, &m) != KVB_OK) {
    std::fprintf(stderr, "kvb_manager_create: %s\n", kvb_last_error());
    std::exit(2);
  }
  return m;
}

long long bytes_of_manager(uint32_t num_blocks, uint32_t num_groups) {
  const long long before = g_live;
  kvb_manager* m = make(16, num_blocks, num_blocks, num_groups);
  const long long bytes = g_live - before;
  kvb_manager_destroy(m);
  return bytes;
}

// Bytes per device block (with one host block each), block size 16, events and the host cache on.
double per_block(uint32_t num_groups) {
  const uint32_t n = 1u << 13;
  return static_cast<double>(bytes_of_manager(2 * n, num_groups) - bytes_of_manager(n, num_groups)) / n;
}

void test_groups_do_not_multiply_per_block_memory() {
  const double none = per_block(0), g1 = per_block(1), g8 = per_block(8), g64 = per_block(64);
  std::printf("bytes per device block (block size 16, events, host cache, one host block per device block):\n"
              "  no groups %.0f, 1 group %.0f, 8 groups %.0f, 64 groups %.0f\n", none, g1, g8, g64);
  // With groups a block also records its group (device and host, 1 byte each) and, parked, the sequence
  // it is parked for (8 bytes): nothing that grows with the number of groups.
  CHECK(g1 <= none + 10);
  CHECK(g8 <= none + 10);
  CHECK(g64 <= none + 10);
  // What README.md "Memory" says for this configuration (index and count tables at their smallest load:
  // the pool sizes here are powers of two).
  CHECK(none <= 552);
  CHECK(g64 <= 562);
}

// can_allocate and allocate of `prompt` (with an extra key on every block if asked); returns the bytes the
// manager grew by, and the cached tokens can_allocate reported.
long long lookup_growth(kvb_manager* m, const std::vector<int64_t>& prompt, bool extra_keys, size_t* cached) {
  std::vector<uint32_t> blocks;
  std::vector<uint64_t> keys;
  kvb_seq_options o;
  kvb_seq_options_init(&o);
  if (extra_keys) {
    for (uint32_t i = 0; i < prompt.size() / 16; ++i) blocks.push_back(i), keys.push_back(0xe0 + i);
    o.extra_key_blocks = blocks.data();
    o.extra_keys = keys.data();
    o.num_extra_keys = blocks.size();
  }
  const long long before = g_live;
  for (int round = 0; round < 2; ++round) {
    const kvb_status s = kvb_seq_can_allocate_ex(m, prompt.data(), prompt.size(), &o, cached);
    CHECK(s == KVB_OK || s == KVB_ERR_OUT_OF_BLOCKS);
    size_t got = 0;
    const kvb_status a = kvb_seq_allocate_ex(m, 99, prompt.data(), prompt.size(), &o, &got);
    CHECK(a == s);
    if (a == KVB_OK) {
      CHECK(got == *cached);
      CHECK_OK(kvb_seq_free(m, 99));
    }
  }
  return g_live - before;
}

void test_long_prompt_lookup_keeps_no_scratch() {
  std::vector<int64_t> prompt(size_t(1) << 16);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int64_t(i % 50000);
  // An 8-block pool cannot hold the prompt: nothing is cached, nothing may stay behind.
  for (bool all_window : {false, true})
    for (bool extra : {false, true}) {
      kvb_manager* m = make(16, 8, 0, 64, all_window);
      size_t cached = 1;
      const long long grew = lookup_growth(m, prompt, extra, &cached);
      std::printf("  64 %s groups, 8 blocks, %zu tokens%s: grew by %lld bytes, %zu cached\n",
                  all_window ? "window" : "full/window", prompt.size(), extra ? ", extra keys" : "", grew, cached);
      CHECK(cached == 0);
      CHECK(grew <= 8 * 128);  // at most what the pool's blocks bound
      CHECK_OK(kvb_check_invariants(m));
      kvb_manager_destroy(m);
    }
  // A cached prefix of 10 blocks, then a long tail: the hit is the prefix, and the scratch is bounded by
  // the pool (256 blocks), not by the prompt.
  for (bool all_window : {false, true}) {
    kvb_manager* m = make(16, 256, 0, 4, all_window);
    CHECK_OK(kvb_seq_allocate(m, 1, prompt.data(), 161, nullptr));
    CHECK_OK(kvb_seq_commit(m, 1, 161));
    CHECK_OK(kvb_seq_free(m, 1));
    size_t cached = 0;
    CHECK_OK(kvb_seq_can_allocate(m, prompt.data(), 161, &cached));
    CHECK(cached == 160);
    std::vector<int64_t> longer(prompt.begin(), prompt.begin() + (1 << 14));
    const long long grew = lookup_growth(m, longer, false, &cached);
    std::printf("  4 %s groups, 256 blocks, cached prefix of 160 tokens, %zu-token prompt: grew by %lld bytes, "
                "%zu cached\n", all_window ? "window" : "full/window", longer.size(), grew, cached);
    CHECK(cached == 160);
    CHECK(grew <= 256 * 128);
    CHECK_OK(kvb_check_invariants(m));
    kvb_manager_destroy(m);
  }
}

}  // namespace

int main() {
  RUN_TEST(test_groups_do_not_multiply_per_block_memory);
  RUN_TEST(test_long_prompt_lookup_keeps_no_scratch);
  TEST_SUMMARY();
}
