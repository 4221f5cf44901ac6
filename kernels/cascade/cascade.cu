// CUDA shared-prefix ("cascade") decode attention (kvb_prefix_groups on a CUDA cache).
//
// Two kernels on the caller's stream:
//  1. The shared part: fp16 / bf16 caches run cascade_mma_kernel (cascade_mma.cu: tensor cores, 64-row
//     tiles of members x GQA heads, written per member as below); fp32 caches run
//     cascade_shared, grid (tile, kv head, key split): a tile stacks the query rows of up to kRows / group
//     members of one group (every query head of the kv head, so GQA heads share the keys too) and runs
//     them over one split of the group's shared keys, read once per tile through the first member's
//     table; each row's state (max m, sum l, unnormalised acc) goes to the workspace.
//  2. cascade_own, one warp per (sequence, query head), four keys at a time: the keys after its group's
//     shared prefix (all of them for a sequence in no group), then the log-sum-exp merge with the shared
//     splits (the split-KV decode's rule: out = sum acc_i 2^(m_i - M) / sum l_i 2^(m_i - M)).
// The description (members, tiles, shared lengths) travels by value in the launch parameters, so that a
// captured CUDA graph keeps it and nothing is copied to the device; descriptions too large for them run
// the plain kernel (cascade_decode returns false). cascade_shared's scores and value sums are CUDA-core
// fp32 (it serves fp32 caches); cascade_own is CUDA-core fp32 for every dtype.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <vector>

#include "../decode/decode.h"
#include "../common/cache.h"
#include "cascade.h"
#include "cascade_tiles.h"
#include "../decode/decode.cuh"
#include "cascade_mma.cuh"
#include "../common/cuda.cuh"

