// Store keys: a block's whole-history index key folded with what makes its bytes compatible (layout, fp8
// scales and a caller-chosen model id), so that blocks of other models, dtypes, calibrations or tenants
// never match in a shared store.
#define XXH_INLINE_ALL
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <xxhash.h>
#pragma GCC diagnostic pop

#include <cstring>

#include "store.h"

namespace kvb {

static void put_u32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
static void put_u64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

Key128 store_namespace_key(const StoreNamespace& ns) {
  unsigned char buf[8 + 5 * 4 + 8];
  // The format's version: a new folding gets a new tag. fp8 namespaces carry their scales (tag 2), 16- and
  // 32-bit ones hash as they always did.
  const bool fp8 = ns.dtype == KVB_DTYPE_FP8_E4M3 || ns.dtype == KVB_DTYPE_FP8_E5M2;
  std::memcpy(buf, fp8 ? "KVBSTNS2" : "KVBSTNS1", 8);
  put_u32(buf + 8, ns.dtype);
  put_u32(buf + 12, ns.block_size);
  put_u32(buf + 16, ns.num_layers);
  put_u32(buf + 20, ns.num_kv_heads);
  put_u32(buf + 24, ns.head_dim);
  put_u64(buf + 28, ns.model_id);
  XXH3_state_t st;
  XXH3_INITSTATE(&st);
  XXH3_128bits_reset(&st);
  XXH3_128bits_update(&st, buf, sizeof buf);
  for (float f : ns.scales) {
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    unsigned char b[4];
    put_u32(b, bits);
    XXH3_128bits_update(&st, b, sizeof b);
  }
  XXH128_hash_t h = XXH3_128bits_digest(&st);
  return Key128{h.low64, h.high64};
}

Key128 fold_store_key(const Key128& index_key, const Key128& ns) {
  unsigned char buf[32];
  put_u64(buf, index_key.lo);
  put_u64(buf + 8, index_key.hi);
  put_u64(buf + 16, ns.lo);
  put_u64(buf + 24, ns.hi);
  XXH128_hash_t h = XXH3_128bits(buf, sizeof buf);
  return Key128{h.low64, h.high64};
}

}  // namespace kvb
