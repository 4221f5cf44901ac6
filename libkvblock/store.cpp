// Store keys: a block's whole-history index key folded with what makes its bytes compatible (layout and a
// caller-chosen model id), so that blocks of other models, dtypes or tenants never match in a shared store.
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

Key128 store_namespace_key(uint32_t dtype, uint32_t block_size, uint32_t num_layers, uint32_t num_kv_heads,
                           uint32_t head_dim, uint64_t model_id) {
  unsigned char buf[8 + 5 * 4 + 8];
  std::memcpy(buf, "KVBSTNS1", 8);  // the format's version: a new folding gets a new tag
  put_u32(buf + 8, dtype);
  put_u32(buf + 12, block_size);
  put_u32(buf + 16, num_layers);
  put_u32(buf + 20, num_kv_heads);
  put_u32(buf + 24, head_dim);
  put_u64(buf + 28, model_id);
  XXH128_hash_t h = XXH3_128bits(buf, sizeof buf);
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