namespace kvb {
namespace kern {
namespace cuda {

namespace {

constexpr int kRows = 32;     // query rows per shared tile (members x group heads)
constexpr int kKeys = 32;     // keys per shared step
constexpr int kThreads = 128;  // both kernels
constexpr int kMaxMembers = 512, kMaxGroups = 32, kMaxTiles = 256;
constexpr int kMinSplitTokens = 512;
constexpr int kTargetCtas = 264;  // about two waves of an H100's 132 SMs for the shared kernel

struct CascadeParams : PagedIo {
  float* ws_m;  // [slot][head][split], slot = index into members
  float* ws_l;  // NaN: the split met a bad block id
  float* ws_o;  // [slot][head][split][head_dim], unnormalised
  FaultRecord* fault;
  int num_blocks, block_shift, max_blocks, num_q_heads, group, window, sink, num_splits, split_tokens;
  float q_scale, soft_cap, inv_cap;
  int num_members;
  int16_t members[kMaxMembers];     // batch rows, group after group
  int16_t member_group[kMaxMembers];
  int16_t tile_first[kMaxTiles];    // first index into members
  uint8_t tile_count[kMaxTiles];    // members in the tile
  int32_t shared_tokens[kMaxGroups];
  int16_t group_lead[kMaxGroups];   // the group's first member (whose table the shared kernel reads)
};
static_assert(sizeof(CascadeParams) <= 4096, "launch parameters are limited to 4 KB");

// Key k is masked for a row at position pos with window bounds lo (first key in the window) and sink.
__device__ __forceinline__ bool masked(int k, int pos, int lo, int sink) { return k > pos || (k < lo && k >= sink); }

template <bool CAP>
__device__ __forceinline__ float logit(const CascadeParams& p, float dot) {
  if constexpr (CAP) return p.soft_cap * tanhf(dot * p.inv_cap) * kLog2e;
  return dot;
}

template <typename T, int D>
__device__ __forceinline__ const T* kv_row(const CascadeParams& p, const char* base, int id, int tok, int kvh) {
  return reinterpret_cast<const T*>(base) + p.kv.row(id, tok, (1 << p.block_shift) - 1, kvh);
}

// Shared-memory rows of q / K / V are D + 4 floats: 16-byte aligned for float4 reads, and rows 4 apart
// start 4 banks apart, so that the 8 rows (q) or 4 keys (K, V) a warp reads at once hit distinct banks.
template <int D>
__host__ __device__ constexpr int row_floats() {
  return D + 4;
}

template <int D>
constexpr size_t shared_smem_floats() {
  return size_t(kRows) * row_floats<D>() + 2 * size_t(kKeys) * row_floats<D>() + size_t(kRows) * (kKeys + 1);
}

template <typename T, int D, bool CAP>
__global__ void __launch_bounds__(kThreads) cascade_shared(const __grid_constant__ CascadeParams p) {
  extern __shared__ float smem[];
  constexpr int DP = row_floats<D>();
  float* qs = smem;                 // [kRows][DP], pre-scaled
  float* ks = qs + kRows * DP;      // [kKeys][DP]
  float* vs = ks + kKeys * DP;      // [kKeys][DP]
  float* ps = vs + kKeys * DP;      // [kRows][kKeys + 1]
  __shared__ int bad_block;
  const int tile = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z, tid = threadIdx.x;
  const int first = p.tile_first[tile], G = p.group, rows = p.tile_count[tile] * G;
  const int g = p.member_group[first];
  const int S = p.shared_tokens[g];
  const int k0 = split * p.split_tokens, k1 = min(S, k0 + p.split_tokens);
  const int32_t* table = p.block_tables + int64_t(p.group_lead[g]) * p.max_blocks;
  if (tid == 0) bad_block = 0;
  for (int i = tid; i < kRows * D; i += kThreads) {
    const int rr = i / D, d = i % D;
    float x = 0.f;
    if (rr < rows) {
      const int seq = p.members[first + rr / G], h = kvh * G + rr % G;
      x = Vec<T>::load(reinterpret_cast<const T*>(p.q) + int64_t(seq) * p.q_row_stride + int64_t(h) * p.q_head_stride +
                       d) * p.q_scale;
    }
    qs[rr * DP + d] = x;
  }
  // Thread (r, sub): row r, keys sub + 4 j of each step; acc[4 i + e] is head_dim element
  // 4 (sub + 4 i) + e of the row (float4 reads of V, the 4 threads of a row on distinct banks).
  const int r = tid >> 2, sub = tid & 3;
  int pos = -1, lo = 0, sink = 0;
  if (r < rows) {
    const int len = p.seq_lens[p.members[first + r / G]];
    // A bad length is cascade_own's to report; here the row attends nothing.
    if (len >= S && len <= (p.max_blocks << p.block_shift)) pos = len - 1;
    if (p.window > 0) {
      lo = max(0, pos - p.window + 1);
      sink = p.sink;
    }
  }
  float m = -INFINITY, l = 0.f, acc[D / 4];
#pragma unroll
  for (int i = 0; i < D / 4; ++i) acc[i] = 0.f;
  constexpr int N = Vec<T>::N, CH = D / N;  // 16-byte chunks per row
  for (int t0 = k0; t0 < k1; t0 += kKeys) {
    __syncthreads();  // the previous step's K / V / p are consumed (and qs written, at the first step)
    for (int i = tid; i < kKeys * CH; i += kThreads) {
      const int tok = i / CH, ch = i % CH, k = t0 + tok;
      float f[N];
#pragma unroll
      for (int j = 0; j < N; ++j) f[j] = 0.f;
      float fv[N];
#pragma unroll
      for (int j = 0; j < N; ++j) fv[j] = 0.f;
      if (k < k1) {
        const int id = table[k >> p.block_shift];
        if (id < 0 || id >= p.num_blocks) {
          if (ch == 0)
            record_fault(p.fault, KVB_FAULT_BLOCK_ID, KVB_KERNEL_PAGED_ATTENTION, p.group_lead[g], k >> p.block_shift, id);
          atomicOr(&bad_block, 1);
        } else {
          Vec<T>::to_float(reinterpret_cast<const uint4*>(kv_row<T, D>(p, p.k, id, k, kvh))[ch], f);
          Vec<T>::to_float(reinterpret_cast<const uint4*>(kv_row<T, D>(p, p.v, id, k, kvh))[ch], fv);
        }
      }
#pragma unroll
      for (int j = 0; j < N; ++j) {
        ks[tok * DP + ch * N + j] = f[j];
        vs[tok * DP + ch * N + j] = fv[j];
      }
    }
    __syncthreads();
    float s[kKeys / 4];
#pragma unroll
    for (int j = 0; j < kKeys / 4; ++j) s[j] = 0.f;
    const float4* qr = reinterpret_cast<const float4*>(qs + r * DP);
#pragma unroll 2
    for (int d4 = 0; d4 < D / 4; ++d4) {
      const float4 x = qr[d4];
#pragma unroll
      for (int j = 0; j < kKeys / 4; ++j) {
        const float4 kv = reinterpret_cast<const float4*>(ks + (sub + 4 * j) * DP)[d4];
        s[j] = fmaf(x.x, kv.x, fmaf(x.y, kv.y, fmaf(x.z, kv.z, fmaf(x.w, kv.w, s[j]))));
      }
    }
    float mt = -INFINITY;
#pragma unroll
    for (int j = 0; j < kKeys / 4; ++j) {
      const int k = t0 + sub + 4 * j;
      s[j] = (k >= k1 || masked(k, pos, lo, sink)) ? -INFINITY : logit<CAP>(p, s[j]);
      mt = fmaxf(mt, s[j]);
    }
    mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
    mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
    const float mn = fmaxf(m, mt);
    const float alpha = mn == -INFINITY ? 1.f : exp2f(m - mn);
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < kKeys / 4; ++j) {
      const float e = mn == -INFINITY ? 0.f : exp2f(s[j] - mn);
      ps[r * (kKeys + 1) + sub + 4 * j] = e;
      sum += e;
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    l = l * alpha + sum;
    m = mn;
    __syncwarp();  // the row's 4 threads are in one warp
#pragma unroll
    for (int i = 0; i < D / 4; ++i) acc[i] *= alpha;
    const float* pr = ps + r * (kKeys + 1);
#pragma unroll 2
    for (int t = 0; t < kKeys; ++t) {
      const float pt = pr[t];
      const float4* vr = reinterpret_cast<const float4*>(vs + t * DP) + sub;
#pragma unroll
      for (int i = 0; i < D / 16; ++i) {
        const float4 v = vr[4 * i];
        acc[4 * i] = fmaf(pt, v.x, acc[4 * i]);
        acc[4 * i + 1] = fmaf(pt, v.y, acc[4 * i + 1]);
        acc[4 * i + 2] = fmaf(pt, v.z, acc[4 * i + 2]);
        acc[4 * i + 3] = fmaf(pt, v.w, acc[4 * i + 3]);
      }
    }
  }
  __syncthreads();
  if (r >= rows) return;
  const int h = kvh * G + r % G;
  const int64_t slot = (int64_t(first + r / G) * p.num_q_heads + h) * p.num_splits + split;
  if (sub == 0) {
    p.ws_m[slot] = m;
    p.ws_l[slot] = bad_block ? nan_f() : l;
  }
  float* o = p.ws_o + slot * D + 4 * sub;
#pragma unroll
  for (int i = 0; i < D / 16; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[16 * i + e] = acc[4 * i + e];
}

// cascade_own: a warp takes kOwnKeys keys at a time, 8 lanes per key; lane li of a key group holds
// head_dim elements [li * D / 8, (li + 1) * D / 8).
constexpr int kOwnKeys = 4;

// Lanes of key group 0 write the row: acc * inv (inv NaN: a faulty sequence, visibly wrong).
template <typename T, int D>
__device__ void write_row(const CascadeParams& p, int seq, int h, const float* acc, float inv) {
  constexpr int PL = D / 8;
  const int lane = threadIdx.x & 31;
  if (lane >= 8) return;
  T* op = reinterpret_cast<T*>(p.out) + int64_t(seq) * p.out_row_stride + int64_t(h) * p.out_head_stride + lane * PL;
#pragma unroll
  for (int i = 0; i < PL; ++i) op[i] = Vec<T>::from_float(acc[i] * inv);
}

// PL elements of a K or V row from 16-byte loads (PL * sizeof(T) is a multiple of 16 for D >= 64).
template <typename T, int PL>
__device__ __forceinline__ void load_part(const T* src, float* f) {
  constexpr int N = Vec<T>::N;
  const uint4* u = reinterpret_cast<const uint4*>(src);
#pragma unroll
  for (int c = 0; c < PL / N; ++c) Vec<T>::to_float(u[c], f + c * N);
}

template <typename T, int D, bool CAP>
__global__ void __launch_bounds__(kThreads) cascade_own(const __grid_constant__ CascadeParams p) {
  constexpr int PL = D / 8;
  static_assert(PL % Vec<T>::N == 0, "a lane's part of a row is whole 16-byte vectors");
  const int lane = threadIdx.x & 31, kg = lane >> 3, li = lane & 7;
  const int h = blockIdx.x * (kThreads / 32) + (threadIdx.x >> 5), seq = blockIdx.y;
  if (h >= p.num_q_heads) return;
  float acc[PL];
#pragma unroll
  for (int i = 0; i < PL; ++i) acc[i] = 0.f;
  const int len = p.seq_lens[seq];
  if (len < 0 || len > (p.max_blocks << p.block_shift)) {
    if (lane == 0) record_fault(p.fault, KVB_FAULT_SEQ_LEN, KVB_KERNEL_PAGED_ATTENTION, seq, -1, len);
    write_row<T, D>(p, seq, h, acc, nan_f());
    return;
  }
  // The sequence's slot in the description (-1: in no group).
  int slot = -1;
  for (int i = lane; i < p.num_members; i += 32)
    if (p.members[i] == seq) slot = i;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) slot = max(slot, __shfl_xor_sync(0xffffffffu, slot, o));
  const int32_t* table = p.block_tables + int64_t(seq) * p.max_blocks;
  const int S = slot >= 0 ? p.shared_tokens[p.member_group[slot]] : 0;
  bool bad = false;
  if (S > len) {
    if (lane == 0) record_fault(p.fault, KVB_FAULT_SEQ_LEN, KVB_KERNEL_PAGED_ATTENTION, seq, -1, len);
    bad = true;
  } else if (slot >= 0) {  // the shared columns must be the lead's blocks (the shared kernel read those)
    const int32_t* lead = p.block_tables + int64_t(p.group_lead[p.member_group[slot]]) * p.max_blocks;
    for (int c = lane; c < (S >> p.block_shift); c += 32)
      if (table[c] != lead[c]) {
        if (h == 0) record_fault(p.fault, KVB_FAULT_BLOCK_ID, KVB_KERNEL_PAGED_ATTENTION, seq, c, table[c]);
        bad = true;
      }
  }
  if (__any_sync(0xffffffffu, bad)) {
    write_row<T, D>(p, seq, h, acc, nan_f());
    return;
  }
  const int kvh = h / p.group;
  float q[PL];
  {
    const T* qp = reinterpret_cast<const T*>(p.q) + int64_t(seq) * p.q_row_stride + int64_t(h) * p.q_head_stride;
#pragma unroll
    for (int i = 0; i < PL; ++i) q[i] = Vec<T>::load(qp + li * PL + i) * p.q_scale;
  }
  const int pos = len - 1;
  const int lo = p.window > 0 ? max(0, pos - p.window + 1) : 0, sink = p.window > 0 ? p.sink : 0;
  // Own keys [S, len) less the window's gap [sink, lo): [S, min(len, sink)) then [max(S, lo), len).
  const bool gap = lo > sink;
  const int r0 = S, n0 = max(0, (gap ? min(len, sink) : len) - S);
  const int r1 = gap ? max(S, lo) : len, n1 = max(0, len - r1);
  float m = -INFINITY, l = 0.f;
  for (int base = 0; base < n0 + n1; base += kOwnKeys) {
    const int i = base + kg;
    const bool valid = i < n0 + n1;
    const int k = i < n0 ? r0 + i : r1 + (i - n0);
    float kf[PL], vf[PL];
#pragma unroll
    for (int e = 0; e < PL; ++e) kf[e] = vf[e] = 0.f;
    if (valid) {
      const int id = table[k >> p.block_shift];
      if (id < 0 || id >= p.num_blocks) {
        if (li == 0) record_fault(p.fault, KVB_FAULT_BLOCK_ID, KVB_KERNEL_PAGED_ATTENTION, seq, k >> p.block_shift, id);
        bad = true;
      } else {
        load_part<T, PL>(kv_row<T, D>(p, p.k, id, k, kvh) + li * PL, kf);
        load_part<T, PL>(kv_row<T, D>(p, p.v, id, k, kvh) + li * PL, vf);
      }
    }
    if (__any_sync(0xffffffffu, bad)) break;
    float dot = 0.f;
#pragma unroll
    for (int e = 0; e < PL; ++e) dot = fmaf(q[e], kf[e], dot);
    dot += __shfl_xor_sync(0xffffffffu, dot, 1);
    dot += __shfl_xor_sync(0xffffffffu, dot, 2);
    dot += __shfl_xor_sync(0xffffffffu, dot, 4);
    const float sc = valid ? logit<CAP>(p, dot) : -INFINITY;
    float mt = fmaxf(sc, __shfl_xor_sync(0xffffffffu, sc, 8));
    mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 16));
    const float mn = fmaxf(m, mt);  // finite: key group 0 is always valid
    const float alpha = exp2f(m - mn), e = valid ? exp2f(sc - mn) : 0.f;
    float es = e + __shfl_xor_sync(0xffffffffu, e, 8);
    es += __shfl_xor_sync(0xffffffffu, es, 16);
    l = l * alpha + es;
    m = mn;
#pragma unroll
    for (int d = 0; d < PL; ++d) acc[d] = fmaf(e, vf[d], acc[d] * alpha);
  }
  if (__any_sync(0xffffffffu, bad)) {
    write_row<T, D>(p, seq, h, acc, nan_f());
    return;
  }
  // The key groups' sums (they share m), then the merge with the shared splits: M the largest max of
  // the parts that attended something.
#pragma unroll
  for (int d = 0; d < PL; ++d) {
    acc[d] += __shfl_xor_sync(0xffffffffu, acc[d], 8);
    acc[d] += __shfl_xor_sync(0xffffffffu, acc[d], 16);
  }
  float M = l > 0.f ? m : -INFINITY;
  const int64_t wbase = slot >= 0 ? (int64_t(slot) * p.num_q_heads + h) * p.num_splits : 0;
  const int nsplit = slot >= 0 ? p.num_splits : 0;
  for (int sp = 0; sp < nsplit; ++sp)
    if (!(p.ws_l[wbase + sp] <= 0.f)) M = fmaxf(M, p.ws_m[wbase + sp]);  // l > 0, or NaN (a bad block)
  float L = 0.f;
  if (l > 0.f) {
    const float w = exp2f(m - M);
    L = l * w;
#pragma unroll
    for (int d = 0; d < PL; ++d) acc[d] *= w;
  }
  for (int sp = 0; sp < nsplit; ++sp) {
    const float ls = p.ws_l[wbase + sp];
    if (ls <= 0.f) continue;
    const float w = exp2f(p.ws_m[wbase + sp] - M);
    L += ls * w;  // NaN propagates to the output
    const float* o = p.ws_o + (wbase + sp) * D + li * PL;
#pragma unroll
    for (int d = 0; d < PL; ++d) acc[d] = fmaf(w, o[d], acc[d]);
  }
  write_row<T, D>(p, seq, h, acc, L > 0.f ? 1.f / L : (L == L ? 0.f : L));
}

using KernelFn = void (*)(const CascadeParams);

template <typename T, int D>
void kernels_for(bool cap, KernelFn* shared_fn, KernelFn* own_fn) {
  *shared_fn = cap ? cascade_shared<T, D, true> : cascade_shared<T, D, false>;
  *own_fn = cap ? cascade_own<T, D, true> : cascade_own<T, D, false>;
}

template <typename T>
bool kernels_for_type(int D, bool cap, KernelFn* shared_fn, KernelFn* own_fn, size_t* smem) {
  switch (D) {
    case 64: kernels_for<T, 64>(cap, shared_fn, own_fn); *smem = shared_smem_floats<64>() * 4; return true;
    case 128: kernels_for<T, 128>(cap, shared_fn, own_fn); *smem = shared_smem_floats<128>() * 4; return true;
    case 256: kernels_for<T, 256>(cap, shared_fn, own_fn); *smem = shared_smem_floats<256>() * 4; return true;
    default: return false;
  }
}

// cascade_own alone, for the tensor-core shared part (fp16 / bf16).
template <typename T>
KernelFn own_kernel(int D, bool cap) {
  switch (D) {
    case 64: return cap ? cascade_own<T, 64, true> : cascade_own<T, 64, false>;
    case 128: return cap ? cascade_own<T, 128, true> : cascade_own<T, 128, false>;
    default: return cap ? cascade_own<T, 256, true> : cascade_own<T, 256, false>;
  }
}

// The launch shape of a description, or fits = false (the plain kernel runs).
struct Shape {
  bool fits = false, mma = false;
  int num_tiles = 0, num_members = 0, num_splits = 1, split_tokens = 0;
  size_t workspace_bytes = 0;
};

Shape shape_of(const Cache& c, const Attention& a, const kvb_prefix_groups& g) {
  Shape s;
  const int64_t G = a.num_q_heads / c.num_kv_heads;
  // fp16 / bf16: the tensor-core shared kernel (cascade_mma.cu), 64-row tiles a member may span.
  s.mma = cascade_mma_supported(c);
  if (g.num_groups == 0 || g.num_groups > uint32_t(kMaxGroups) || (!s.mma && G > kRows) || a.num_seqs > INT16_MAX)
    return s;
  if (!(c.dtype == Dtype::f16 || c.dtype == Dtype::bf16 || c.dtype == Dtype::f32)) return s;
  if (c.head_dim != 64 && c.head_dim != 128 && c.head_dim != 256) return s;
  const int64_t per_tile = kRows / G;
  int64_t members = 0, tiles = 0, max_shared = 0;
  for (uint32_t gi = 0; gi < g.num_groups; ++gi) {
    const int64_t n = int64_t(g.group_start[gi + 1]) - g.group_start[gi];
    members += n;
    tiles += s.mma ? (n * G + ctiles::kTileRows - 1) / ctiles::kTileRows : (n + per_tile - 1) / per_tile;
    max_shared = std::max<int64_t>(max_shared, int64_t(g.shared_blocks[gi]) * c.block_size);
  }
  if (members > kMaxMembers || (!s.mma && tiles > kMaxTiles) || tiles > INT_MAX / 2 || max_shared > INT_MAX / 2)
    return s;
  s.fits = true;
  s.num_tiles = int(tiles);
  s.num_members = int(members);
  const int64_t ctas = tiles * c.num_kv_heads;
  if (s.mma) {
    cascade_mma_splits(ctas, max_shared, c.head_dim, 65535, &s.num_splits, &s.split_tokens);
  } else {
    int64_t ns = std::max<int64_t>(1, (kTargetCtas + ctas - 1) / ctas);
    ns = std::min<int64_t>(ns, std::max<int64_t>(1, max_shared / kMinSplitTokens));
    ns = std::min<int64_t>(ns, 65535);
    s.num_splits = int(ns);
    int64_t st = (max_shared + ns - 1) / ns;
    s.split_tokens = int(std::max<int64_t>(kKeys, (st + kKeys - 1) / kKeys * kKeys));
  }
  const size_t rows = size_t(members) * size_t(a.num_q_heads) * size_t(s.num_splits);
  s.workspace_bytes = rows * (size_t(c.head_dim) + 2) * sizeof(float) + 64;
  return s;
}

// The tensor-core shared kernel's parameters for a decode: the shared tiles only (cascade_own does
// each member's own keys and the merge), writing the parts cascade_own reads ([member][head][split]).
CascadeMmaParams mma_params(const Attention& a, const CascadeParams& p, const Shape& s) {
  CascadeMmaParams mp{};
  PrefillParams& b = mp.b;
  static_cast<AttnIo&>(b) = p;
  b.query_start = nullptr;
  b.seq_lens = p.seq_lens;
  b.block_tables = p.block_tables;
  b.ws_m = p.ws_m, b.ws_l = p.ws_l, b.ws_o = p.ws_o;
  b.num_seqs = int(a.num_seqs), b.total_q = int(a.num_seqs);
  b.num_blocks = p.num_blocks, b.block_shift = p.block_shift, b.max_blocks = p.max_blocks;
  b.num_q_heads = p.num_q_heads, b.group = p.group, b.window = p.window, b.sink = p.sink;
  b.num_splits = s.num_splits, b.split_tokens = s.split_tokens;
  b.scale = a.scale, b.soft_cap = a.soft_cap, b.q_scale = a.scale * kLog2e;
  b.fault = p.fault;
  mp.shared_tiles = s.num_tiles, mp.own_tiles = 0;
  mp.shared_splits = s.num_splits, mp.own_splits = 0, mp.parts = s.num_splits;
  mp.shared_split_tokens = s.split_tokens, mp.own_split_tokens = s.split_tokens;
  mp.by_member = 1;
  mp.kernel = KVB_KERNEL_PAGED_ATTENTION;
  return mp;
}

}  // namespace

// The host arrays of the description against the batch (the device arrays are the kernels' to check).
void check_prefix_groups(int64_t num_seqs, int64_t max_blocks, const kvb_prefix_groups& g, const char* kernel) {
  if (!g.group_start || !g.members || !g.shared_blocks)
    fail(Code::invalid_argument, "%s: prefix_groups has %u groups but a NULL group_start, members or "
         "shared_blocks", kernel, g.num_groups);
  if (g.group_start[0] != 0)
    fail(Code::invalid_argument, "%s: prefix_groups.group_start[0] = %d is not 0", kernel, g.group_start[0]);
  // Per-thread scratch reused across calls: a warm decode / prefill loop allocates nothing here.
  thread_local std::vector<char> seen;
  seen.assign(size_t(num_seqs), 0);
  for (uint32_t gi = 0; gi < g.num_groups; ++gi) {
    const int64_t m0 = g.group_start[gi], m1 = g.group_start[gi + 1];
    if (m1 <= m0 || m1 - m0 > num_seqs)
      fail(Code::invalid_argument, "%s: prefix_groups.group_start[%u] = %lld, [%u] = %lld: a group needs 1 "
           "to num_seqs members", kernel, gi, (long long)m0, gi + 1, (long long)m1);
    if (g.shared_blocks[gi] < 0 || g.shared_blocks[gi] > max_blocks)
      fail(Code::invalid_argument, "%s: prefix_groups.shared_blocks[%u] = %d is not in [0, "
           "max_blocks_per_seq = %lld]", kernel, gi, g.shared_blocks[gi], (long long)max_blocks);
    for (int64_t k = m0; k < m1; ++k) {
      const int32_t s = g.members[k];
      if (s < 0 || s >= num_seqs)
        fail(Code::invalid_argument, "%s: prefix_groups.members[%lld] = %d is not a row in [0, %lld)", kernel,
             (long long)k, s, (long long)num_seqs);
      if (seen[size_t(s)])
        fail(Code::invalid_argument, "%s: prefix_groups.members[%lld] = %d is in two groups", kernel, (long long)k, s);
      seen[size_t(s)] = 1;
    }
  }
}

size_t cascade_workspace(const Cache& c, const Attention& a, const kvb_prefix_groups& g) {
  check_prefix_groups(a.num_seqs, a.max_blocks, g, "paged attention");
  const Shape s = shape_of(c, a, g);
  return s.fits ? s.workspace_bytes : 0;
}

bool cascade_decode(const Cache& c, const Attention& a, const kvb_prefix_groups& g, void* workspace,
                    size_t workspace_size, void* stream) {
  check_prefix_groups(a.num_seqs, a.max_blocks, g, "paged attention");
  const Shape s = shape_of(c, a, g);
  if (!s.fits || workspace == nullptr || workspace_size < s.workspace_bytes) return false;
  const int64_t es = int64_t(c.elem());
  if (kv_align_bits(c) % 16 != 0) return false;  // the plain kernel reports it
  if (uintptr_t(a.q) % uintptr_t(es) != 0 || uintptr_t(a.out) % uintptr_t(es) != 0 ||
      uintptr_t(a.block_tables) % 4 != 0 || uintptr_t(a.seq_lens) % 4 != 0 || c.num_blocks > INT_MAX ||
      a.max_blocks * c.block_size > int64_t(INT_MAX) - 4096 || c.num_kv_heads > 65535)
    return false;
  DeviceGuard guard(c.device_index);
  check_attn_pointers(c, a);
  check_pointer(workspace, c.device_index, "args.workspace");

  CascadeParams p;
  static_cast<PagedIo&>(p) = paged_io(c, a);
  const size_t rows = size_t(s.num_members) * size_t(a.num_q_heads) * size_t(s.num_splits);
  char* ws = static_cast<char*>(workspace);
  while (uintptr_t(ws) % 16 != 0) ++ws;
  p.ws_m = reinterpret_cast<float*>(ws);
  p.ws_l = p.ws_m + rows;
  p.ws_o = p.ws_l + rows;
  p.fault = fault_record(c.device_index);
  put_attn_shape(p, attn_shape(c, a));
  p.num_splits = s.num_splits;
  p.split_tokens = s.split_tokens;
  const bool cap = a.soft_cap > 0.f;
  p.q_scale = cap ? a.scale : a.scale * kLog2e;
  p.soft_cap = a.soft_cap;
  p.inv_cap = cap ? 1.f / a.soft_cap : 0.f;
  p.num_members = s.num_members;
  const int per_tile = kRows / p.group;
  int nt = 0;
  for (uint32_t gi = 0; gi < g.num_groups; ++gi) {
    const int m0 = g.group_start[gi], m1 = g.group_start[gi + 1];
    p.shared_tokens[gi] = int32_t(int64_t(g.shared_blocks[gi]) * c.block_size);
    p.group_lead[gi] = int16_t(g.members[m0]);
    for (int k = m0; k < m1; ++k) {
      p.members[k] = int16_t(g.members[k]);
      p.member_group[k] = int16_t(gi);
    }
    for (int k = m0; k < m1 && !s.mma; k += per_tile, ++nt) {  // the CUDA-core shared tiles
      p.tile_first[nt] = int16_t(k);
      p.tile_count[nt] = uint8_t(std::min(per_tile, m1 - k));
    }
  }

  cudaStream_t st = as_stream(stream);
  KernelFn shared_fn = nullptr, own_fn = nullptr;
  size_t smem = 0;
  bool ok = false;
  if (s.mma) {
    // 16-byte cp.async of q rows (the plain kernel runs otherwise).
    const uint64_t qalign = uint64_t(uintptr_t(a.q)) | uint64_t(a.q_row_stride * es) | uint64_t(a.q_head_stride * es);
    if (qalign % 16 != 0) return false;
    CascadeMmaParams mp = mma_params(a, p, s);
    cascade_mma_describe(mp, g, c.block_size);
    if (!launch_cascade_mma(mp, c, cap, st)) return false;
    own_fn = c.dtype == Dtype::f16 ? own_kernel<__half>(int(c.head_dim), cap)
                                   : own_kernel<__nv_bfloat16>(int(c.head_dim), cap);
    const unsigned head_blocks = unsigned((a.num_q_heads + kThreads / 32 - 1) / (kThreads / 32));
    launch(own_fn, dim3(head_blocks, unsigned(a.num_seqs)), dim3(kThreads), 0, st, "cascade_own", p);
    return true;
  }
  switch (c.dtype) {
    case Dtype::f32: ok = kernels_for_type<float>(int(c.head_dim), cap, &shared_fn, &own_fn, &smem); break;
    default: break;  // fp16 / bf16 took the tensor-core path above
  }
  if (!ok) return false;
  {
    // A device without that much shared memory per block runs the plain kernel. (Relaxed: an attribute
    // set while the caller captures a graph must not break the capture.)
    RelaxedCapture relaxed;
    if (cudaFuncSetAttribute(reinterpret_cast<const void*>(shared_fn), cudaFuncAttributeMaxDynamicSharedMemorySize,
                             int(smem)) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
  }
  launch(shared_fn, dim3(unsigned(s.num_tiles), unsigned(c.num_kv_heads), unsigned(s.num_splits)), dim3(kThreads), smem,
         st, "cascade_shared", p);
  const unsigned head_blocks = unsigned((a.num_q_heads + kThreads / 32 - 1) / (kThreads / 32));
  launch(own_fn, dim3(head_blocks, unsigned(a.num_seqs)), dim3(kThreads), 0, st, "cascade_own", p);
  return true;
}

}  // namespace cuda
}  // namespace kern
}  // namespace kvb
