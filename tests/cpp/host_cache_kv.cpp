// Real K/V bytes through the tiered prefix cache, on the CPU: a small serving loop
// writes each token's K/V (a function of its whole prefix, per layer, head and dim) with kvb_write_kv,
// runs the host-cache transfers with kvb_swap_blocks (all offloads, then all loads, as the header
// says) and checks, after every step, that every cached token of every live sequence reads back
// exactly what was written for it, whether its block stayed on the device or went through the host.
#include <cinttypes>
#include <cstdlib>
#include <map>

#include "c/kvbt_common.h"
#include "kernels_util.h"

using namespace kt;

namespace {

constexpr uint32_t kBs = 4, kHeads = 2, kDim = 16, kLayers = 2;

// The value every token's K (kv 0) or V (kv 1) element must hold: a function of the prefix hash.
float expected(uint64_t prefix_hash, uint32_t layer, uint32_t kv, uint32_t head, uint32_t d) {
  uint64_t x = prefix_hash ^ (uint64_t(layer) << 40) ^ (uint64_t(kv) << 36) ^ (uint64_t(head) << 20) ^ d;
  x ^= x >> 31;
  x *= 0x9E3779B97F4A7C15ULL;
  x ^= x >> 29;
  return float(int32_t(x >> 40) % 4096) / 1024.0f;  // exact in fp32
}

struct Seq {
  std::vector<int64_t> tokens;
  std::vector<uint64_t> prefix;  // prefix[p] = hash of tokens[0..p]
  size_t computed = 0;
};

uint64_t extend(uint64_t h, int64_t t) {
  h = (h ^ uint64_t(t)) * 0x100000001B3ULL;
  return h ^ (h >> 27);
}

struct Loop {
  uint32_t device_blocks, host_blocks;
  kvb_manager* m = nullptr;
  std::vector<HostCache> dev, host;
  std::vector<kvb_cache_desc> dev_desc, host_desc;
  std::map<int64_t, Seq> seqs;
  uint64_t loads = 0, offloads = 0, checked = 0;

  Loop(uint32_t nd, uint32_t nh) : device_blocks(nd), host_blocks(nh) {
    const kvb_config c = kvbt_config(kBs, nd, nh, 0.f, KVB_CONFIG_HOST_CACHE);
    CHECK_OK(kvb_manager_create(&c, &m));
    for (uint32_t l = 0; l < kLayers; ++l) {
      dev.emplace_back(KVB_DTYPE_FP32, nd, kBs, kHeads, kDim);
      host.emplace_back(KVB_DTYPE_FP32, nh, kBs, kHeads, kDim);
      dev.back().k.poison();
      dev.back().v.poison();
      host.back().k.poison();
      host.back().v.poison();
    }
    for (uint32_t l = 0; l < kLayers; ++l) {
      dev_desc.push_back(dev[l].desc);
      host_desc.push_back(host[l].desc);
    }
  }
  ~Loop() { kvb_manager_destroy(m); }

  // The caller's part of a step: offloads, then loads, then write the new tokens' K/V and commit.
  bool step() {
    std::vector<int32_t> off(2 * host_blocks + 2), load(2 * device_blocks + 2);
    size_t no = 0, nl = 0;
    CHECK_OK(kvb_drain_host_transfers(m, off.data(), host_blocks + 1, &no, load.data(), device_blocks + 1, &nl));
    if (no) CHECK_OK(kvb_swap_blocks(dev_desc.data(), host_desc.data(), kLayers, off.data(), no, 0, nullptr));
    if (nl) CHECK_OK(kvb_swap_blocks(host_desc.data(), dev_desc.data(), kLayers, load.data(), nl, 0, nullptr));
    offloads += no;
    loads += nl;
    if (!verify()) return false;
    for (auto& e : seqs) {
      Seq& s = e.second;
      std::vector<int32_t> table(256);
      size_t len = 0;
      CHECK_OK(kvb_seq_block_table(m, e.first, table.data(), table.size(), &len));
      const size_t n = s.tokens.size() - s.computed;
      if (n == 0) continue;
      std::vector<int64_t> slots(n);
      for (uint32_t l = 0; l < kLayers; ++l) {
        std::vector<float> k(n * kHeads * kDim), v(n * kHeads * kDim);
        for (size_t i = 0; i < n; ++i) {
          const size_t p = s.computed + i;
          slots[i] = int64_t(table[p / kBs]) * kBs + int64_t(p % kBs);
          for (uint32_t h = 0; h < kHeads; ++h)
            for (uint32_t d = 0; d < kDim; ++d) {
              k[(i * kHeads + h) * kDim + d] = expected(s.prefix[p], l, 0, h, d);
              v[(i * kHeads + h) * kDim + d] = expected(s.prefix[p], l, 1, h, d);
            }
        }
        const kvb_write_kv_args a = write_args(n, k.data(), v.data(), slots.data());
        CHECK_OK(kvb_write_kv(&dev_desc[l], &a, nullptr));
      }
      CHECK_OK(kvb_seq_commit(m, e.first, n));
      s.computed = s.tokens.size();
    }
    return verify();
  }

