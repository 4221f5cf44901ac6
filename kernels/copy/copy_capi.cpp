// C boundary of kvb_copy_blocks and kvb_swap_blocks: per-layer descriptors and block pairs checked
// here; the back ends copy.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "../../libkvblock/capi_guard.h"
#include "../common/cache.h"
#include "copy.h"
#include "../common/validate.h"

using namespace kvb;
using namespace kvb::kern;

namespace {
constexpr size_t kMaxPairs = size_t(1) << 31;
}  // namespace

namespace kvb {
namespace kern {

// layers[] is an array of the caller's struct, which may be older (smaller) or newer (larger) than this
// library's: element l starts l * layers[0].struct_size bytes in (the header's rule for arrays of
// versioned structs), and every element must carry that same size.
std::vector<Cache> read_layers(const kvb_cache_desc* layers, size_t num_layers, const char* name) {
  KVB_REQUIRE_ARG(layers != nullptr, "%s is NULL", name);
  std::vector<Cache> out;
  if (num_layers == 0) return out;
  const uint32_t size = layers[0].struct_size;
  KVB_REQUIRE_ARG(size % alignof(kvb_cache_desc) == 0 && size <= (1u << 16),
                  "%s[0]: struct_size %u is not the size of a kvb_cache_desc array element (a multiple of %zu)",
                  name, size, alignof(kvb_cache_desc));
  out.reserve(num_layers);
  const char* base = reinterpret_cast<const char*>(layers);
  char what[64];
  for (size_t l = 0; l < num_layers; ++l) {
    std::snprintf(what, sizeof what, "%s[%zu]", name, l);
    const kvb_cache_desc* layer = reinterpret_cast<const kvb_cache_desc*>(base + l * size);
    KVB_REQUIRE_ARG(layer->struct_size == size, "%s: struct_size %u differs from %s[0] (%u)", what,
                    layer->struct_size, name, size);
    out.push_back(read_cache(layer, what));
    const Cache& a = out.front();
    const Cache& b = out.back();
    char first[64];
    std::snprintf(first, sizeof first, "%s[0]", name);
    require_same_shape(a, b, first, what);
    KVB_REQUIRE_ARG(a.cuda == b.cuda && a.device_index == b.device_index, "%s is on another device than %s", what, first);
    KVB_REQUIRE_ARG(a.num_blocks == b.num_blocks, "%s: num_blocks %lld differs from %s (%lld)", what,
                    (long long)b.num_blocks, first, (long long)a.num_blocks);
    KVB_REQUIRE_ARG(a.block_stride == b.block_stride && a.token_stride == b.token_stride &&
                        a.head_stride == b.head_stride,
                    "%s: strides differ from %s (every layer must have the same strides)", what, first);
  }
  return out;
}

}  // namespace kern
}  // namespace kvb

namespace {

// Every block id in range; destinations distinct; for an in-place copy no destination is also a source.
void check_pairs(const int32_t* pairs, size_t num_pairs, int64_t src_blocks, int64_t dst_blocks, bool in_place) {
  KVB_REQUIRE_ARG(pairs != nullptr, "pairs is NULL");
  std::vector<int32_t> dst(num_pairs), src(num_pairs);
  for (size_t i = 0; i < num_pairs; ++i) {
    const int32_t s = pairs[2 * i], d = pairs[2 * i + 1];
    KVB_REQUIRE_ARG(s >= 0 && s < src_blocks, "pairs[%zu]: source block %d is not in [0, %lld)", i, s, (long long)src_blocks);
    KVB_REQUIRE_ARG(d >= 0 && d < dst_blocks, "pairs[%zu]: destination block %d is not in [0, %lld)", i, d, (long long)dst_blocks);
    src[i] = s;
    dst[i] = d;
  }
  std::sort(dst.begin(), dst.end());
  auto dup = std::adjacent_find(dst.begin(), dst.end());
  KVB_REQUIRE_ARG(dup == dst.end(), "destination block %d appears twice in pairs", dup == dst.end() ? 0 : *dup);
  if (in_place) {
    std::sort(src.begin(), src.end());
    for (int32_t s : src)
      KVB_REQUIRE_ARG(!std::binary_search(dst.begin(), dst.end(), s),
                      "block %d is both a source and a destination in pairs (order would matter)", s);
  }
}

}  // namespace

