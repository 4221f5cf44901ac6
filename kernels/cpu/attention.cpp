// CPU paged decode attention: the same split-K plan and workspace layout as the CUDA kernels (so results
// and the workspace contract agree), online softmax in fp32 with exp2.
//
// Work item = (sequence, kv head, partition). An item walks its attended tokens in tiles of kTile
// tokens: each K/V row is converted to fp32 once into a small scratch tile (K transposed, V as rows)
// and then used by every query head of the GQA group, so the inner loops are plain fixed-width fp32
// vector arithmetic (GCC/Clang vector extensions: SSE2 on baseline x86-64, NEON on arm64, scalar
// elsewhere), with one softmax rescale per tile rather than per token.
//
// Threads (parallel.h): items are shared out over up to hardware_concurrency() threads (including the
// caller) when the call reads at least kParallelBytes of K/V; smaller calls stay on the calling thread.
// Threads are created per call (about 20-50 us each, negligible above the threshold).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

// KVB_ATTN_F16C=0 (e.g. in CXXFLAGS) builds the portable path only; tests use it to cover that path.
#ifndef KVB_ATTN_F16C
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define KVB_ATTN_F16C 1
#else
#define KVB_ATTN_F16C 0
#endif
#endif
#if KVB_ATTN_F16C
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "../../libkvblock/error.h"
#include "../backends.h"
#include "convert.h"
#include "parallel.h"

namespace kvb {
namespace kern {
namespace cpu {

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int kTile = 16;                                // tokens per tile
constexpr int64_t kParallelBytes = int64_t(1) << 20;     // K+V bytes below which one thread is used

struct Window {
  int64_t len, lo, sink;
};

Window window_of(const Attention& a, int64_t len) {
  Window w{len, 0, 0};
  if (a.window > 0) {
    w.lo = std::max<int64_t>(0, len - a.window);
    w.sink = a.sink;
  }
  return w;
}

// Everything the kernel will read must be valid before anything is written.
void check_inputs(const Cache& c, const Attention& a) {
  const int64_t max_len = a.max_blocks * c.block_size;
  for (int64_t s = 0; s < a.num_seqs; ++s) {
    const int64_t len = a.seq_lens[s];
    if (len < 0 || len > max_len)
      fail(Code::invalid_argument, "seq_lens[%lld] = %lld is not in [0, max_blocks_per_seq * block_size = %lld]",
           (long long)s, (long long)len, (long long)max_len);
    const Window w = window_of(a, len);
    const int64_t nblk = (len + c.block_size - 1) >> c.block_shift;
    for (int64_t b = 0; b < nblk; ++b) {
      const int64_t first = b * c.block_size, last = std::min(len, first + c.block_size) - 1;
      if (!(last >= w.lo || first < w.sink)) continue;  // wholly outside the window: never read
      const int32_t id = a.block_tables[s * a.max_blocks + b];
      if (id < 0 || id >= c.num_blocks)
        fail(Code::invalid_argument, "block_tables[%lld][%lld] = %d is not in [0, %lld) (sequence length %lld)",
             (long long)s, (long long)b, id, (long long)c.num_blocks, (long long)len);
    }
  }
}

// Tokens of [a, b) that are attended: [a, b) ∩ ([0, sink) ∪ [lo, len)), as at most two ranges.
int attended_ranges(const Window& w, int64_t a, int64_t b, int64_t r[2][2]) {
  int n = 0;
  const int64_t s0 = a, s1 = std::min(b, w.sink);
  if (s0 < s1) {
    r[n][0] = s0;
    r[n][1] = s1;
    ++n;
  }
  const int64_t t0 = std::max({a, w.lo, s1}), t1 = std::min(b, w.len);
  if (t0 < t1) {
    r[n][0] = t0;
    r[n][1] = t1;
    ++n;
  }
  return n;
}

struct Scratch {
  float* q;    // [G][D] query rows, pre-scaled
  float* acc;  // [G][D] running sum of p * v
  float* m;    // [G] running max (log2 units)
  float* l;    // [G] running sum of exp2(x - m)
  float* s;    // [G][kTile] logits, then probabilities
  float* kt;   // [D][kTile] K tile, transposed
  float* v;    // [kTile][D] V tile
  float* row;  // [D] conversion buffer for one K row

