// CUDA paged decode attention (split-K, flash-decoding style).
//
// Kernel 1: one CTA of 4 warps per (partition, kv head [, head chunk], sequence). It reads each K and V
// row once, with 16-byte loads by L = min(32, head_dim*sizeof(T)/16) lanes per token (a warp handles
// 32/L tokens per step, 4 steps unrolled so that many loads are in flight), and scores it against all
// query heads of the GQA group held in registers. Online softmax in fp32 (base-2 exponent, scale and
// log2(e) folded into q); warps merge their (max, sum, acc) through shared memory. A single partition
// writes the output directly; otherwise each partition writes (max, sum, normalised acc) to the
// workspace and kernel 2 merges the partitions of each (sequence, query head) with log-sum-exp weights.
// No allocation and no host synchronisation: capturable in a CUDA graph.
//
// fp8 caches (fp8_vec.cuh) run kernel 1 with 8-byte loads of 8 codes, the lane layout of an fp16 cache,
// converted through fp16 (K scale folded into q, V scale into the output; per-head scales by value).
//
// fp16 / bf16 and fp8 caches with GQA groups of dtiles::kMinGroup and more run kernel 1 on tensor cores instead
// (decode_mma.cu: the group's heads are the rows of one mma tile); the partition plan, workspace and
// kernel 2 are shared.
#include <algorithm>
#include <climits>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "../../abi/kvblock.h"
#include "decode.h"
#include "../common/cache.h"
#include "decode_tiles.h"
#include "decode.cuh"
#include "../common/fp8_vec.cuh"

