// CPU copy_blocks / swap_blocks between host caches, and the host allocator of kvb_cache_alloc.
//
// Runs of pairs whose source and destination blocks both advance by one are merged (one copy per run
// when both caches are dense with blocks back to back). A call that moves more than kStreamBytes copies
// with non-temporal stores: the destination is not read into the cache first (no read-for-ownership
// traffic) and does not evict the caller's working set; this is what large memcpy calls do too.
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <emmintrin.h>
#define KVB_STREAM_STORES 1
#else
#define KVB_STREAM_STORES 0
#endif

#include "../common/cache.h"
#include "copy.h"

namespace kvb {
namespace kern {
namespace cpu {

namespace {

constexpr int64_t kStreamBytes = int64_t(4) << 20;  // below this, plain memcpy (the data may be reused hot)

// memcpy with non-temporal 16-byte stores (SSE2: every x86-64); callers fence once at the end.
void stream_copy(char* dst, const char* src, size_t n) {
#if KVB_STREAM_STORES
  const size_t head = (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15;
  if (n < head + 64) {
    std::memcpy(dst, src, n);
    return;
  }
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  n -= head;
  __m128i* d = reinterpret_cast<__m128i*>(dst);
  const __m128i* s = reinterpret_cast<const __m128i*>(src);
  size_t i = 0;
  for (; i + 4 <= n / 16; i += 4) {
    const __m128i a = _mm_loadu_si128(s + i), b = _mm_loadu_si128(s + i + 1);
    const __m128i c = _mm_loadu_si128(s + i + 2), e = _mm_loadu_si128(s + i + 3);
    _mm_stream_si128(d + i, a);
    _mm_stream_si128(d + i + 1, b);
    _mm_stream_si128(d + i + 2, c);
    _mm_stream_si128(d + i + 3, e);
  }
  std::memcpy(dst + i * 16, src + i * 16, n - i * 16);
#else
  std::memcpy(dst, src, n);
#endif
}

void fence_stores() {
#if KVB_STREAM_STORES
  _mm_sfence();  // non-temporal stores are weakly ordered: visible to other threads after this
#endif
}

bool same_dense_order(const Cache& s, const Cache& d) {
  return s.block_dense() && d.block_dense() && s.token_stride == d.token_stride && s.head_stride == d.head_stride;
}

// Blocks [sb, sb + n) of one tensor to [db, db + n).
void copy_run(const Cache& s, const void* sbase, int64_t sb, const Cache& d, void* dbase, int64_t db, int64_t n,
              bool stream) {
  const int64_t es = int64_t(s.elem());
  const char* src = static_cast<const char*>(sbase) + s.block(sb) * es;
  char* dst = static_cast<char*>(dbase) + d.block(db) * es;
  const size_t block = size_t(s.block_elems() * es);
  auto copy = [&](char* to, const char* from, size_t bytes) {
    if (stream)
      stream_copy(to, from, bytes);
    else
      std::memcpy(to, from, bytes);
  };
  if (same_dense_order(s, d)) {
    if (s.block_stride == s.block_elems() && d.block_stride == d.block_elems()) {
      copy(dst, src, block * size_t(n));  // blocks back to back: the whole run at once
      return;
    }
    for (int64_t i = 0; i < n; ++i) copy(dst + d.block(i) * es, src + s.block(i) * es, block);
    return;
  }
  const size_t row = size_t(s.head_dim * es);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t t = 0; t < s.block_size; ++t)
      for (int64_t h = 0; h < s.num_kv_heads; ++h)
        copy(dst + d.row(i, t, d.block_size - 1, h) * es, src + s.row(i, t, s.block_size - 1, h) * es, row);
}

}  // namespace

void copy_blocks(const BlockCopy& b) {
  const Cache& s0 = b.src[0];
  const bool stream = double(b.num_layers) * double(b.num_pairs) * 2.0 * double(s0.block_elems()) * double(s0.elem()) >=
                      double(kStreamBytes);
  for (int64_t l = 0; l < b.num_layers; ++l) {
    const Cache& s = b.src[l];
    const Cache& d = b.dst[l];
    for (int64_t i = 0; i < b.num_pairs;) {
      const int32_t sb = b.pairs[2 * i], db = b.pairs[2 * i + 1];
      int64_t n = 1;
      while (i + n < b.num_pairs && b.pairs[2 * (i + n)] == sb + n && b.pairs[2 * (i + n) + 1] == db + n) ++n;
      copy_run(s, s.k, sb, d, d.k, db, n, stream);
      copy_run(s, s.v, sb, d, d.v, db, n, stream);
      i += n;
    }
  }
  if (stream) fence_stores();
}

// Caches of 2 MiB and more are 2 MiB aligned and asked to be backed by transparent huge pages: a decode
// reads each block's rows at the token stride, and on 4 KiB pages that means a TLB miss every few rows
// and hardware prefetchers that stop at every page boundary.
void* alloc_host(size_t bytes) {
  const size_t huge = size_t(2) << 20;
  const size_t align = bytes >= huge ? huge : 256;
  const size_t n = (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, n);
#ifdef MADV_HUGEPAGE
  if (p && align == huge) madvise(p, n, MADV_HUGEPAGE);  // advice only: failure changes nothing
#endif
  return p;
}

void free_host(void* p) { std::free(p); }

}  // namespace cpu
}  // namespace kern
}  // namespace kvb