  // Every computed token of every live sequence holds its own K/V.
  bool verify() {
    for (auto& e : seqs) {
      const Seq& s = e.second;
      std::vector<int32_t> table(256);
      size_t len = 0;
      CHECK_OK(kvb_seq_block_table(m, e.first, table.data(), table.size(), &len));
      for (size_t p = 0; p < s.computed; ++p)
        for (uint32_t l = 0; l < kLayers; ++l)
          for (uint32_t h = 0; h < kHeads; ++h)
            for (uint32_t d = 0; d < kDim; ++d) {
              const size_t o = dev[l].offset(table[p / kBs], int64_t(p % kBs), h, d);
              if (dev[l].k.get(o) != expected(s.prefix[p], l, 0, h, d) ||
                  dev[l].v.get(o) != expected(s.prefix[p], l, 1, h, d)) {
                fprintf(stderr, "seq %" PRId64 " token %zu (block %d) layer %u: K/V differ from what was written\n",
                        e.first, p, table[p / kBs], l);
                return false;
              }
              ++checked;
            }
    }
    return true;
  }
};

void run(uint32_t device_blocks, uint32_t host_blocks, uint64_t seed, int steps) {
  Loop lp(device_blocks, host_blocks);
  std::mt19937_64 rng(seed);
  // Prompts share prefixes: a few stems, each extended by a few tokens.
  std::vector<std::vector<int64_t>> stems;
  for (int i = 0; i < 6; ++i) {
    std::vector<int64_t> t;
    for (uint32_t k = 0; k < kBs * (2 + rng() % 4); ++k) t.push_back(int64_t(rng() % 50));
    stems.push_back(t);
  }
  int64_t next_id = 1;
  for (int it = 0; it < steps && !kvbt_case_failures; ++it) {
    if (!lp.seqs.empty() && (rng() % 3 == 0 || lp.seqs.size() > 3)) {
      auto victim = lp.seqs.begin();
      std::advance(victim, long(rng() % lp.seqs.size()));
      CHECK_OK(kvb_seq_free(lp.m, victim->first));
      lp.seqs.erase(victim);
    }
    Seq s;
    s.tokens = stems[rng() % stems.size()];
    for (uint64_t k = rng() % (2 * kBs) + 1; k-- > 0;) s.tokens.push_back(int64_t(rng() % 50));
    uint64_t h = 0;
    for (int64_t t : s.tokens) s.prefix.push_back(h = extend(h, t));
    size_t cached = 0;
    kvb_status st = kvb_seq_allocate(lp.m, next_id, s.tokens.data(), s.tokens.size(), &cached);
    if (st == KVB_ERR_OUT_OF_BLOCKS) continue;
    CHECK_OK(st);
    s.computed = cached;
    lp.seqs[next_id++] = s;
    if (!lp.step()) {
      kvbt_case_failures++;
      return;
    }
    CHECK_OK(kvb_check_invariants(lp.m));
  }
  printf("     device %u + host %u blocks: %" PRIu64 " offloads, %" PRIu64 " loads, %" PRIu64 " values checked\n",
         device_blocks, host_blocks, lp.offloads, lp.loads, lp.checked);
  CHECK(lp.loads > 0 && lp.offloads > 0);
}

void kv_small_host() { run(12, 6, 1, getenv("KVB_TEST_QUICK") ? 60 : 300); }
void kv_large_host() { run(12, 40, 2, getenv("KVB_TEST_QUICK") ? 60 : 300); }

}  // namespace

int main() {
  RUN_TEST(kv_small_host);
  RUN_TEST(kv_large_host);
  TEST_SUMMARY();
}