namespace kvb {
namespace kern {
namespace cuda {

namespace {

using namespace decode;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
static_assert(kThreads == 32 * dtiles::kWarps, "wave_ctas() sizes both decode kernels with kThreads");
constexpr int kUnroll = 2;         // tokens per warp group per step; the next step's rows are in flight too
// Query heads of a GQA group per CTA: at most 4 (2 for fp32 rows of 256, whose per-lane slices are
// twice as wide) keeps every instantiation within 128 registers with no spills.
constexpr int max_heads_per_cta(int elem_bytes, int head_dim) { return elem_bytes == 4 && head_dim == 256 ? 2 : 4; }
constexpr int kMinCtasPerSm = 4;    // __launch_bounds__: 65536 / (4 * 128 threads) = 128 registers

// CAP: logits soft cap on (a template parameter: a run-time test inside the unrolled score loop split it
// into one basic block per dot product and serialised the shuffle reductions).
// KV: the cache element type, T for fp16 / bf16 / fp32 caches, Fp8E4m3 / Fp8E5m2 for fp8 caches (q and
// out in T; k_scale, v_scale: this CTA's kv head's scales times KvVec<KV>::fold(), folded into q and into
// the output).
template <typename T, typename KV, int D, int GC, bool CAP>
__device__ __forceinline__ void attn_partition(const AttnParams& p, float k_scale, float v_scale) {
  using Raw = typename KvVec<KV>::Raw;                  // 16 bytes (8 for fp8 codes)
  constexpr bool kFp8 = kIsFp8Tag<KV>;
  constexpr int VEC = KvVec<KV>::N;                     // elements per load
  constexpr int L = (D / VEC) < 32 ? (D / VEC) : 32;    // lanes per token
  constexpr int NV = D / (L * VEC);                     // loads per lane per row
  constexpr int E = NV * VEC;                           // elements per lane
  constexpr int TG = 32 / L;                            // tokens per warp step
  constexpr int STEP = kWarps * TG * kUnroll;           // tokens per CTA iteration

  __shared__ int s_blocks[kMaxPartitionBlocks];
  __shared__ float s_m[kWarps][GC];
  __shared__ float s_l[kWarps][GC];
  __shared__ float s_o[kWarps][GC][D];

  const int part = blockIdx.x;
  const int kvh = blockIdx.y / p.num_chunks;
  const int chunk = blockIdx.y - kvh * p.num_chunks;
  const int seq = blockIdx.z;
  const int h0 = kvh * p.group + chunk * p.heads_per_chunk;
  const int gcount = min(p.heads_per_chunk, p.group - chunk * p.heads_per_chunk);

  const int len = checked_len(p, seq);
  const int t_begin = part * p.partition_size;
  const bool split = p.num_partitions > 1;
  if (len < 0) {  // recorded once per sequence; the reduce kernel writes NaN when split
    if (part == 0 && blockIdx.y == 0 && threadIdx.x == 0)
      record_fault(p.fault, KVB_FAULT_SEQ_LEN, KVB_KERNEL_PAGED_ATTENTION, seq, -1, p.seq_lens[seq]);
    if (!split) write_nan<T, D>(p, seq, h0, gcount);
    return;
  }
  if (split && t_begin >= len) return;  // the reduce kernel reads only ceil(len / P) partitions
  const int t_end = min(t_begin + p.partition_size, len);
  int lo = 0, sink = 0;
  if (p.window > 0) {
    lo = max(0, len - p.window);
    sink = p.sink;
  }
  const bool any = t_begin < t_end && (t_end > lo || t_begin < sink);

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int grp = lane / L, lig = lane - grp * L;

  // Block ids of the partition. A block holding an attended token must have an id in [0, num_blocks)
  // (what the CPU kernel checks); others are stored as -1 and never read (their tokens are masked).
  __shared__ int s_bad;
  if (threadIdx.x == 0) s_bad = 0;
  __syncthreads();
  const int first_blk = t_begin >> p.block_shift;
  const int nblk = any ? ((t_end - 1) >> p.block_shift) - first_blk + 1 : 0;
  const int32_t* table = p.block_tables + int64_t(seq) * p.max_blocks;
  for (int i = threadIdx.x; i < nblk; i += kThreads) {
    const int id = table[first_blk + i];
    const int first = (first_blk + i) << p.block_shift;
    const int last = min(len, first + (1 << p.block_shift)) - 1;
    const bool attended = last >= lo || first < sink;
    const bool valid = id >= 0 && id < p.num_blocks;
    s_blocks[i] = valid ? id : -1;
    if (attended && !valid) {
      s_bad = 1;
      if (blockIdx.y == 0)  // once per (sequence, partition), not per kv head
        record_fault(p.fault, KVB_FAULT_BLOCK_ID, KVB_KERNEL_PAGED_ATTENTION, seq, first_blk + i, id);
    }
  }

  // This lane's slice of every query head of the chunk, pre-scaled.
  const float fp8_q_scale = kFp8 ? p.q_scale * k_scale : 0.f;  // (16-bit caches read p.q_scale in place)
  float q[GC][E];
#pragma unroll
  for (int g = 0; g < GC; ++g) {
    const T* qp = reinterpret_cast<const T*>(p.q) + int64_t(seq) * p.q_row_stride + int64_t(h0 + g) * p.q_head_stride;
#pragma unroll
    for (int j = 0; j < NV; ++j)
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        q[g][j * VEC + e] =
            g < gcount ? Vec<T>::load(qp + (j * L + lig) * VEC + e) * (kFp8 ? fp8_q_scale : p.q_scale) : 0.f;
  }

  float m[GC], l[GC], acc[GC][E];
#pragma unroll
  for (int g = 0; g < GC; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.f;
#pragma unroll
    for (int e = 0; e < E; ++e) acc[g][e] = 0.f;
  }
  __syncthreads();
  if (s_bad) {  // NaN results: directly, or through NaN partition rows that the reduce kernel propagates
    if (!split) {
      write_nan<T, D>(p, seq, h0, gcount);
    } else {
      for (int g = threadIdx.x; g < gcount; g += kThreads) {
        const int64_t row = (int64_t(seq) * p.num_q_heads + h0 + g) * p.num_partitions + part;
        p.ws_m[row] = p.ws_l[row] = __int_as_float(0x7fffffff);
      }
    }
    return;
  }

  const int64_t head_off = p.kv.head(kvh);
  const int mask = (1 << p.block_shift) - 1;
  // K and V rows of the kUnroll tokens of a step (zero where masked), and whether each is attended.
  auto load_step = [&](int base, Raw (&kr)[kUnroll][NV], Raw (&vr)[kUnroll][NV], bool (&ok)[kUnroll]) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int t = base + u * TG + grp;
      ok[u] = t < t_end && (t >= lo || t < sink);
      const int blk = ok[u] ? s_blocks[(t >> p.block_shift) - first_blk] : -1;
      ok[u] = blk >= 0;
      if (ok[u]) {
        const int64_t off = p.kv.row(blk, t, mask) + head_off;
        const Raw* kp = reinterpret_cast<const Raw*>(reinterpret_cast<const KV*>(p.k) + off);
        const Raw* vp = reinterpret_cast<const Raw*>(reinterpret_cast<const KV*>(p.v) + off);
#pragma unroll
        for (int j = 0; j < NV; ++j) {
          kr[u][j] = __ldg(kp + j * L + lig);
          vr[u][j] = __ldg(vp + j * L + lig);
        }
      } else {
#pragma unroll
        for (int j = 0; j < NV; ++j) kr[u][j] = vr[u][j] = Raw{};
      }
    }
  };
  if (any) {
    // Double-buffered: the next step's rows are loaded before this step's are used.
    Raw kr[kUnroll][NV], vr[kUnroll][NV];
    bool ok[kUnroll];
    int base = t_begin + warp * TG * kUnroll;
    load_step(base, kr, vr, ok);
    for (; base < t_end; base += STEP) {
      Raw nkr[kUnroll][NV], nvr[kUnroll][NV];
      bool nok[kUnroll];
      load_step(base + STEP, nkr, nvr, nok);  // all masked past t_end: no loads
      // Scores of the unrolled tokens for every head (base-2 logits).
      float sc[kUnroll][GC];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        float kf[E];
#pragma unroll
        for (int j = 0; j < NV; ++j) KvVec<KV>::raw_to_float(kr[u][j], kf + j * VEC);
#pragma unroll
        for (int g = 0; g < GC; ++g) {
          float s = 0.f;
#pragma unroll
          for (int e = 0; e < E; ++e) s = fmaf(q[g][e], kf[e], s);
#pragma unroll
          for (int o = L / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
          if (CAP) s = p.soft_cap * tanhf(s * p.inv_cap) * kLog2e;
          sc[u][g] = ok[u] ? s : -INFINITY;
        }
      }
      // Online softmax: rescale once per step, then accumulate V.
      float pr[kUnroll][GC];
#pragma unroll
      for (int g = 0; g < GC; ++g) {
        float mx = sc[0][g];
#pragma unroll
        for (int u = 1; u < kUnroll; ++u) mx = fmaxf(mx, sc[u][g]);
        const float m_new = fmaxf(m[g], mx);
        if (m_new == -INFINITY) {  // nothing attended yet
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) pr[u][g] = 0.f;
          continue;
        }
        const float alpha = exp2f(m[g] - m_new);
        l[g] *= alpha;
#pragma unroll
        for (int e = 0; e < E; ++e) acc[g][e] *= alpha;
        m[g] = m_new;
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          pr[u][g] = exp2f(sc[u][g] - m_new);
          l[g] += pr[u][g];
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        float vf[E];
#pragma unroll
        for (int j = 0; j < NV; ++j) KvVec<KV>::raw_to_float(vr[u][j], vf + j * VEC);
#pragma unroll
        for (int g = 0; g < GC; ++g)
#pragma unroll
          for (int e = 0; e < E; ++e) acc[g][e] = fmaf(pr[u][g], vf[e], acc[g][e]);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        ok[u] = nok[u];
#pragma unroll
        for (int j = 0; j < NV; ++j) {
          kr[u][j] = nkr[u][j];
          vr[u][j] = nvr[u][j];
        }
      }
    }
  }