  static size_t floats(int64_t G, int64_t D) {
    const size_t g4 = size_t((G + 3) / 4 * 4);
    return size_t(2 * G * D) + 2 * g4 + size_t(G * kTile) + size_t(2 * D * kTile) + size_t(D);
  }
  Scratch(float* base, int64_t G, int64_t D) {
    const size_t g4 = size_t((G + 3) / 4 * 4);
    q = base;
    acc = q + G * D;
    m = acc + G * D;
    l = m + g4;
    s = l + g4;
    kt = s + G * kTile;
    v = kt + D * kTile;
    row = v + D * kTile;
  }
};

struct Job {
  const Cache* c;
  const Attention* a;
  int64_t G, P, NP, es;
  float* ws_m;
  float* ws_l;
  float* ws_o;
};

// One (sequence, kv head, partition) item: fixed head_dim D for fully unrolled inner loops.
#include "attention_item.inc"  // run_item<D>: portable vector code

#if KVB_ATTN_F16C
// The same code again compiled for AVX + F16C (hardware fp16 conversion, VEX encoding), chosen at run
// time by has_f16c(): baseline builds keep running on any x86-64.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx,f16c")
#endif
namespace f16c {
#define KVB_ATTN_F16C_BODY 1
#include "attention_item.inc"
}  // namespace f16c
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

bool has_f16c() {
  static const bool yes = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
    const bool f16c = (ecx >> 29) & 1u;
    __builtin_cpu_init();
    return f16c && __builtin_cpu_supports("avx");  // avx: the CPU has it and the OS saves its state
  }();
  return yes;
}
#endif

using ItemFn = void (*)(const Job&, Scratch&, int64_t, int64_t, int64_t);

// Reduce the partitions of one query head: weights l_p * 2^(m_p - M).
void reduce_head(const Job& j, int64_t s, int64_t h, float* tmp) {
  const Cache& c = *j.c;
  const Attention& a = *j.a;
  const int64_t D = c.head_dim, NP = j.NP;
  const int64_t len = a.seq_lens[s];
  const int64_t nparts = (len + j.P - 1) / j.P;
  const int64_t row0 = (s * a.num_q_heads + h) * NP;
  float M = kNegInf;
  for (int64_t p = 0; p < nparts; ++p)
    if (j.ws_l[row0 + p] > 0.f) M = std::max(M, j.ws_m[row0 + p]);
  float W = 0.f;
  std::fill(tmp, tmp + D, 0.f);
  for (int64_t p = 0; p < nparts; ++p) {
    if (!(j.ws_l[row0 + p] > 0.f)) continue;
    const float wp = j.ws_l[row0 + p] * std::exp2(j.ws_m[row0 + p] - M);
    W += wp;
    const float* o = j.ws_o + (row0 + p) * D;
    for (int64_t d = 0; d < D; ++d) tmp[d] += wp * o[d];
  }
  const float inv = W > 0.f ? 1.f / W : 0.f;
  char* op = static_cast<char*>(a.out) + (s * a.out_seq_stride + h * a.out_head_stride) * j.es;
  for (int64_t d = 0; d < D; ++d) store_elem(op, c.dtype, d, tmp[d] * inv);
}

}  // namespace

void paged_attention(const Cache& c, const Attention& a) {
  check_inputs(c, a);
  const int64_t D = c.head_dim, G = a.num_q_heads / c.num_kv_heads, Hkv = c.num_kv_heads;
  Job j;
  j.c = &c;
  j.a = &a;
  j.G = G;
  j.P = a.plan.partition_size;
  j.NP = a.plan.num_partitions;
  j.es = int64_t(c.elem());
  j.ws_m = static_cast<float*>(a.workspace);
  j.ws_l = j.ws_m ? j.ws_m + a.num_seqs * a.num_q_heads * j.NP : nullptr;
  j.ws_o = j.ws_l ? j.ws_l + a.num_seqs * a.num_q_heads * j.NP : nullptr;

  ItemFn item = nullptr;
#if KVB_ATTN_F16C
  const bool hw16 = c.dtype == Dtype::f16 && has_f16c();
#endif
  switch (D) {
#if KVB_ATTN_F16C
    case 64: item = hw16 ? f16c::run_item<64> : run_item<64>; break;
    case 128: item = hw16 ? f16c::run_item<128> : run_item<128>; break;
    case 256: item = hw16 ? f16c::run_item<256> : run_item<256>; break;
#else
    case 64: item = run_item<64>; break;
    case 128: item = run_item<128>; break;
    case 256: item = run_item<256>; break;
#endif
    default: fail(Code::invalid_argument, "attention: head_dim %lld is not supported", (long long)D);
  }

  // Items in (sequence, kv head, partition) order; partitions past a sequence's end are skipped.
  const int64_t NP = j.NP;
  const int64_t num_items = a.num_seqs * Hkv * NP;
  int64_t attended = 0;
  for (int64_t s = 0; s < a.num_seqs; ++s) {
    const Window w = window_of(a, a.seq_lens[s]);
    attended += w.len - w.lo + std::min(w.sink, w.lo);
  }
  const int64_t bytes = attended * Hkv * D * j.es * 2;
  const int64_t threads = threads_for(bytes, kParallelBytes / 2, num_items);

  const size_t per = Scratch::floats(G, D);
  std::vector<float> scratch(per * size_t(threads) + 4);
  float* base = scratch.data();
  while (reinterpret_cast<uintptr_t>(base) % 16 != 0) ++base;

  parallel_for(num_items, threads, [&](int64_t tid, int64_t i) {
    const int64_t p = i % NP, sk = i / NP, kvh = sk % Hkv, s = sk / Hkv;
    if (NP > 1 && p * j.P >= a.seq_lens[s]) return;  // past the end: no workspace row
    Scratch sc(base + per * size_t(tid), G, D);
    item(j, sc, s, kvh, p);
  });

  if (NP == 1) return;
  float* tmp = base;  // the first thread's scratch is free again: D floats for the reduction
  for (int64_t s = 0; s < a.num_seqs; ++s)
    for (int64_t h = 0; h < a.num_q_heads; ++h) reduce_head(j, s, h, tmp);
}

}  // namespace cpu
}  // namespace kern
}  // namespace kvb
