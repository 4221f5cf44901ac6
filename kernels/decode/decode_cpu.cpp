// CPU paged decode attention: the same split-K plan and workspace layout as the CUDA kernels (so results
// and the workspace contract agree), online softmax in fp32 with exp2.
//
// Work item = (sequence, group of kv heads, partition); decode_item_cpu.inc holds its body, compiled once
// per CPU code path (simd_cpu.h: AVX-512 with AVX512-BF16, AVX-512, AVX2+FMA+F16C, portable baseline) and
// chosen at run time. Each K and V row is read straight from the cache once (converted in registers) and
// used by every query head of its GQA group; an item walks its tiles for all of its kv heads so whole
// cache blocks stream.
//
// Threads (parallel_cpu.h): items are shared out over up to hardware_concurrency() threads (including the
// caller) when the call reads at least kParallelBytes of K/V; smaller calls stay on the calling thread.
// Threads are created per call (about 20-50 us each, negligible above the threshold).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "../../libkvblock/error.h"
#include "decode.h"
#include "../common/types.h"
#include "../common/convert_cpu.h"
#include "../common/parallel_cpu.h"
#include "../common/simd_cpu.h"

namespace kvb {
namespace kern {
namespace cpu {

namespace {

constexpr int kTile = 32;                                // tokens per tile
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

// Per-thread scratch for KG kv heads; every array starts on a 64-byte boundary. GP = G rounded up to 4
// (padding heads).
struct Scratch {
  float* q;    // [KG][GP][D] query rows, pre-scaled
  float* acc;  // [KG][GP][D] running sum of p * v
  float* m;    // [KG][GP] running max (log2 units)
  float* l;    // [KG][GP] running sum of exp2(x - m)
  float* s;    // [GP][kTile] logits, then probabilities

  static int64_t padded(int64_t n) { return (n + 15) / 16 * 16; }
  static size_t floats(int64_t KG, int64_t G, int64_t D) {
    const int64_t GP = (G + 3) / 4 * 4;
    return size_t(2 * padded(KG * GP * D) + 2 * padded(KG * GP) + padded(GP * kTile));
  }
  Scratch(float* base, int64_t KG, int64_t G, int64_t D) {
    const int64_t GP = (G + 3) / 4 * 4;
    q = base;
    acc = q + padded(KG * GP * D);
    m = acc + padded(KG * GP * D);
    l = m + padded(KG * GP);
    s = l + padded(KG * GP);
  }
};

// Kv heads per work item: all of them while the per-thread state stays within ~256 KiB (it is re-read
// every tile), so that each item streams whole cache blocks.
int64_t heads_per_item(int64_t Hkv, int64_t G, int64_t D) {
  const int64_t per_head = 2 * ((G + 3) / 4 * 4) * D * int64_t(sizeof(float));
  return std::max<int64_t>(1, std::min<int64_t>(Hkv, (int64_t(256) << 10) / per_head));
}

struct Job {
  const Cache* c;
  const Attention* a;
  int64_t G, P, NP, es, qes;  // es: bytes per cache element, qes: per q / out element
  float* ws_m;
  float* ws_l;
  float* ws_o;
};

using ItemFn = void (*)(const Job&, Scratch&, int64_t, int64_t, int64_t, int64_t);

// The item body once per code path (AVX512-BF16 included: bf16 caches take pair dot products there).
#define KVB_SIMD_BODY "../decode/decode_item_cpu.inc"  // once per code path
#define KVB_SIMD_BF16_VARIANT
#include "../common/simd_variants_cpu.inc"
#undef KVB_SIMD_BF16_VARIANT
#undef KVB_SIMD_BODY

std::atomic<int> last_path{-2};  // isa * 2 + pairs

ItemFn pick_item(int64_t D, Dtype dt, int64_t G) {
  const simd::Isa isa = simd::isa();
  ItemFn f;
  bool pairs = false;
  switch (isa) {
#if KVB_SIMD_X86
    case simd::Isa::avx512bf16:
      f = avx512bf16::pick_item(D, dt, G);
      pairs = avx512bf16::pairs_for(dt);
      break;
    case simd::Isa::avx512: f = avx512::pick_item(D, dt, G); break;
    case simd::Isa::avx2: f = avx2::pick_item(D, dt, G); break;
#endif
    default: f = baseline::pick_item(D, dt, G);
  }
  last_path.store(int(isa) * 2 + pairs, std::memory_order_relaxed);
  return f;
}

// Reduce the partitions of one query head: weights l_p * 2^(m_p - M).
void reduce_head(const Job& j, int64_t s, int64_t h, float* tmp) {
  const Attention& a = *j.a;
  const int64_t D = j.c->head_dim, NP = j.NP;
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
  char* op = static_cast<char*>(a.out) + (a.q_row(s) * a.out_row_stride + h * a.out_head_stride) * j.qes;
  store_row(op, a.q_dtype, D, tmp, inv);
}

}  // namespace

DecodePath last_decode_path() {
  const int v = last_path.load(std::memory_order_relaxed);
  return DecodePath{v < 0 ? -1 : v / 2, v >= 0 && (v & 1) != 0};
}

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
  j.qes = int64_t(dtype_size(a.q_dtype));
  j.ws_m = static_cast<float*>(a.workspace);
  j.ws_l = j.ws_m ? j.ws_m + a.num_seqs * a.num_q_heads * j.NP : nullptr;
  j.ws_o = j.ws_l ? j.ws_l + a.num_seqs * a.num_q_heads * j.NP : nullptr;