  // Merge the token groups of the warp (lanes lig, lig+L, ... hold the same slice of other tokens).
#pragma unroll
  for (int o = L; o < 32; o <<= 1) {
#pragma unroll
    for (int g = 0; g < GC; ++g) {
      const float om = __shfl_xor_sync(0xffffffffu, m[g], o);
      const float ol = __shfl_xor_sync(0xffffffffu, l[g], o);
      const float nm = fmaxf(m[g], om);
      const float a1 = nm == -INFINITY ? 0.f : exp2f(m[g] - nm);
      const float a2 = nm == -INFINITY ? 0.f : exp2f(om - nm);
      l[g] = l[g] * a1 + ol * a2;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const float oa = __shfl_xor_sync(0xffffffffu, acc[g][e], o);
        acc[g][e] = acc[g][e] * a1 + oa * a2;
      }
      m[g] = nm;
    }
  }
  if (grp == 0) {
#pragma unroll
    for (int g = 0; g < GC; ++g) {
      if (lig == 0) {
        s_m[warp][g] = m[g];
        s_l[warp][g] = l[g];
      }
#pragma unroll
      for (int j = 0; j < NV; ++j)
#pragma unroll
        for (int e = 0; e < VEC; ++e) s_o[warp][g][(j * L + lig) * VEC + e] = acc[g][j * VEC + e];
    }
  }
  __syncthreads();

