// CPU paged prefill / extend attention (also the oracle of the CUDA kernels).
//
// Work item = (sequence, kv head, query tile): a tile is up to kRowsTarget packed query rows (token,
// query head of the GQA group), so every K/V tile converted to fp32 is reused by all query heads that
// share the kv head and by several query tokens. Keys are walked in tiles of kKeyTile tokens over the
// attended range only (sinks, then the window, up to the tile's last position); online softmax in fp32
// with exp2, one rescale per key tile and row; the causal / window mask is applied only to the key
// tiles that some row of the item does not fully attend (with a tree mask, also those that reach the
// draft keys, whose bits are tested per key). Inner loops: 8-wide fp32 vectors (GCC/Clang
// vector extensions), built twice on x86-64: portable, and for AVX2 + FMA + F16C, picked from the
// process-wide vector path of simd_cpu.h (so KVB_CPU_ISA narrows prefill as it narrows decode).
// Threads over the items for calls of at least kParallelFlops (kernels/common/parallel_cpu.h).
// Rows of one query token (decode rows, q_len 1) run the decode kernel's item instead (decode_rows): a
// tile of G rows pays the K/V conversion per kv head that a longer tile shares (figures: docs/perf/kernels_cpu.md).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "../../libkvblock/error.h"
#include "../common/types.h"
#include "../decode/decode.h"
#include "prefill.h"
#include "../common/convert_cpu.h"
#include "../common/parallel_cpu.h"
#include "../common/simd_cpu.h"

namespace kvb {
namespace kern {
namespace cpu {

namespace {

constexpr int kKeyTile = 32;                       // keys per tile
constexpr int64_t kRowsTarget = 128;  // packed query rows per item (one token when group > 128)
constexpr int64_t kParallelFlops = int64_t(8) << 20;  // per thread, below which one thread is used

struct Item {
  int64_t seq, j0, j1;  // query tokens [j0, j1) of the sequence
};

struct Job {
  const Cache* c;
  const Prefill* a;
  int64_t G, es, qes, tile_tokens;  // es: bytes per cache element, qes: per q / out element
  float q_scale;  // scale, times log2(e) when there is no soft cap
};

// Per-thread scratch, every array 32-byte aligned (sizes are multiples of 8 floats).
struct Scratch {
  float* q;    // [R][D] query rows, pre-scaled
  float* acc;  // [R][D] running sum of p * v
  float* m;    // [R] running max (log2 units)
  float* l;    // [R] running sum of exp2(x - m)
  float* s;    // [R][kKeyTile] logits, then probabilities
  float* kt;   // [D][kKeyTile] K tile, transposed
  float* v;    // [kKeyTile][D] V tile
  int64_t* pos;  // [R] absolute position of each row (-1: padding row)