  const ItemFn item = pick_item(D, c.dtype, G);
  if (!item) fail(Code::invalid_argument, "attention: head_dim %lld is not supported", (long long)D);

  // Items in (sequence, kv head group, partition) order; partitions past a sequence's end are skipped.
  // Groups of KG kv heads; smaller groups when there would be too few items to keep every thread busy.
  const unsigned hw = std::thread::hardware_concurrency();
  const int64_t NP = j.NP;
  int64_t KG = heads_per_item(Hkv, G, D);
  while (KG > 1 && a.num_seqs * NP * ((Hkv + KG - 1) / KG) < 2 * int64_t(hw == 0 ? 1 : hw)) KG = (KG + 1) / 2;
  const int64_t groups = (Hkv + KG - 1) / KG;
  const int64_t num_items = a.num_seqs * groups * NP;
  int64_t attended = 0;
  for (int64_t s = 0; s < a.num_seqs; ++s) {
    const Window w = window_of(a, a.seq_lens[s]);
    attended += w.len - w.lo + std::min(w.sink, w.lo);
  }
  const int64_t bytes = attended * Hkv * D * j.es * 2;
  const int64_t threads = threads_for(bytes, kParallelBytes / 2, num_items);

  const size_t per = Scratch::floats(KG, G, D);
  std::vector<float> scratch(per * size_t(threads) + 16);
  float* base = scratch.data();
  while (reinterpret_cast<uintptr_t>(base) % 64 != 0) ++base;

  parallel_for(num_items, threads, [&](int64_t tid, int64_t i) {
    const int64_t p = i % NP, sk = i / NP, kg = sk % groups, s = sk / groups;
    if (NP > 1 && p * j.P >= a.seq_lens[s]) return;  // past the end: no workspace row
    Scratch sc(base + per * size_t(tid), KG, G, D);
    item(j, sc, s, kg * KG, std::min(KG, Hkv - kg * KG), p);
  });

  if (NP == 1) return;
  float* tmp = base;  // the first thread's scratch is free again: D floats for the reduction
  for (int64_t s = 0; s < a.num_seqs; ++s)
    for (int64_t h = 0; h < a.num_q_heads; ++h) reduce_head(j, s, h, tmp);
}

}  // namespace cpu
}  // namespace kern
}  // namespace kvb