  // Merge the warps; one thread per (head, element).
  for (int i = threadIdx.x; i < GC * D; i += kThreads) {
    const int g = i / D, d = i - g * D;
    if (g >= gcount) continue;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, s_m[w][g]);
    float W = 0.f, A = 0.f;
    if (M != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float a = exp2f(s_m[w][g] - M);
        W += s_l[w][g] * a;
        A += s_o[w][g][d] * a;
      }
    }
    float o = W > 0.f ? A / W : 0.f;
    if constexpr (kFp8) o *= v_scale;
    const int h = h0 + g;
    if (!split) {
      T* op = reinterpret_cast<T*>(p.out) + int64_t(seq) * p.out_row_stride + int64_t(h) * p.out_head_stride;
      op[d] = Vec<T>::from_float(o);
    } else {
      const int64_t row = (int64_t(seq) * p.num_q_heads + h) * p.num_partitions + part;
      p.ws_o[row * D + d] = o;
      if (d == 0) {
        p.ws_m[row] = M;
        p.ws_l[row] = W;
      }
    }
  }
}

template <typename T, int D, int GC, bool CAP>
__global__ void __launch_bounds__(kThreads, kMinCtasPerSm) attn_partition_kernel(const AttnParams p) {
  attn_partition<T, T, D, GC, CAP>(p, 1.f, 1.f);
}

// fp8 caches: the kv head's scales come with the launch.
template <typename T, typename KV, int D, int GC, bool CAP>
__global__ void __launch_bounds__(kThreads, kMinCtasPerSm) attn_partition_fp8_kernel(const AttnParams p,
                                                                                    const Fp8HeadScales sc) {
  const int kvh = blockIdx.y / p.num_chunks;
  attn_partition<T, KV, D, GC, CAP>(p, sc.k_of(kvh) * KvVec<KV>::fold(), sc.v_of(kvh) * KvVec<KV>::fold());
}

// One CTA of D threads per (query head, sequence): merge the partitions with weights l_p * 2^(m_p - M).
template <typename T, int D>
__global__ void __launch_bounds__(D) attn_reduce_kernel(const AttnParams p) {
  const int h = blockIdx.x, seq = blockIdx.y, d = threadIdx.x;
  const int len = checked_len(p, seq);
  T* op = reinterpret_cast<T*>(p.out) + int64_t(seq) * p.out_row_stride + int64_t(h) * p.out_head_stride;
  if (len < 0) {  // the partition kernel recorded the fault
    op[d] = Vec<T>::from_float(__int_as_float(0x7fffffff));
    return;
  }
  const int n = len / p.partition_size + (len % p.partition_size != 0);  // len + P - 1 may pass INT_MAX
  const int64_t row0 = (int64_t(seq) * p.num_q_heads + h) * p.num_partitions;
  float M = -INFINITY;
  bool bad = false;  // a partition met a bad block id (NaN row)
  for (int i = 0; i < n; ++i) {
    const float li = p.ws_l[row0 + i];
    bad |= li != li;
    if (li > 0.f) M = fmaxf(M, p.ws_m[row0 + i]);
  }
  if (bad) {
    op[d] = Vec<T>::from_float(__int_as_float(0x7fffffff));
    return;
  }
  float W = 0.f, A = 0.f;
  for (int i = 0; i < n; ++i) {
    const float li = p.ws_l[row0 + i];
    if (!(li > 0.f)) continue;
    const float w = li * exp2f(p.ws_m[row0 + i] - M);
    W += w;
    A += w * p.ws_o[(row0 + i) * D + d];
  }
  op[d] = Vec<T>::from_float(W > 0.f ? A / W : 0.f);
}

using KernelFn = void (*)(AttnParams);