extern "C" {

KVB_API kvb_status kvb_copy_blocks(const kvb_cache_desc* layers, size_t num_layers, const int32_t* pairs,
                                   size_t num_pairs, void* stream) {
  return guarded([&] {
    KVB_REQUIRE_ARG(num_layers <= kMaxCopyLayers, "num_layers %zu exceeds %zu", num_layers, kMaxCopyLayers);
    KVB_REQUIRE_ARG(num_pairs <= kMaxPairs, "num_pairs %zu exceeds %zu", num_pairs, kMaxPairs);
    if (num_layers == 0 && num_pairs == 0) return;
    std::vector<Cache> c = read_layers(layers, num_layers, "layers");
    if (num_layers == 0 || num_pairs == 0) {
      if (num_pairs) KVB_REQUIRE_ARG(pairs != nullptr, "pairs is NULL");
      return;
    }
    check_pairs(pairs, num_pairs, c[0].num_blocks, c[0].num_blocks, true);
    require_backend(c[0], "layers[0]");
    BlockCopy b;
    b.src = b.dst = c.data();
    b.num_layers = (int64_t)num_layers;
    b.pairs = pairs;
    b.num_pairs = (int64_t)num_pairs;
    if (c[0].cuda)
      cuda::copy_blocks(b, stream);
    else
      cpu::copy_blocks(b);
  });
}

KVB_API kvb_status kvb_swap_blocks(const kvb_cache_desc* src_layers, const kvb_cache_desc* dst_layers,
                                   size_t num_layers, const int32_t* pairs, size_t num_pairs, uint32_t flags,
                                   void* stream) {
  return guarded([&] {
    KVB_REQUIRE_ARG(num_layers <= kMaxCopyLayers, "num_layers %zu exceeds %zu", num_layers, kMaxCopyLayers);
    KVB_REQUIRE_ARG(num_pairs <= kMaxPairs, "num_pairs %zu exceeds %zu", num_pairs, kMaxPairs);
    KVB_REQUIRE_ARG(flags <= KVB_SWAP_USE_KERNEL, "flags %u is not a kvb_swap_flags value", flags);
    if (num_layers == 0 && num_pairs == 0) return;
    std::vector<Cache> s = read_layers(src_layers, num_layers, "src_layers");
    std::vector<Cache> d = read_layers(dst_layers, num_layers, "dst_layers");
    if (num_layers == 0 || num_pairs == 0) {
      if (num_pairs) KVB_REQUIRE_ARG(pairs != nullptr, "pairs is NULL");
      return;
    }
    require_same_shape(s[0], d[0], "src_layers[0]", "dst_layers[0]");
    const bool same_memory = s[0].k == d[0].k;
    check_pairs(pairs, num_pairs, s[0].num_blocks, d[0].num_blocks, same_memory);
    require_backend(s[0], "src_layers[0]");
    require_backend(d[0], "dst_layers[0]");
    if (s[0].cuda && d[0].cuda)
      KVB_REQUIRE_ARG(s[0].device_index == d[0].device_index,
                      "src_layers on CUDA device %d and dst_layers on device %d: peer copies are not supported",
                      s[0].device_index, d[0].device_index);
    BlockCopy b;
    b.src = s.data();
    b.dst = d.data();
    b.num_layers = (int64_t)num_layers;
    b.pairs = pairs;
    b.num_pairs = (int64_t)num_pairs;
    b.flags = flags;
    if (s[0].cuda || d[0].cuda)
      cuda::copy_blocks(b, stream);
    else
      cpu::copy_blocks(b);
  });
}

}  // extern "C"
