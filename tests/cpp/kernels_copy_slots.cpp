// kvb_copy_slots: against a reference that reads every source before writing (every dtype, fp8 bytes
// included, padded strides, several layers, random independent pairs, compaction chains where a slot is
// both written and read, a cycle); every bad argument refused by name with nothing copied; then CUDA
// against the CPU, plain and graph-captured (SKIP without a GPU).
#include <algorithm>
#include <cstring>
#include <deque>
#include <numeric>

#include "kernels_util.h"

using namespace kt;

namespace {

struct Layers {
  std::vector<HostCache> caches;
  std::vector<kvb_cache_desc> descs;
  Layers(uint32_t dtype, int n, uint32_t blocks, uint32_t bs, uint32_t heads, uint32_t D, int64_t head_pad,
         std::mt19937& rng) {
    for (int l = 0; l < n; ++l) {
      caches.emplace_back(dtype, blocks, bs, heads, D, head_pad, head_pad ? 8 : 0, head_pad ? 16 : 0);
      caches.back().k.fill_random(rng);
      caches.back().v.fill_random(rng);
    }
    for (HostCache& c : caches) descs.push_back(c.desc);
  }
  int64_t slots() const { return int64_t(descs[0].num_blocks) * descs[0].block_size; }
  // The reference: every source token's K / V row (all heads) copied out first, then written.
  void reference(const std::vector<int64_t>& pairs) {
    const kvb_cache_desc& d = descs[0];
    const size_t es = esize(d.dtype), row = size_t(d.head_dim) * es;
    for (HostCache& c : caches)
      for (Tensor* t : {&c.k, &c.v}) {
        char* base = static_cast<char*>(t->data());
        auto at = [&](int64_t slot, uint32_t h) {
          return base + c.offset(slot / d.block_size, slot % d.block_size, h, 0) * es;
        };
        std::vector<std::vector<char>> saved;
        for (size_t i = 0; i < pairs.size(); i += 2)
          for (uint32_t h = 0; h < d.num_kv_heads; ++h) saved.emplace_back(at(pairs[i], h), at(pairs[i], h) + row);
        size_t k = 0;
        for (size_t i = 0; i < pairs.size(); i += 2)
          for (uint32_t h = 0; h < d.num_kv_heads; ++h) std::memcpy(at(pairs[i + 1], h), saved[k++].data(), row);
      }
  }
  bool same(const Layers& o) const {
    for (size_t l = 0; l < caches.size(); ++l)
      if (std::memcmp(caches[l].k.data(), o.caches[l].k.data(), caches[l].k.bytes()) != 0 ||
          std::memcmp(caches[l].v.data(), o.caches[l].v.data(), caches[l].v.bytes()) != 0)
        return false;
    return true;
  }
};

// Compaction of a random token tree of n nodes at slots first .. first + n - 1 (the layout the manager
// gives a tree): a random accepted root-to-leaf path moves to first, first + 1, ...; nodes in place
// make no pair.
std::vector<int64_t> compaction(int64_t first, int n, std::mt19937& rng) {
  std::vector<int> parent(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) parent[size_t(i)] = int(rng() % uint32_t(i + 1)) - 1;
  std::vector<int> path;
  for (int x = int(rng() % uint32_t(n)); x >= 0; x = parent[size_t(x)]) path.push_back(x);
  std::reverse(path.begin(), path.end());
  std::vector<int64_t> pairs;
  for (size_t k = 0; k < path.size(); ++k)
    if (path[k] != int(k)) pairs.push_back(first + path[k]), pairs.push_back(first + int64_t(k));
  return pairs;
}

void run_case(uint32_t dtype, uint32_t bs, uint32_t heads, uint32_t D, int64_t pad, int layers, unsigned seed) {
  std::mt19937 rng(seed);
  Layers got(dtype, layers, 24, bs, heads, D, pad, rng);
  Layers want = got;
  for (size_t l = 0; l < want.caches.size(); ++l) {  // the copies' descriptors point at their own tensors
    want.caches[l].desc.k = want.caches[l].k.data();
    want.caches[l].desc.v = want.caches[l].v.data();
  }
  std::vector<int64_t> pairs;
  // Several trees' compactions (chains: a slot written by one pair and read by another) ...
  int64_t next = 0;
  for (int t = 0; t < 4 && next + 64 <= got.slots() / 2; ++t) {
    const int n = 2 + int(rng() % 40);
    std::vector<int64_t> c = compaction(next, n, rng);
    pairs.insert(pairs.end(), c.begin(), c.end());
    next += n;
  }
  // ... a cycle (two slots swapped), and independent pairs (one source read twice).
  const int64_t half = got.slots() / 2;
  pairs.insert(pairs.end(), {half, half + 1, half + 1, half});
  pairs.insert(pairs.end(), {half + 2, half + 3, half + 2, half + 4, half + 9, got.slots() - 1});
  want.reference(pairs);
  CHECK_OK(kvb_copy_slots(got.descs.data(), got.descs.size(), pairs.data(), pairs.size() / 2, nullptr));
  if (!got.same(want)) {
    fprintf(stderr, "  copy_slots %s bs=%u heads=%u D=%u pad=%lld layers=%d: differs from the reference\n",
            dname(dtype), bs, heads, D, (long long)pad, layers);
    CHECK(false);
  }
}

void test_cpu_against_reference() {
  const uint32_t dtypes[] = {KVB_DTYPE_FP16, KVB_DTYPE_BF16, KVB_DTYPE_FP32, KVB_DTYPE_FP8_E4M3, KVB_DTYPE_FP8_E5M2};
  unsigned seed = 1;
  for (uint32_t dt : dtypes) {
    run_case(dt, 16, 2, 64, 0, 3, seed++);
    run_case(dt, 8, 3, 128, 8, 2, seed++);  // padded heads, tokens and blocks: one copy per head
    run_case(dt, 1, 1, 256, 0, 1, seed++);
  }
}

// Refusals name the bad argument and copy nothing.
void test_bad_inputs() {
  std::mt19937 rng(9);
  Layers l(KVB_DTYPE_FP16, 2, 8, 16, 2, 64, 0, rng);
  const Layers before = l;
  const int64_t n = l.slots();
  struct Bad {
    std::vector<int64_t> pairs;
    const char* name;
  };
  std::vector<int64_t> big_group;  // 65 pairs in one chain: i + 1 -> i
  for (int64_t i = 0; i < 65; ++i) big_group.push_back(i + 1), big_group.push_back(i);
  const Bad bads[] = {
      {{0, 1, -1, 2}, "pairs[1]: source slot -1"},
      {{0, 1, 2, n}, "pairs[1]: destination slot 128"},
      {{5, 5}, "pairs[0]: source and destination are both slot 5"},
      {{0, 7, 1, 7}, "destination slot 7 is written twice"},
      {big_group, "65 pairs"},
  };
  for (const Bad& b : bads) {
    const kvb_status st = kvb_copy_slots(l.descs.data(), l.descs.size(), b.pairs.data(), b.pairs.size() / 2, nullptr);
    if (st != KVB_ERR_INVALID_ARGUMENT || strstr(kvb_last_error(), b.name) == nullptr) {
      fprintf(stderr, "  bad %s: got %s (%s)\n", b.name, kvb_status_string(st), kvb_last_error());
      CHECK(false);
    }
    CHECK(l.same(before));
  }
  const int64_t ok[2] = {0, 1};
  CHECK_STATUS(kvb_copy_slots(l.descs.data(), 2, nullptr, 1, nullptr), KVB_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvb_last_error(), "pairs is NULL") != nullptr);
  CHECK_STATUS(kvb_copy_slots(nullptr, 2, ok, 1, nullptr), KVB_ERR_INVALID_ARGUMENT);
  std::vector<kvb_cache_desc> mixed = l.descs;
  mixed[1].head_dim = 128;
  CHECK_STATUS(kvb_copy_slots(mixed.data(), 2, ok, 1, nullptr), KVB_ERR_INVALID_ARGUMENT);
  CHECK(l.same(before));
#if !KVB_WITH_CUDA
  std::vector<kvb_cache_desc> dev = l.descs;
  for (kvb_cache_desc& d : dev) d.device_type = KVB_DEVICE_CUDA;
  CHECK_STATUS(kvb_copy_slots(dev.data(), 2, ok, 1, nullptr), KVB_ERR_UNSUPPORTED);
#endif
  // Nothing to do is fine; 64 linked pairs (the most a group holds) run.
  CHECK_OK(kvb_copy_slots(l.descs.data(), 2, nullptr, 0, nullptr));
  CHECK_OK(kvb_copy_slots(nullptr, 0, nullptr, 0, nullptr));
  big_group.resize(128);
  Layers want = l;
  for (size_t i = 0; i < want.caches.size(); ++i) {
    want.caches[i].desc.k = want.caches[i].k.data();
    want.caches[i].desc.v = want.caches[i].v.data();
  }
  want.reference(big_group);
  CHECK_OK(kvb_copy_slots(l.descs.data(), 2, big_group.data(), 64, nullptr));
  CHECK(l.same(want));
}