template <typename T, int D>
KernelFn partition_kernel_for(int gc, bool cap) {
  constexpr int MH = max_heads_per_cta(sizeof(T), D);
  if (cap)
    return gc == 1 ? attn_partition_kernel<T, D, 1, true>
                   : gc == 2 ? attn_partition_kernel<T, D, 2, true> : attn_partition_kernel<T, D, MH, true>;
  return gc == 1 ? attn_partition_kernel<T, D, 1, false>
                 : gc == 2 ? attn_partition_kernel<T, D, 2, false> : attn_partition_kernel<T, D, MH, false>;
}

template <typename T>
void kernels_for_type(int head_dim, int gc, bool cap, KernelFn* part, KernelFn* reduce) {
  switch (head_dim) {
    case 64: *part = partition_kernel_for<T, 64>(gc, cap), *reduce = attn_reduce_kernel<T, 64>; break;
    case 128: *part = partition_kernel_for<T, 128>(gc, cap), *reduce = attn_reduce_kernel<T, 128>; break;
    default: *part = partition_kernel_for<T, 256>(gc, cap), *reduce = attn_reduce_kernel<T, 256>; break;
  }
}

using Fp8KernelFn = void (*)(AttnParams, Fp8HeadScales);

template <typename T, typename KV, int D>
Fp8KernelFn fp8_partition_kernel_for(int gc, bool cap) {
  constexpr int MH = max_heads_per_cta(2, D);  // 8 codes per lane: the register shape of a 16-bit cache
  if (cap)
    return gc == 1   ? attn_partition_fp8_kernel<T, KV, D, 1, true>
           : gc == 2 ? attn_partition_fp8_kernel<T, KV, D, 2, true>
                     : attn_partition_fp8_kernel<T, KV, D, MH, true>;
  return gc == 1   ? attn_partition_fp8_kernel<T, KV, D, 1, false>
         : gc == 2 ? attn_partition_fp8_kernel<T, KV, D, 2, false>
                   : attn_partition_fp8_kernel<T, KV, D, MH, false>;
}

template <typename T, typename KV>
void fp8_kernels_for_type(int head_dim, int gc, bool cap, Fp8KernelFn* part, KernelFn* reduce) {
  switch (head_dim) {
    case 64: *part = fp8_partition_kernel_for<T, KV, 64>(gc, cap), *reduce = attn_reduce_kernel<T, 64>; break;
    case 128: *part = fp8_partition_kernel_for<T, KV, 128>(gc, cap), *reduce = attn_reduce_kernel<T, 128>; break;
    default: *part = fp8_partition_kernel_for<T, KV, 256>(gc, cap), *reduce = attn_reduce_kernel<T, 256>; break;
  }
}

// fp8 cache (c.dtype) with q / out in q_dtype (fp16 or bf16; validate.cpp refuses fp32 on CUDA).
template <typename T>
void fp8_kernels_for_query(Dtype cache, int head_dim, int gc, bool cap, Fp8KernelFn* part, KernelFn* reduce) {
  if (cache == Dtype::e5m2)
    fp8_kernels_for_type<T, Fp8E5m2>(head_dim, gc, cap, part, reduce);
  else
    fp8_kernels_for_type<T, Fp8E4m3>(head_dim, gc, cap, part, reduce);
}

// SMs x resident CTAs per SM of `fn` on `device`: one wave. Cached (two attribute queries per kernel
// and device, once).
int64_t wave_ctas(int device, const void* fn, size_t smem) {
  static std::mutex mu;
  static std::map<std::pair<int, const void*>, int64_t> cache;
  std::lock_guard<std::mutex> lock(mu);
  const auto it = cache.find({device, fn});
  if (it != cache.end()) return it->second;
  int sms = 0, per_sm = 0;
  {
    RelaxedCapture relaxed;  // not stream work; legal while the caller captures a graph
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
    check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, kThreads, smem),
          "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  }
  const int64_t wave = std::max<int64_t>(1, int64_t(sms) * per_sm);
  cache.emplace(std::make_pair(device, fn), wave);
  return wave;
}