  static int64_t round8(int64_t n) { return (n + 7) / 8 * 8; }
  static size_t floats(int64_t R, int64_t D) {
    return size_t(2 * R * D + 2 * round8(R) + R * kKeyTile + 2 * D * kKeyTile + 2 * round8(R));
  }
  Scratch(float* base, int64_t R, int64_t D) {
    q = base;
    acc = q + R * D;
    m = acc + R * D;
    l = m + round8(R);
    s = l + round8(R);
    kt = s + R * kKeyTile;
    v = kt + D * kKeyTile;
    pos = reinterpret_cast<int64_t*>(v + D * kKeyTile);
  }
};

// Everything the kernel will read must be valid before anything is written.
void check_inputs(const Cache& c, const Prefill& a) {
  const int32_t* qs = a.query_start;
  if (qs[0] != 0) fail(Code::invalid_argument, "query_start[0] = %d is not 0", qs[0]);
  const int64_t max_len = a.max_blocks * c.block_size;
  for (int64_t s = 0; s < a.num_seqs; ++s) {
    if (qs[s + 1] < qs[s])
      fail(Code::invalid_argument, "query_start[%lld] = %d is less than query_start[%lld] = %d", (long long)(s + 1),
           qs[s + 1], (long long)s, qs[s]);
    const int64_t q_len = int64_t(qs[s + 1]) - qs[s], len = a.seq_lens[s];
    if (len < q_len || len > max_len)
      fail(Code::invalid_argument, "seq_lens[%lld] = %lld is not in [q_len = %lld, max_blocks_per_seq * block_size = %lld]",
           (long long)s, (long long)len, (long long)q_len, (long long)max_len);
    if (q_len == 0) continue;  // nothing of this sequence is read
    const int64_t first = len - q_len;
    const int64_t lo = a.window > 0 ? std::max<int64_t>(0, first - a.window + 1) : 0;
    const int64_t sink = a.window > 0 ? a.sink : 0;
    for (int64_t b = 0; b * c.block_size < len; ++b) {
      const int64_t t0 = b * c.block_size, t1 = std::min(len, t0 + c.block_size);
      if (!(t1 > lo || t0 < sink)) continue;  // before every row's window and after the sinks: never read
      const int32_t id = a.block_tables[s * a.max_blocks + b];
      if (id < 0 || id >= c.num_blocks)
        fail(Code::invalid_argument, "block_tables[%lld][%lld] = %d is not in [0, %lld) (sequence length %lld)",
             (long long)s, (long long)b, id, (long long)c.num_blocks, (long long)len);
    }
  }
  if (qs[a.num_seqs] != a.total_q)
    fail(Code::invalid_argument, "query_start[num_seqs = %lld] = %d differs from total_q_tokens %lld",
         (long long)a.num_seqs, qs[a.num_seqs], (long long)a.total_q);
}

#define KVB_PREFILL_VARIANT 0
#include "prefill_item_cpu.inc"  // run_item<D>: portable vector code
#undef KVB_PREFILL_VARIANT

#if KVB_SIMD_X86
// The same code compiled for AVX2 + FMA + F16C, chosen at run time by simd::isa().
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif
namespace avx2 {
#define KVB_PREFILL_VARIANT 1
#include "prefill_item_cpu.inc"
#undef KVB_PREFILL_VARIANT
}  // namespace avx2
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif

using ItemFn = void (*)(const Job&, Scratch&, const Item&, int64_t);

template <int D>
ItemFn pick() {
#if KVB_SIMD_X86
  if (simd::isa() != simd::Isa::baseline) return avx2::run_item<D>;  // AVX-512 CPUs also run the AVX2 copy
#endif
  return run_item<D>;
}

// The q_len 1 rows of the call through cpu::paged_attention: a row at position seq_lens[s] - 1 sees what
// a decode of sequence s sees (the same window, sinks and soft cap). The decode kernel's split-K
// workspace is allocated here, like the prefill kernel's scratch.
void decode_rows(const Cache& c, const Prefill& a, const std::vector<int32_t>& seqs) {
  Attention d;
  static_cast<AttnCall&>(d) = a;
  const int64_t n = int64_t(seqs.size());
  d.num_seqs = n;
  std::vector<int32_t> lens, tables, rows;
  if (n == a.num_seqs) {  // every row a decode row: query_start[s] = s
    d.seq_lens = a.seq_lens;
    d.block_tables = a.block_tables;
  } else {
    lens.resize(size_t(n));
    tables.resize(size_t(n * a.max_blocks));
    rows.resize(size_t(n));
    for (int64_t k = 0; k < n; ++k) {
      const int64_t s = seqs[size_t(k)];
      lens[size_t(k)] = a.seq_lens[s];
      rows[size_t(k)] = a.query_start[s];
      std::memcpy(&tables[size_t(k * a.max_blocks)], a.block_tables + s * a.max_blocks, sizeof(int32_t) * size_t(a.max_blocks));
    }
    d.seq_lens = lens.data();
    d.block_tables = tables.data();
    d.q_rows = rows.data();
  }
  d.plan = plan_attention(n, a.num_q_heads, c.num_kv_heads, c.head_dim, c.block_size, a.max_blocks);
  // Every entry the reduction reads is written first: no fill (megabytes at 64 x 4096).
  const std::unique_ptr<float[]> workspace(d.plan.workspace_bytes ? new float[d.plan.workspace_bytes / sizeof(float)] : nullptr);
  d.workspace = workspace.get();
  paged_attention(c, d);
}

}  // namespace

void prefill_attention(const Cache& c, const Prefill& a) {
  check_inputs(c, a);
  std::vector<int32_t> decode;
  for (int64_t s = 0; s < a.num_seqs; ++s)
    if (a.query_start[s + 1] - a.query_start[s] == 1) decode.push_back(int32_t(s));
  if (!decode.empty()) decode_rows(c, a, decode);
  if (int64_t(decode.size()) == a.num_seqs) return;
  const int64_t D = c.head_dim, G = a.num_q_heads / c.num_kv_heads, Hkv = c.num_kv_heads;
  Job j;
  j.c = &c;
  j.a = &a;
  j.G = G;
  j.es = int64_t(c.elem());
  j.qes = int64_t(dtype_size(a.q_dtype));
  j.tile_tokens = std::max<int64_t>(1, kRowsTarget / G);
  j.q_scale = a.soft_cap > 0.f ? a.scale : a.scale * kLog2e;
  ItemFn item = nullptr;
  switch (D) {
    case 64: item = pick<64>(); break;
    case 128: item = pick<128>(); break;
    case 256: item = pick<256>(); break;
    default: fail(Code::invalid_argument, "prefill attention: head_dim %lld is not supported", (long long)D);
  }

  // Query tiles, the last (longest key range) of each sequence first; flops for the thread count.
  std::vector<Item> items;
  double flops = 0;
  for (int64_t s = 0; s < a.num_seqs; ++s) {
    const int64_t q_len = int64_t(a.query_start[s + 1]) - a.query_start[s], len = a.seq_lens[s];
    if (q_len == 1) continue;  // decode_rows did it
    for (int64_t j1 = q_len; j1 > 0; j1 -= j.tile_tokens) items.push_back({s, std::max<int64_t>(0, j1 - j.tile_tokens), j1});
    const double keys = a.window > 0 ? std::min<double>(double(a.window + a.sink), double(len)) : double(len);
    flops += 4.0 * double(q_len) * keys * double(a.num_q_heads) * double(D);
  }
  if (items.empty()) return;
  const int64_t num_items = int64_t(items.size()) * Hkv;
  const int64_t threads = threads_for(int64_t(std::min(flops, 1e18)), kParallelFlops, num_items);

  const int64_t R = (j.tile_tokens * G + 3) / 4 * 4;  // rows go in blocks of 4; the last block may be padding
  const size_t per = Scratch::floats(R, D);
  std::vector<float> scratch(per * size_t(threads) + 8);
  float* base = scratch.data();
  while (reinterpret_cast<uintptr_t>(base) % 32 != 0) ++base;
  parallel_for(num_items, threads, [&](int64_t tid, int64_t i) {
    Scratch sc(base + per * size_t(tid), R, D);
    item(j, sc, items[size_t(i / Hkv)], i % Hkv);
  });
}

}  // namespace cpu
}  // namespace kern
}  // namespace kvb
