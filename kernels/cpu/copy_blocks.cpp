// CPU copy_blocks / swap_blocks between host caches, and the host allocator of kvb_cache_alloc.
#include <cstdlib>
#include <cstring>

#include "../backends.h"

namespace kvb {
namespace kern {
namespace cpu {

namespace {

// One block of one tensor: a single memcpy when both sides are dense in the same order, else per row.
void copy_block(const Cache& s, const void* sbase, int64_t sb, const Cache& d, void* dbase, int64_t db) {
  const int64_t es = int64_t(s.elem());
  const char* src = static_cast<const char*>(sbase) + sb * s.block_stride * es;
  char* dst = static_cast<char*>(dbase) + db * d.block_stride * es;
  if (s.block_dense() && d.block_dense() && s.token_stride == d.token_stride && s.head_stride == d.head_stride) {
    std::memcpy(dst, src, size_t(s.block_elems() * es));
    return;
  }
  const size_t row = size_t(s.head_dim * es);
  for (int64_t t = 0; t < s.block_size; ++t)
    for (int64_t h = 0; h < s.num_kv_heads; ++h)
      std::memcpy(dst + (t * d.token_stride + h * d.head_stride) * es, src + (t * s.token_stride + h * s.head_stride) * es,
                  row);
}

}  // namespace

void copy_blocks(const BlockCopy& b) {
  for (int64_t l = 0; l < b.num_layers; ++l) {
    const Cache& s = b.src[l];
    const Cache& d = b.dst[l];
    for (int64_t i = 0; i < b.num_pairs; ++i) {
      copy_block(s, s.k, b.pairs[2 * i], d, d.k, b.pairs[2 * i + 1]);
      copy_block(s, s.v, b.pairs[2 * i], d, d.v, b.pairs[2 * i + 1]);
    }
  }
}

void* alloc_host(size_t bytes) {
  const size_t align = 256;
  return std::aligned_alloc(align, (bytes + align - 1) / align * align);
}

void free_host(void* p) { std::free(p); }

}  // namespace cpu
}  // namespace kern
}  // namespace kvb
