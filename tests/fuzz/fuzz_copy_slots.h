// The engine's side of a tree commit in the fuzz target (fuzz_ops_tree.h): the nodes' K/V written at their
// slots of a small CPU cache, the drained slot pairs run by kvb_copy_slots, and then every group's
// positions committed .. committed + k - 1 must hold the accepted nodes' K/V, in path order. Now and then
// a bad pair list goes first (source == destination, a slot past the cache, a destination written twice,
// NULL pairs): refused with a message, the cache unchanged. Included only by fuzz_capi.cpp.
#pragma once
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "fuzz_harness.h"
#include "kvblock.h"

namespace kvbfuzz {

class SlotCache {
 public:
  // Two fp32 layers of one kv head of head_dim 2 over num_blocks x block_size slots.
  SlotCache(uint32_t num_blocks, uint32_t block_size)
      : slots_(static_cast<int64_t>(num_blocks) * block_size), k_(kLayers), v_(kLayers) {
    for (int l = 0; l < kLayers; ++l) {
      k_[l].assign(static_cast<size_t>(slots_) * 2, 0.f);
      v_[l].assign(static_cast<size_t>(slots_) * 2, 0.f);
      kvb_cache_desc_init(&desc_[l]);
      desc_[l].dtype = KVB_DTYPE_FP32;
      desc_[l].k = k_[l].data();
      desc_[l].v = v_[l].data();
      desc_[l].num_blocks = num_blocks;
      desc_[l].block_size = block_size;
      desc_[l].num_kv_heads = 1;
      desc_[l].head_dim = 2;
    }
  }
  int64_t slots() const { return slots_; }
  // What the forward step writes for `node` (token `tok`) at `slot`: distinct per layer, K and V.
  void write(int64_t slot, int32_t node, int64_t tok) {
    for (int l = 0; l < kLayers; ++l) {
      float* k = &k_[l][static_cast<size_t>(slot) * 2];
      float* v = &v_[l][static_cast<size_t>(slot) * 2];
      k[0] = static_cast<float>(tok % 100000), k[1] = static_cast<float>(node + 100 * l);
      v[0] = -k[0], v[1] = -k[1];
    }
  }
  bool holds(int64_t slot, int32_t node, int64_t tok) const {
    for (int l = 0; l < kLayers; ++l) {
      const float* k = &k_[l][static_cast<size_t>(slot) * 2];
      const float* v = &v_[l][static_cast<size_t>(slot) * 2];
      const float k0 = static_cast<float>(tok % 100000), k1 = static_cast<float>(node + 100 * l);
      if (k[0] != k0 || k[1] != k1 || v[0] != -k0 || v[1] != -k1) return false;
    }
    return true;
  }
  kvb_status copy(const int64_t* pairs, size_t n) {
    return kvb_copy_slots(desc_, kLayers, pairs, n, nullptr);
  }
  bool same_bytes(const SlotCache& o) const { return k_ == o.k_ && v_ == o.v_; }

 private:
  static constexpr int kLayers = 2;
  int64_t slots_;
  std::vector<std::vector<float>> k_, v_;
  kvb_cache_desc desc_[kLayers];

 public:
  SlotCache(const SlotCache& o) : slots_(o.slots_), k_(o.k_), v_(o.v_) {
    for (int l = 0; l < kLayers; ++l) {
      desc_[l] = o.desc_[l];
      desc_[l].k = k_[l].data();
      desc_[l].v = v_[l].data();
    }
  }
  SlotCache& operator=(const SlotCache&) = delete;
};

// A refused kvb_copy_slots: its status, a message, and not one byte of the cache changed.
inline void expect_copy_refused(SlotCache& cache, const int64_t* pairs, size_t n, const char* what) {
  const SlotCache before(cache);
  const kvb_status s = cache.copy(pairs, n);
  REQUIRE(s == KVB_ERR_INVALID_ARGUMENT, "copy_slots(%s): %s", what, kvb_status_string(s));
  check_failure(s, what);
  REQUIRE(cache.same_bytes(before), "refused copy_slots(%s) changed the cache", what);
}

// tables: every group's block table before the commit; c: the committed count before the tree; tokens,
// path: the tree's nodes and the accepted path; pairs: the drained slot pairs; bad: 0 none, else which bad
// list goes first.
inline void check_slot_copies(uint32_t num_blocks, uint32_t bs, const std::vector<std::vector<int32_t>>& tables,
                              uint64_t c, const std::vector<int64_t>& tokens, const std::vector<int32_t>& path,
                              const std::vector<int64_t>& pairs, size_t np, unsigned bad, bool trace) {
  if (trace) std::fprintf(stderr, "  copy_slots %zu pairs, bad list %u\n", np, bad);
  SlotCache cache(num_blocks, bs);
  auto slot = [&](const std::vector<int32_t>& t, uint64_t pos) {
    return static_cast<int64_t>(t[pos / bs]) * bs + static_cast<int64_t>(pos % bs);
  };
  for (const std::vector<int32_t>& t : tables)
    for (size_t i = 0; i < tokens.size(); ++i) cache.write(slot(t, c + i), static_cast<int32_t>(i), tokens[i]);
  expect_copy_refused(cache, nullptr, 1, "NULL pairs");
  const int64_t last = cache.slots() - 1;
  std::vector<int64_t> wrong(pairs.begin(), pairs.begin() + static_cast<std::ptrdiff_t>(np * 2));
  switch (bad) {
    case 1: wrong.insert(wrong.end(), {last, last}); break;               // source == destination
    case 2: wrong.insert(wrong.begin(), {cache.slots(), 0}); break;      // a source past the cache
    case 3:                                                               // a destination written twice
      if (last >= 2) {
        const int64_t dst = np ? wrong[1] : 1;
        wrong.insert(wrong.end(), {dst == 0 ? 2 : 0, dst});
        if (!np) wrong.insert(wrong.end(), {2, dst});
      }
      break;
    default: break;
  }
  if (bad && wrong.size() > np * 2) expect_copy_refused(cache, wrong.data(), wrong.size() / 2, "a bad pair list");
  const kvb_status s = cache.copy(np ? pairs.data() : nullptr, np);
  REQUIRE(s == KVB_OK, "copy_slots of the drained pairs: %s", kvb_last_error());
  for (const std::vector<int32_t>& t : tables)
    for (size_t j = 0; j < path.size(); ++j) {
      const size_t node = static_cast<size_t>(path[j]);
      REQUIRE(cache.holds(slot(t, c + j), path[j], tokens[node]), "after copy_slots: position %" PRIu64
              " does not hold path node %d", c + j, path[j]);
    }
}

}  // namespace kvbfuzz
