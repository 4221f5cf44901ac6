// CUDA prefill / extend attention for fp32 caches: one tiled kernel (geometry in
// kernels/prefill/prefill_fp32_tiles.h), K / V tiles through shared memory with 16-byte cp.async in two stages,
// serving the CTA's query heads of one kv head; online softmax in base 2. Two arithmetic variants:
// - exact fp32 (the default), on CUDA cores: each thread computes the scores and outputs an mma
//   accumulator fragment would hold (rows g, g + 8 x columns 2q, 2q + 1 of each 8-wide tile), by fp32
//   FMAs on 16-byte shared-memory loads (2 rows x 8 keys, then 2 rows x D/4 dims per thread);
// - TF32 tensor cores, when the caller allows it (kvb_prefill_args.allow_tf32): mma.sync m16n8k8 with
//   q, k, v and the softmax weights rounded to TF32 (10-bit mantissa, round to nearest) and fp32
//   accumulation.
// fp16 / bf16 use the tensor-core kernel in prefill.cu.
#include <climits>

#include "../common/mma.cuh"
#include "prefill_fp32_tiles.h"
#include "prefill.h"
#include "prefill_tiles.h"
#include "prefill.cuh"

namespace kvb {
namespace kern {
namespace cuda {

namespace {

constexpr float kLog2e = 1.4426950408889634f;


__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t u;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(u) : "f"(x));
  return u;
}

__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

constexpr int kTf32MaxWarps = 4;

// Grid (max(ceil(total_q / 16), num_seqs), num_q_heads / heads_per_cta); blockDim.x = 32 x heads_per_cta.
// CTA x < num_seqs also checks sequence x once (a faulty sequence may own no row at all). A row of a
// faulty sequence is NaN, as is every row of a segment that met a bad block id.
__device__ __forceinline__ float dot4(const float4& a, const float4& b, float c) {
  return fmaf(a.w, b.w, fmaf(a.z, b.z, fmaf(a.y, b.y, fmaf(a.x, b.x, c))));
}

template <int D, bool TF32>
__global__ void __launch_bounds__(32 * kTf32MaxWarps) prefill_tiled_kernel(const PrefillParams p) {
  using namespace f32tiles;
  constexpr int BN = key_tile(D), RS = row_stride(D), C = D / 4;  // C: 16-byte chunks per row
  // k-steps of S = Q K^T unrolled: all 8 at D 64 (ptxas spilled 24 bytes on sm_90 with 4), 4 above.
  constexpr int kKUnroll = D <= 64 ? D / 8 : 4;
  extern __shared__ __align__(16) float smem[];
  __shared__ int s_bad, s_tree_base, s_tree_row;
  const int warps = int(blockDim.x >> 5), nthreads = int(blockDim.x);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  float* sQ = smem + warp * kRows * RS;  // this warp's Q rows, as TF32 bit patterns
  const uint32_t sK = uint32_t(__cvta_generic_to_shared(smem + warps * kRows * RS));  // [2][BN][RS]
  const uint32_t sV = sK + 2 * BN * RS * 4;
  const float* fK = smem + warps * kRows * RS;
  const float* fV = fK + 2 * BN * RS;
  constexpr int PS = BN + 4;  // exact variant: this warp's P (16 x BN), shared by its lanes
  float* sP = smem + warps * kRows * RS + 4 * BN * RS + warp * kRows * PS;

  if (blockIdx.x < unsigned(p.num_seqs) && blockIdx.y == 0 && tid == 0) {
    const SeqView f = seq_view(p, int(blockIdx.x));
    if (f.fault != KVB_FAULT_NONE)
      record_fault(p.fault, f.fault, KVB_KERNEL_PREFILL_ATTENTION, f.fault_index, -1, f.fault_value);
  }
  const int h = int(blockIdx.y) * warps + warp;
  const int kvh = int(blockIdx.y) * warps / p.group;  // every warp's head h / group
  const int r_end = min(int(blockIdx.x) * kRows + kRows, p.total_q);
  const int g = frag_g(lane), q4 = frag_q(lane);

  for (int r = int(blockIdx.x) * kRows; r < r_end;) {
    const SeqView sv = seq_view(p, seq_of_row(p, r));
    float* const out_h = reinterpret_cast<float*>(p.out) + int64_t(h) * p.out_head_stride;
    if (sv.fault != KVB_FAULT_NONE || r < sv.row0 || r >= sv.row0 + sv.q_len) {
      // One row at a time: NaN for a faulty sequence, zeros for a row no sequence owns (as the CUDA-core kernel).
      const float x = sv.fault != KVB_FAULT_NONE ? nan_f() : 0.f;
      for (int d = lane; d < D; d += 32) out_h[int64_t(r) * p.out_row_stride + d] = x;
      ++r;
      continue;
    }
    const int e = min(r_end, sv.row0 + sv.q_len), n = e - r;  // this segment: rows [r, e) of one sequence
    const int pos_first = sv.len - sv.q_len + (r - sv.row0), pos_last = pos_first + n - 1;

    // Q rows of this warp's head (rows past the segment: zeros), rounded to TF32 once for TF32.
    const float* qh = reinterpret_cast<const float*>(p.q) + int64_t(h) * p.q_head_stride;
    for (int x = lane; x < kRows * C; x += 32) {
      const int i = x / C, c = x - i * C;
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (i < n) v = *reinterpret_cast<const float4*>(qh + int64_t(r + i) * p.q_row_stride + c * 4);
      if constexpr (TF32) {
        uint4 u;
        u.x = to_tf32(v.x), u.y = to_tf32(v.y), u.z = to_tf32(v.z), u.w = to_tf32(v.w);
        *reinterpret_cast<uint4*>(sQ + i * RS + c * 4) = u;
      } else {
        *reinterpret_cast<float4*>(sQ + i * RS + c * 4) = v;
      }
    }
    if (tid == 0) {
      // A token tree (q_len <= 64 with a mask): new keys from s_tree_base on (INT_MAX: none) are seen by
      // the rows' words, tree_mask[pos + s_tree_row]; shared, so the tile loop keeps no registers for them.
      const int base = sv.len - sv.q_len;
      s_bad = 0;
      s_tree_base = p.tree_mask != nullptr && sv.q_len <= int(kTreeMaxTokens) ? base : INT_MAX;
      s_tree_row = sv.row0 - base;
    }
    __syncthreads();

    const KeyWalk walk = key_walk(pos_first, pos_last, p.window, p.sink, BN);
    const int nt = walk.count();
    const int32_t* table = p.block_tables + int64_t(sv.seq) * p.max_blocks;
    const int64_t head_off = p.kv.head(kvh);
    const int kmask = (1 << p.block_shift) - 1;
    auto load_tile = [&](int i) {
      const uint32_t st = uint32_t(i & 1) * BN * RS * 4;
      const int t0 = walk.tile(i) * BN;
      for (int x = tid; x < BN * C; x += nthreads) {
        const int kr = x / C, c = x - kr * C, t = t0 + kr;
        int64_t off = -1;
        if (key_needed(t, pos_first, pos_last, p.window, p.sink)) {
          const int id = table[t >> p.block_shift];
          if (id >= 0 && id < p.num_blocks) {
            off = p.kv.row(id, t, kmask) + head_off + c * 4;
          } else if (atomicExch(&s_bad, 1) == 0) {  // recorded once per (segment, CTA)
            record_fault(p.fault, KVB_FAULT_BLOCK_ID, KVB_KERNEL_PREFILL_ATTENTION, sv.seq, t >> p.block_shift, id);
          }
        }
        const uint32_t dst = uint32_t(kr * RS + c * 4) * 4 + st;
        cp_async16(sK + dst, reinterpret_cast<const float*>(p.k) + (off >= 0 ? off : 0), off >= 0 ? 16 : 0);
        cp_async16(sV + dst, reinterpret_cast<const float*>(p.v) + (off >= 0 ? off : 0), off >= 0 ? 16 : 0);
      }
    };

    float o[D / 8][4];
#pragma unroll
    for (int d = 0; d < D / 8; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
    // Positions of this thread's rows g and g + 8 (padding rows copy the segment's last).
    const int pos0 = pos_first + min(g, n - 1), pos1 = pos_first + min(g + 8, n - 1);

    if (nt > 0) load_tile(0);
    cp_async_commit();
    for (int i = 0; i < nt; ++i) {
      if (i + 1 < nt) load_tile(i + 1);  // its stage was last read before the barrier that ended i - 1
      cp_async_commit();
      cp_async_wait<1>();  // tile i has landed (this thread's copies) ...
      __syncthreads();     // ... everyone's
      const float* tK = fK + (i & 1) * BN * RS;
      const float* tV = fV + (i & 1) * BN * RS;
      const int t0 = walk.tile(i) * BN;

      float s[BN / 8][4];
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
      if constexpr (TF32) {
#pragma unroll kKUnroll
        for (int kk = 0; kk < D / 8; ++kk) {
          uint32_t a[4];
#pragma unroll
          for (int x = 0; x < 4; ++x) a[x] = __float_as_uint(sQ[a_row(lane, x) * RS + kk * 8 + a_col(lane, x)]);
#pragma unroll
          for (int j = 0; j < BN / 8; ++j) {
            const float* kp = tK + (j * 8 + sk_key(lane)) * RS + kk * 8;
            mma_tf32(s[j], a, to_tf32(kp[sk_dim(lane, 0)]), to_tf32(kp[sk_dim(lane, 1)]));
          }
        }
      } else {  // s[j][e] = Q[c_row(e)] . K[8j + c_col(e)]: rows g, g + 8 x keys 2q, 2q + 1
#pragma unroll 2
        for (int d = 0; d < D; d += 4) {
          const float4 qa = *reinterpret_cast<const float4*>(sQ + g * RS + d);
          const float4 qb = *reinterpret_cast<const float4*>(sQ + (g + 8) * RS + d);
#pragma unroll
          for (int j = 0; j < BN / 8; ++j) {
            const float4 ka = *reinterpret_cast<const float4*>(tK + (j * 8 + 2 * q4) * RS + d);
            const float4 kb = *reinterpret_cast<const float4*>(tK + (j * 8 + 2 * q4 + 1) * RS + d);
            s[j][0] = dot4(qa, ka, s[j][0]), s[j][1] = dot4(qa, kb, s[j][1]);
            s[j][2] = dot4(qb, ka, s[j][2]), s[j][3] = dot4(qb, kb, s[j][3]);
          }
        }
      }

      // Base-2 logits, the mask, online softmax (rows g and g + 8; a row's 8-key columns sit in a quad).
      float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int x = 0; x < 4; ++x) {
          float v = p.soft_cap > 0.f ? p.soft_cap * tanhf(s[j][x] * p.scale / p.soft_cap) * kLog2e : s[j][x] * p.q_scale;
          const int t = t0 + j * 8 + c_col(lane, x);
          if (!attends(t, x < 2 ? pos0 : pos1, p.window, p.sink)) v = -INFINITY;
          s[j][x] = v;
          if (x < 2) mx0 = fmaxf(mx0, v); else mx1 = fmaxf(mx1, v);
        }
      const int tree_base = s_tree_base;
      if (t0 + BN > tree_base) {  // a tile reaching a tree's new keys: their bits, and the maxima again
        const uint64_t* words = p.tree_mask + s_tree_row;
        const uint64_t w0 = __ldg(words + pos0), w1 = __ldg(words + pos1);
        mx0 = mx1 = -INFINITY;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
          for (int x = 0; x < 4; ++x) {
            const int t = t0 + j * 8 + c_col(lane, x);
            if (!tiles::tree_sees(t, x < 2 ? pos0 : pos1, tree_base, x < 2 ? w0 : w1)) s[j][x] = -INFINITY;
            if (x < 2) mx0 = fmaxf(mx0, s[j][x]); else mx1 = fmaxf(mx1, s[j][x]);
          }
      }
#pragma unroll
      for (int o2 = 1; o2 <= 2; o2 <<= 1) {
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o2));
      }
      const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
      const float u0 = n0 == -INFINITY ? 0.f : n0, u1 = n1 == -INFINITY ? 0.f : n1;  // no NaN from -inf - -inf
      const float al0 = exp2f(m0 - u0), al1 = exp2f(m1 - u1);
      m0 = n0, m1 = n1;
      l0 *= al0, l1 *= al1;
#pragma unroll
      for (int d = 0; d < D / 8; ++d) o[d][0] *= al0, o[d][1] *= al0, o[d][2] *= al1, o[d][3] *= al1;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
        s[j][0] = exp2f(s[j][0] - u0), s[j][1] = exp2f(s[j][1] - u0);
        s[j][2] = exp2f(s[j][2] - u1), s[j][3] = exp2f(s[j][3] - u1);
        l0 += s[j][0] + s[j][1], l1 += s[j][2] + s[j][3];
      }