// Partition size of this launch: the shape-only plan's (which sized the caller's workspace) or a
// power-of-two multiple of it (fewer partitions, so the workspace still suffices) whose grid fills its
// last wave best; at equal fill, the most partitions.
int64_t partition_for_waves(const AttnPlan& plan, int64_t max_ctx, int64_t ctas_per_partition, int64_t wave) {
  if (plan.num_partitions <= 1) return plan.partition_size;
  int64_t best = plan.partition_size;
  double best_fill = -1.0;
  for (int64_t P = plan.partition_size; P <= kMaxPartitionBlocks; P *= 2) {
    const int64_t np = (max_ctx + P - 1) / P;
    const int64_t ctas = np * ctas_per_partition;
    const double fill = double(ctas) / double((ctas + wave - 1) / wave * wave);
    if (fill > best_fill + 1e-9) {
      best_fill = fill;
      best = P;
    }
    if (np == 1) break;
  }
  return best;
}

}  // namespace

void paged_attention(const Cache& c, const Attention& a, void* stream) {
  const int64_t es = int64_t(c.elem());
  if (kv_align_bits(c) % 16 != 0)
    fail(Code::invalid_argument, "cache: CUDA attention needs 16-byte aligned k, v and strides (block %lld, token %lld, "
         "head %lld elements)", (long long)c.block_stride, (long long)c.token_stride, (long long)c.head_stride);
  // q and out are accessed one element at a time, block_tables and seq_lens as int32: a misaligned
  // device access would be a sticky error that ruins the caller's CUDA context, so refuse it here.
  const int64_t q_es = int64_t(dtype_size(a.q_dtype));  // the cache's element size, except for fp8 caches
  if (uintptr_t(a.q) % uintptr_t(q_es) != 0 || uintptr_t(a.out) % uintptr_t(q_es) != 0)
    fail(Code::invalid_argument, "args: q and out must be aligned to the %lld-byte element size", (long long)q_es);
  if (uintptr_t(a.block_tables) % 4 != 0 || uintptr_t(a.seq_lens) % 4 != 0)
    fail(Code::invalid_argument, "args: block_tables and seq_lens must be 4-byte aligned");
  if (c.num_blocks > INT_MAX || a.max_blocks > INT_MAX) fail(Code::invalid_argument, "cache too large");
  // Token indices are int in the kernels; t_begin + partition_size and base + step must not overflow.
  if (a.max_blocks * c.block_size > int64_t(INT_MAX) - 4096)
    fail(Code::invalid_argument, "args: max_blocks_per_seq * block_size = %lld tokens is too long for CUDA attention",
         (long long)(a.max_blocks * c.block_size));
  if (a.plan.partition_size > kMaxPartitionBlocks) fail(Code::internal, "partition size above the kernel limit");
  const int group = int(a.num_q_heads / c.num_kv_heads);
  // Tensor cores where the group's heads make the CUDA-core score loop the bound (decode_mma.cu; fp8
  // caches too, converted to q's fp16 / bf16 in shared memory).
  const bool mma = (c.dtype == Dtype::f16 || c.dtype == Dtype::bf16 || c.fp8()) && group >= dtiles::kMinGroup;
  const int max_heads = max_heads_per_cta(int(es), int(c.head_dim));
  const int chunks = mma ? dtiles::num_chunks(group) : (group + max_heads - 1) / max_heads;
  const int per_chunk = (group + chunks - 1) / chunks;
  const int gc = per_chunk <= 1 ? 1 : per_chunk <= 2 ? 2 : max_heads;
  if (c.num_kv_heads * chunks > 65535) fail(Code::invalid_argument, "num_kv_heads %lld too large for CUDA attention",
                                            (long long)c.num_kv_heads);
  if (a.plan.num_partitions > INT_MAX) fail(Code::invalid_argument, "context too long");

  DeviceGuard guard(c.device_index);
  check_attn_pointers(c, a);
  if (a.plan.num_partitions > 1) check_pointer(a.workspace, c.device_index, "args.workspace");

  AttnParams p;
  static_cast<PagedIo&>(p) = paged_io(c, a);
  put_attn_shape(p, attn_shape(c, a));
  p.heads_per_chunk = per_chunk;
  p.num_chunks = chunks;
  KernelFn part_fn = nullptr, reduce_fn = nullptr;
  Fp8KernelFn fp8_fn = nullptr;
  const bool cap = a.soft_cap > 0.f;
  if (c.fp8()) {
    if (a.q_dtype == Dtype::bf16)
      fp8_kernels_for_query<__nv_bfloat16>(c.dtype, int(c.head_dim), gc, cap, &fp8_fn, &reduce_fn);
    else
      fp8_kernels_for_query<__half>(c.dtype, int(c.head_dim), gc, cap, &fp8_fn, &reduce_fn);
  } else {
    switch (c.dtype) {
      case Dtype::f16: kernels_for_type<__half>(int(c.head_dim), gc, cap, &part_fn, &reduce_fn); break;
      case Dtype::bf16: kernels_for_type<__nv_bfloat16>(int(c.head_dim), gc, cap, &part_fn, &reduce_fn); break;
      default: kernels_for_type<float>(int(c.head_dim), gc, cap, &part_fn, &reduce_fn); break;
    }
  }
  const int64_t ctas_per_partition = c.num_kv_heads * chunks * a.num_seqs;
  const void* wave_fn = mma ? (c.fp8() ? mma_kernel_fp8(a.q_dtype, c.dtype, int(c.head_dim), cap)
                                       : mma_kernel(c.dtype, int(c.head_dim), cap))
                      : fp8_fn ? reinterpret_cast<const void*>(fp8_fn) : reinterpret_cast<const void*>(part_fn);
  const size_t smem = mma ? (c.fp8() ? mma_smem_fp8(int(c.head_dim)) : mma_smem(int(c.head_dim))) : 0;
  const int64_t max_ctx = a.max_blocks * c.block_size;
  const int64_t wave = wave_ctas(c.device_index, wave_fn, smem);
  // The tensor-core kernel reads no block list into shared memory, so its partitions may exceed
  // kMaxPartitionBlocks; they are sized by its cost model (decode_tiles.h).
  const int64_t P = mma ? dtiles::mma_partition_size(a.plan.partition_size, a.plan.num_partitions, max_ctx,
                                                     ctas_per_partition, wave, mma_stages(int(c.head_dim)),
                                                     int64_t(INT_MAX) - 4096)
                        : partition_for_waves(a.plan, max_ctx, ctas_per_partition, wave);
  const int64_t np = (max_ctx + P - 1) / P;
  p.partition_size = int(P);
  p.num_partitions = int(np);
  p.soft_cap = a.soft_cap;
  p.inv_cap = a.soft_cap > 0.f ? 1.f / a.soft_cap : 0.f;
  p.q_scale = a.soft_cap > 0.f ? a.scale : a.scale * kLog2e;
  p.fault = fault_record(c.device_index);
  p.query_start = nullptr;
  p.num_seqs = int(a.num_seqs);
  p.total_q = int(a.num_seqs);
  p.kernel_id = KVB_KERNEL_PAGED_ATTENTION;
  p.tree = 0;

  // Workspace rows of this launch's partition count (<= the plan's: inside the caller's workspace).
  const int64_t rows = a.num_seqs * a.num_q_heads * np;
  p.ws_m = np > 1 ? static_cast<float*>(a.workspace) : nullptr;
  p.ws_l = p.ws_m ? p.ws_m + rows : nullptr;
  p.ws_o = p.ws_l ? p.ws_l + rows : nullptr;

  const dim3 grid(unsigned(np), unsigned(c.num_kv_heads * chunks), unsigned(a.num_seqs));
  const cudaStream_t s = as_stream(stream);
  if (mma && c.fp8()) {
    std::vector<Fp8HeadScales> holder(1, fp8_head_scales(c));  // 1 KiB, built on the heap
    launch_mma_fp8(p, holder[0], a.q_dtype, c.dtype, int(c.head_dim), cap, grid, s);
  } else if (mma) {
    launch_mma(p, c.dtype, int(c.head_dim), cap, grid, s);
  } else if (fp8_fn) {
    std::vector<Fp8HeadScales> holder(1, fp8_head_scales(c));  // 1 KiB, passed by value
    launch(fp8_fn, grid, dim3(kThreads), 0, s, "paged attention launch", p, holder[0]);
  } else
    launch(part_fn, grid, dim3(kThreads), 0, s, "paged attention launch", p);
  if (np > 1)
    launch(reduce_fn, dim3(unsigned(a.num_q_heads), unsigned(a.num_seqs)), dim3(unsigned(c.head_dim)), 0, s,
           "paged attention reduce launch", p);
}

}  // namespace cuda
}  // namespace kern
}  // namespace kvb