// Random pair lists, valid and not: the call succeeds exactly when a simple model says the list is
// valid (slots in range, src != dst, destinations distinct, linked groups of at most 64), and then
// matches the reference; a refused list leaves every byte as it was.
void test_random_lists_against_model() {
  std::mt19937 rng(77);
  Layers l(KVB_DTYPE_BF16, 2, 6, 8, 1, 64, 0, rng);
  const int64_t slots = l.slots();
  int accepted = 0, refused = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int n = int(rng() % (trial % 10 == 0 ? 90 : 12));
    std::vector<int64_t> pairs;
    for (int i = 0; i < 2 * n; ++i) pairs.push_back(int64_t(rng() % uint32_t(slots + 2)) - (rng() % 50 == 0 ? 3 : 0));
    if (trial % 10 == 0)  // a long chain i + 1 -> i (one group of n pairs)
      for (int i = 0; i < n; ++i) pairs[size_t(2 * i)] = i + 1, pairs[size_t(2 * i + 1)] = i;
    // The model: range, src != dst, distinct destinations, then the size of each linked group.
    bool valid = true;
    std::vector<int> dst_of(size_t(slots), -1);
    for (int i = 0; i < n && valid; ++i) {
      const int64_t s = pairs[size_t(2 * i)], d = pairs[size_t(2 * i + 1)];
      valid = s >= 0 && s < slots && d >= 0 && d < slots && s != d && dst_of[size_t(d)] < 0;
      if (valid) dst_of[size_t(d)] = i;
    }
    if (valid) {
      std::vector<int> group(static_cast<size_t>(n));
      std::iota(group.begin(), group.end(), 0);
      for (bool changed = true; changed;) {  // label propagation: a reader and the writer of its source
        changed = false;
        for (int i = 0; i < n; ++i) {
          const int w = dst_of[size_t(pairs[size_t(2 * i)])];
          if (w < 0) continue;
          const int g = std::min(group[size_t(i)], group[size_t(w)]);
          if (group[size_t(i)] != g || group[size_t(w)] != g) group[size_t(i)] = group[size_t(w)] = g, changed = true;
        }
      }
      for (int g = 0; g < n; ++g) valid = valid && std::count(group.begin(), group.end(), g) <= 64;
    }
    Layers want = l;
    for (size_t i = 0; i < want.caches.size(); ++i) {
      want.caches[i].desc.k = want.caches[i].k.data();
      want.caches[i].desc.v = want.caches[i].v.data();
    }
    if (valid) want.reference(pairs);
    const kvb_status st = kvb_copy_slots(l.descs.data(), l.descs.size(), pairs.data(), size_t(n), nullptr);
    if ((st == KVB_OK) != valid || (st != KVB_OK && st != KVB_ERR_INVALID_ARGUMENT) || !l.same(want)) {
      fprintf(stderr, "  trial %d: %d pairs, model %s, got %s (%s)\n", trial, n, valid ? "valid" : "invalid",
              kvb_status_string(st), kvb_last_error());
      CHECK(false);
      break;
    }
    (valid ? accepted : refused)++;
  }
  CHECK(accepted > 50 && refused > 50);
}