      if constexpr (TF32) {
        // O += P V: P straight from the S accumulators (f32tiles::pv_from_c), V rows permuted to match.
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
          uint32_t a[4];
#pragma unroll
          for (int x = 0; x < 4; ++x) a[x] = to_tf32(s[j][pv_from_c(x)]);
          const float* v0 = tV + (j * 8 + pv_key(lane, 0)) * RS + pv_dim(lane);
          const float* v1 = tV + (j * 8 + pv_key(lane, 1)) * RS + pv_dim(lane);
#pragma unroll
          for (int d = 0; d < D / 8; ++d) mma_tf32(o[d], a, to_tf32(v0[d * 8]), to_tf32(v1[d * 8]));
        }
      } else {
        // O[c_row(e)][8d + c_col(e)] += P[row][k] V[k][..]: P through the warp's shared rows.
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
          for (int x = 0; x < 4; ++x) sP[c_row(lane, x) * PS + j * 8 + c_col(lane, x)] = s[j][x];
        __syncwarp();
#pragma unroll 4
        for (int k = 0; k < BN; ++k) {
          const float pa = sP[g * PS + k], pb = sP[(g + 8) * PS + k];
          const float* vr = tV + k * RS + 2 * q4;
#pragma unroll
          for (int d = 0; d < D / 8; ++d) {
            const float2 v = *reinterpret_cast<const float2*>(vr + d * 8);
            o[d][0] = fmaf(pa, v.x, o[d][0]), o[d][1] = fmaf(pa, v.y, o[d][1]);
            o[d][2] = fmaf(pb, v.x, o[d][2]), o[d][3] = fmaf(pb, v.y, o[d][3]);
          }
        }
      }
      __syncthreads();  // everyone is done with stage i & 1 before tile i + 2 refills it
    }
    cp_async_wait<0>();