#if KVB_WITH_CUDA
void test_cuda_against_cpu() {
  const uint32_t dtypes[] = {KVB_DTYPE_FP16, KVB_DTYPE_FP32, KVB_DTYPE_FP8_E4M3};
  unsigned seed = 100;
  for (uint32_t dt : dtypes)
    for (int64_t pad : {int64_t(0), int64_t(8)})
      for (bool graph : {false, true}) {
        std::mt19937 rng(seed++);
        Layers cpu(dt, 3, 40, 16, 2, 128, pad, rng);
        std::deque<DeviceCache> dev;  // DeviceCache owns device buffers: not movable, so no vector
        for (const HostCache& c : cpu.caches) dev.emplace_back(c);
        std::vector<kvb_cache_desc> descs;
        for (const DeviceCache& d : dev) descs.push_back(d.desc);
        std::vector<int64_t> pairs;
        for (int64_t first = 0; first + 64 <= 512; first += 64) {
          std::vector<int64_t> c = compaction(first, 64, rng);
          pairs.insert(pairs.end(), c.begin(), c.end());
        }
        pairs.insert(pairs.end(), {600, 610, 610, 600, 620, 630});
        CHECK_OK(kvb_copy_slots(cpu.descs.data(), cpu.descs.size(), pairs.data(), pairs.size() / 2, nullptr));
        run_on_device(graph, [&](void* stream) {
          CHECK_OK(kvb_copy_slots(descs.data(), descs.size(), pairs.data(), pairs.size() / 2, stream));
        });
        Layers back = cpu;
        for (size_t l = 0; l < dev.size(); ++l) dev[l].to_host(back.caches[l]);
        if (!back.same(cpu)) {
          fprintf(stderr, "  cuda copy_slots %s pad=%lld graph=%d differs from the CPU\n", dname(dt), (long long)pad, int(graph));
          CHECK(false);
        }
      }
}
#endif

}  // namespace

int main() {
  RUN_TEST(test_cpu_against_reference);
  RUN_TEST(test_bad_inputs);
  RUN_TEST(test_random_lists_against_model);
  RUN_CUDA_TEST(test_cuda_against_cpu);
  TEST_SUMMARY();
}