#pragma unroll
    for (int o2 = 1; o2 <= 2; o2 <<= 1) {
      l0 += __shfl_xor_sync(0xffffffffu, l0, o2);
      l1 += __shfl_xor_sync(0xffffffffu, l1, o2);
    }
    __syncthreads();  // s_bad is final (and the stages are free for the next segment)
    const bool bad = s_bad != 0;
    const float inv0 = bad ? nan_f() : l0 > 0.f ? 1.f / l0 : 0.f;
    const float inv1 = bad ? nan_f() : l1 > 0.f ? 1.f / l1 : 0.f;
#pragma unroll
    for (int d = 0; d < D / 8; ++d) {
      if (g < n)
        *reinterpret_cast<float2*>(out_h + int64_t(r + g) * p.out_row_stride + d * 8 + 2 * q4) =
            make_float2(o[d][0] * inv0, o[d][1] * inv0);
      if (g + 8 < n)
        *reinterpret_cast<float2*>(out_h + int64_t(r + g + 8) * p.out_row_stride + d * 8 + 2 * q4) =
            make_float2(o[d][2] * inv1, o[d][3] * inv1);
    }
    __syncthreads();  // s_bad and sQ are rewritten by the next segment
    r = e;
  }
}

template <int D, bool TF32>
void launch_tiled(const PrefillParams& p, cudaStream_t s) {
  const int hpc = f32tiles::heads_per_cta(p.group);
  const int smem = f32tiles::smem_bytes(D, hpc);
  {
    RelaxedCapture relaxed;  // not a stream operation; legal while the caller captures a graph
    check(cudaFuncSetAttribute(prefill_tiled_kernel<D, TF32>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
          "prefill attention (fp32): shared memory size");
  }
  const int row_tiles = (p.total_q + f32tiles::kRows - 1) / f32tiles::kRows;
  const dim3 grid(unsigned(max(row_tiles, p.num_seqs)), unsigned(p.num_q_heads / hpc));
  PrefillParams args = p;
  launch(prefill_tiled_kernel<D, TF32>, grid, dim3(unsigned(32 * hpc)), size_t(smem), s,
         "prefill attention (fp32) launch", args);
}

}  // namespace

void launch_prefill_fp32(const PrefillParams& p, int head_dim, bool tf32, cudaStream_t s) {
  switch (head_dim) {
    case 64: tf32 ? launch_tiled<64, true>(p, s) : launch_tiled<64, false>(p, s); break;
    case 128: tf32 ? launch_tiled<128, true>(p, s) : launch_tiled<128, false>(p, s); break;
    default: tf32 ? launch_tiled<256, true>(p, s) : launch_tiled<256, false>(p, s); break;
  }
}

}  // namespace cuda
}  // namespace kern
}  // namespace kvb
