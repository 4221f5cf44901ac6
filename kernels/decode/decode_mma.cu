// CUDA paged decode attention on tensor cores, for 16-bit and fp8 caches and GQA groups of dtiles::kMinGroup
// query heads and more (geometry: kernels/decode/decode_tiles.h).
//
// The CUDA-core kernel (decode.cu) scores every K row against each query head of the group with
// FMAs and shuffles: at group 8 that work, not memory, bounds it. Here the group's query heads are the
// M rows of mma.sync m16n8k16, so one K row costs the same whatever the group size. K and V of a stage
// (64 keys) are gathered through the block table with 16-byte cp.async into XOR-swizzled shared memory,
// 2 to 4 stages deep (dtiles::stages) so that loads stay in flight while earlier stages are computed. Warp w owns keys
// 16w..16w+15 of every stage: S = Q K^T (Q and K through ldmatrix), online softmax in registers (base-2,
// fp32), P repacked from the S accumulators into the A operand of O += P V (V through ldmatrix.trans).
// The warps' (max, sum, O) merge through shared memory at the end; a single partition writes the output,
// otherwise the partition's row goes to the workspace for decode.cu's reduce kernel. Faults, window +
// sinks and soft cap behave as in the CUDA-core kernel. No allocation, no host synchronisation.
//
// FP8 caches (KV = Fp8E4m3 / Fp8E5m2; q and out fp16 or bf16): the stages hold the fp8 bytes (half the
// bytes per key), and after a stage's barrier each warp converts its own 16 keys of it into a 16-bit
// K and V tile (dtiles::smem_bytes_fp8; the cvt instruction on sm_89+, integer operations on sm_80),
// which the fragments then read as before; the kv head's k_scale (times the conversion's fold) scales
// the logits, its v_scale the output.
#include <map>
#include <mutex>
#include <type_traits>
#include <vector>

#include "decode_tiles.h"
#include "decode.cuh"
#include "../common/fp8_vec.cuh"
#include "../common/mma.cuh"
#include "../prefill/prefill.cuh"

namespace kvb {
namespace kern {
namespace cuda {
namespace decode {

namespace {

constexpr int kThreads = 32 * dtiles::kWarps;

// Two modes. Decode (p.query_start null): grid (partition, kv head x head chunk, sequence), one query
// row per head. Short queries of a prefill call (p.query_start set): grid (sequence, kv head, key split);
// a CTA of a sequence this path does not own (dtiles::decode_path_owns) exits; otherwise its 16 rows are
// the q_len tokens x group heads, packed as the prefill kernel packs them, each masked at its own
// causal position.
// KV: the cache element type (T, or an fp8 tag); ks, vs: fp8 caches only, the item's kv head's scales
// times the conversion's fold.
template <typename T, typename KV, int D, int ST, bool CAP>
__device__ __forceinline__ void decode_mma_body(const AttnParams& p, float ks, float vs) {
  using namespace dtiles;
  constexpr bool kFp8 = kIsFp8Tag<KV>;
  constexpr int C = D / 8;   // 16-byte chunks per row
  constexpr int DT = D / 8;  // 8-dim n-tiles of O
  static_assert(ST >= 2, "the pipeline needs two stages");
  constexpr uint32_t kStage = kStageKeys * D * (kFp8 ? 1 : 2);  // bytes of one K (or V) stage
  constexpr int CC = kFp8 ? D / 16 : C;  // 16-byte copies per key row
  // Chunk loads unrolled per stage: all 4 at D 64; 4 of 8 / 16 above (fully unrolled, the loop keeps
  // that many 64-bit addresses live and ptxas spilled at D 128 on sm_80 and at D 256).
  constexpr int kLoadUnroll = D <= 64 ? kStageKeys * CC / kThreads : 4;
  static_assert(kStageKeys * CC % kThreads == 0, "whole chunk loads per thread");
  constexpr int kSUnroll = D <= 128 ? D / 16 : 4;
  // fp8: the warp's conversion, 4 / 8 / 16 items per lane (unrolled 4 ptxas spilled at D 64 on sm_80).
  constexpr int kCvtUnroll = D <= 64 ? 2 : 4;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ int s_bad;
  __shared__ float s_m[kWarps][kRows];
  __shared__ float s_l[kWarps][kRows];
  const uint32_t sQ = uint32_t(__cvta_generic_to_shared(smem));
  const uint32_t sK = sQ + kRows * D * 2;  // [ST][64 keys][D]
  const uint32_t sV = sK + ST * kStage;    // [ST][64 keys][D]
  const uint32_t sK16 = sQ + fp8_k_tile(D, ST), sV16 = sQ + fp8_v_tile(D, ST);  // fp8: the converted stage
  static_assert(fp8_k_stages(D) == kRows * D * 2 && (!kFp8 || fp8_v_stages(D, ST) == kRows * D * 2 + int(ST * kStage)),
                "decode_tiles.h fp8 layout");

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const bool decode = p.query_start == nullptr;
  const int seq = decode ? int(blockIdx.z) : int(blockIdx.x);
  const int part = decode ? int(blockIdx.x) : int(blockIdx.z);
  const bool split = p.num_partitions > 1;
  int kvh, h0, heads, q_len, row0, len;
  if (decode) {
    const int nch = num_chunks(p.group);
    kvh = blockIdx.y / nch;
    const int chunk = blockIdx.y - kvh * nch;
    h0 = kvh * p.group + chunk_first(p.group, chunk);
    heads = chunk_count(p.group, chunk);
    q_len = 1, row0 = seq;
    len = checked_len(p, seq);
    if (len < 0) {  // recorded once per sequence; the reduce kernel writes NaN when split
      if (part == 0 && blockIdx.y == 0 && tid == 0)
        record_fault(p.fault, KVB_FAULT_SEQ_LEN, KVB_KERNEL_PAGED_ATTENTION, seq, -1, p.seq_lens[seq]);
      if (!split) write_nan<T, D>(p, seq, h0, heads);
      return;
    }
    if (split && part * p.partition_size >= len) return;  // the reduce kernel reads only ceil(len / P) partitions
  } else {
    kvh = blockIdx.y, h0 = kvh * p.group, heads = p.group;
    row0 = p.query_start[seq];
    const int row1 = p.query_start[seq + 1];
    len = p.seq_lens[seq];
    if (!decode_path_owns(seq, p.num_seqs, row0, row1, p.total_q, len, p.max_blocks << p.block_shift, p.group, p.tree != 0))
      return;  // the prefill kernel's sequence
    q_len = row1 - row0;  // every split writes its rows: the prefill reduce kernel reads all of them
  }
  const int rows = q_len * heads;  // packed row r: token r / heads, head h0 + r % heads
  const int t_begin = part * p.partition_size;
  const int t_end = min(t_begin + p.partition_size, len);
  // Keys some row attends: [lo, len) and [0, sink).
  const int lo = first_window_key(len, q_len, p.window), sink = p.window > 0 ? p.sink : 0;
  const bool any = t_begin < t_end && (t_end > lo || t_begin < sink);

  // Q of the item's rows, swizzled; rows past them are zeros (their results are dropped). Element
  // loads: q is only element-aligned.
  if (tid == 0) s_bad = 0;
  for (int i = tid; i < kRows * D; i += kThreads) {
    const int r = i / D, d = i - r * D;
    T x = Vec<T>::from_float(0.f);
    if (r < rows)
      x = reinterpret_cast<const T*>(p.q)[int64_t(row0 + row_token(r, heads)) * p.q_row_stride +
                                          int64_t(h0 + row_head(r, heads)) * p.q_head_stride + d];
    *reinterpret_cast<T*>(smem + swz(C, r, d >> 3) + (d & 7) * 2) = x;
  }
  __syncthreads();

  const int n_st = any ? stage_count(t_end - t_begin) : 0;
  const int32_t* table = p.block_tables + int64_t(seq) * p.max_blocks;
  const int64_t head_off = p.kv.head(kvh);
  const int kmask = (1 << p.block_shift) - 1;
  // Stage i's K and V rows into buffer i % ST; keys past the partition or attended by no row are
  // zero-filled, never read. An attended key needs a block id in [0, num_blocks) (what the CPU kernel
  // checks): otherwise the item's rows are NaN and the fault is recorded once per (sequence, partition).
  auto load_stage = [&](int i) {
    const uint32_t buf = uint32_t(i % ST) * kStage;
    int bad_col = -1, bad_id = 0;  // recorded after the loop: a fault path inside it costs registers
#pragma unroll kLoadUnroll
    for (int j = 0; j < kStageKeys * CC / kThreads; ++j) {
      const int x = tid + j * kThreads;
      const int r = x / CC, c = x - r * CC;
      const int t = t_begin + i * kStageKeys + r;
      int blk = -1;
      if (t < t_end && (t >= lo || t < sink)) {
        const int id = __ldg(table + (t >> p.block_shift));
        if (id >= 0 && id < p.num_blocks)
          blk = id;
        else
          bad_col = t >> p.block_shift, bad_id = id;
      }
      if constexpr (kFp8) {  // bytes, unswizzled (dtiles::fp8_copy_*)
        const int64_t off =
            blk >= 0 ? p.kv.row(blk, t, kmask) + head_off + c * 16 : 0;
        const uint32_t dst = buf + uint32_t(fp8_copy_dst(D, r, c));
        cp_async16(sK + dst, p.k + off, blk >= 0 ? 16 : 0);
        cp_async16(sV + dst, p.v + off, blk >= 0 ? 16 : 0);
      } else {
        const int64_t off =
            blk >= 0 ? p.kv.row(blk, t, kmask) + head_off + c * 8 : 0;
        cp_async16(sK + buf + swz(C, r, c), reinterpret_cast<const T*>(p.k) + off, blk >= 0 ? 16 : 0);
        cp_async16(sV + buf + swz(C, r, c), reinterpret_cast<const T*>(p.v) + off, blk >= 0 ? 16 : 0);
      }
    }
    if (bad_col >= 0 && atomicExch(&s_bad, 1) == 0 && blockIdx.y == 0)
      record_fault(p.fault, KVB_FAULT_BLOCK_ID, p.kernel_id, seq, bad_col, bad_id);
  };
#pragma unroll
  for (int i = 0; i < ST - 1; ++i) {
    if (i < n_st) load_stage(i);
    cp_async_commit();
  }

  // Query positions of this thread's two rows (lane / 4 and lane / 4 + 8; padding rows copy the last).
  const int pos0 = row_pos(min(c_row(lane, 0), rows - 1), heads, q_len, len);
  const int pos1 = row_pos(min(c_row(lane, 2), rows - 1), heads, q_len, len);
  float o[DT][4];
#pragma unroll
  for (int d = 0; d < DT; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;

  for (int i = 0; i < n_st; ++i) {
    cp_async_wait<ST - 2>();  // stage i has landed (this thread's copies) ...
    __syncthreads();          // ... everyone's; and everyone is done with the buffer refilled next
    if (i + ST - 1 < n_st) load_stage(i + ST - 1);
    cp_async_commit();
    const uint32_t buf = uint32_t(i % ST) * kStage;
    if constexpr (kFp8) {
      // The warp's 16 keys of stage i into its rows of the 16-bit tiles (only it reads them).
      __syncwarp();  // the warp's fragment reads of stage i - 1 are done
#pragma unroll kCvtUnroll
      for (int j = 0; j < kWarpKeys * C / 32; ++j) {
        const int x = lane + 32 * j;
        const int row = fp8_cvt_row(warp, x, D), chunk = fp8_cvt_chunk(x, D);
        const uint32_t src = buf + uint32_t(fp8_cvt_src(D, row, chunk)), dst = swz(C, row, chunk);
#pragma unroll
        for (int kv = 0; kv < 2; ++kv) {
          uint2 raw;
          asm volatile("ld.shared.v2.b32 {%0,%1}, [%2];\n" : "=r"(raw.x), "=r"(raw.y) : "r"((kv ? sV : sK) + src));
          uint32_t w[4];
          fp8x8_to_pairs<T, std::is_same<KV, Fp8E5m2>::value>(raw, w);
          asm volatile("st.shared.v4.b32 [%0], {%1,%2,%3,%4};\n" ::"r"((kv ? sV16 : sK16) + dst), "r"(w[0]), "r"(w[1]),
                       "r"(w[2]), "r"(w[3]));
        }
      }
      __syncwarp();
    }
    const uint32_t kbuf = kFp8 ? sK16 : sK + buf, vbuf = kFp8 ? sV16 : sV + buf;
    const float qsc = kFp8 ? p.q_scale * ks : p.q_scale;

    // S = Q K^T: 16 rows x the warp's 16 keys.
    float s[2][4];
#pragma unroll
    for (int n = 0; n < 2; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll kSUnroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[4], b[4];
      ldsm_x4(a, sQ + swz(C, q_row(lane), q_chunk(kk, lane)));
      ldsm_x4(b, kbuf + swz(C, k_row(warp, lane), k_chunk(kk, lane)));
      Mma<T>::run(s[0], a, b[0], b[1]);
      Mma<T>::run(s[1], a, b[2], b[3]);
    }

    // Base-2 logits, the mask (keys past the partition, not attended at the row's position), online softmax.
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[n][e] * qsc;
        if (CAP) x = p.soft_cap * tanhf(x * p.inv_cap) * kLog2e;
        const int t = stage_key(t_begin, i, warp, n * 8 + c_col(lane, e));
        if (!(t < t_end && attends_at(t, e < 2 ? pos0 : pos1, p.window, p.sink))) x = -INFINITY;
        s[n][e] = x;
        if (e < 2) mx0 = fmaxf(mx0, x); else mx1 = fmaxf(mx1, x);
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
    for (int d = 0; d < DT; ++d) o[d][0] *= al0, o[d][1] *= al0, o[d][2] *= al1, o[d][3] *= al1;
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      s[n][0] = exp2f(s[n][0] - u0), s[n][1] = exp2f(s[n][1] - u0);
      s[n][2] = exp2f(s[n][2] - u1), s[n][3] = exp2f(s[n][3] - u1);
      l0 += s[n][0] + s[n][1], l1 += s[n][2] + s[n][3];
    }

    // O += P V: P (16 rows x 16 keys) from the S accumulators, V through ldmatrix.trans.
    const uint32_t a[4] = {Mma<T>::pack(s[0][0], s[0][1]), Mma<T>::pack(s[0][2], s[0][3]),
                           Mma<T>::pack(s[1][0], s[1][1]), Mma<T>::pack(s[1][2], s[1][3])};
#pragma unroll
    for (int d2 = 0; d2 < DT / 2; ++d2) {
      uint32_t b[4];
      ldsm_x4_trans(b, vbuf + swz(C, v_row(warp, lane), v_chunk(d2, lane)));
      Mma<T>::run(o[2 * d2], a, b[0], b[1]);
      Mma<T>::run(o[2 * d2 + 1], a, b[2], b[3]);
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the stage memory becomes the warps' O below; s_bad is final

  // Each row's sum over the quad's columns, then the warps' (max, sum, O) through shared memory.
#pragma unroll
  for (int o2 = 1; o2 <= 2; o2 <<= 1) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, o2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, o2);
  }
  float* sO = reinterpret_cast<float*>(smem + kRows * D * 2);  // [kWarps][16][D]
  if ((lane & 3) == 0) {
    s_m[warp][c_row(lane, 0)] = m0, s_l[warp][c_row(lane, 0)] = l0;
    s_m[warp][c_row(lane, 2)] = m1, s_l[warp][c_row(lane, 2)] = l1;
  }
#pragma unroll
  for (int d = 0; d < DT; ++d)
#pragma unroll
    for (int e = 0; e < 4; ++e) sO[(warp * kRows + c_row(lane, e)) * D + d * 8 + c_col(lane, e)] = o[d][e];
  __syncthreads();

  // Merge the warps; one thread per (row, element). A bad block id: NaN rows, directly or through a
  // NaN weight that the reduce kernels propagate.
  const bool bad = s_bad != 0;
  for (int i = tid; i < rows * D; i += kThreads) {
    const int g = i / D, d = i - g * D;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, s_m[w][g]);
    float W = 0.f, A = 0.f;  // fp8: A in units of v_scale / fold (vs below)
    if (M != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float a = exp2f(s_m[w][g] - M);
        W += s_l[w][g] * a;
        A += sO[(w * kRows + g) * D + d] * a;
      }
    }
    const int64_t row = row0 + row_token(g, heads);
    const int h = h0 + row_head(g, heads);
    if (!split) {
      T* op = reinterpret_cast<T*>(p.out) + row * p.out_row_stride + int64_t(h) * p.out_head_stride;
      op[d] = Vec<T>::from_float(bad ? __int_as_float(0x7fffffff) : W > 0.f ? (kFp8 ? A / W * vs : A / W) : 0.f);
    } else {
      const int64_t wrow = (row * p.num_q_heads + h) * p.num_partitions + part;
      if (!bad) p.ws_o[wrow * D + d] = W > 0.f ? (kFp8 ? A / W * vs : A / W) : 0.f;
      if (d == 0) {
        p.ws_m[wrow] = bad ? __int_as_float(0x7fffffff) : M;
        p.ws_l[wrow] = bad ? __int_as_float(0x7fffffff) : W;
      }
    }
  }
}

template <typename T, int D, int ST, bool CAP>
__global__ void __launch_bounds__(kThreads) decode_mma_kernel(const AttnParams p) {
  decode_mma_body<T, T, D, ST, CAP>(p, 1.f, 1.f);
}

// fp8 caches: the kv heads' scales come with the launch (by value: a captured graph keeps them).
template <typename T, typename KV, int D, int ST, bool CAP>
__global__ void __launch_bounds__(kThreads) decode_mma_fp8_kernel(const AttnParams p, const Fp8HeadScales sc) {
  const int kvh = p.query_start == nullptr ? int(blockIdx.y) / dtiles::num_chunks(p.group) : int(blockIdx.y);
  decode_mma_body<T, KV, D, ST, CAP>(p, sc.k_of(kvh) * KvVec<KV>::fold(), sc.v_of(kvh) * KvVec<KV>::fold());
}

using KernelFn = void (*)(AttnParams);
using Fp8KernelFn = void (*)(AttnParams, Fp8HeadScales);

template <typename T, int D, int ST>
KernelFn kernel_for(bool cap) {
  return cap ? decode_mma_kernel<T, D, ST, true> : decode_mma_kernel<T, D, ST, false>;
}

static_assert(dtiles::stages(64, 0) == 4 && dtiles::stages(128, 0) == 3, "instantiated depths must match decode_tiles.h");

template <typename T>
KernelFn kernel_for_dim(int head_dim, int stages, bool cap) {
  switch (head_dim) {
    case 64: return kernel_for<T, 64, 4>(cap);
    case 128: return kernel_for<T, 128, 3>(cap);
    default: return stages >= 3 ? kernel_for<T, 256, 3>(cap) : kernel_for<T, 256, 2>(cap);
  }
}

template <typename T, typename KV, int D, int ST>
Fp8KernelFn fp8_kernel_for(bool cap) {
  return cap ? decode_mma_fp8_kernel<T, KV, D, ST, true> : decode_mma_fp8_kernel<T, KV, D, ST, false>;
}

template <typename T, typename KV>
Fp8KernelFn fp8_kernel_for_dim(int head_dim, int stages, bool cap) {
  switch (head_dim) {
    case 64: return fp8_kernel_for<T, KV, 64, 4>(cap);
    case 128: return fp8_kernel_for<T, KV, 128, 3>(cap);
    default: return stages >= 3 ? fp8_kernel_for<T, KV, 256, 3>(cap) : fp8_kernel_for<T, KV, 256, 2>(cap);
  }
}

// q_dtype fp16 or bf16, cache e4m3 or e5m2.
Fp8KernelFn fp8_kernel_fn(Dtype q_dtype, Dtype cache, int head_dim, int stages, bool cap) {
  if (q_dtype == Dtype::bf16)
    return cache == Dtype::e5m2 ? fp8_kernel_for_dim<__nv_bfloat16, Fp8E5m2>(head_dim, stages, cap)
                                : fp8_kernel_for_dim<__nv_bfloat16, Fp8E4m3>(head_dim, stages, cap);
  return cache == Dtype::e5m2 ? fp8_kernel_for_dim<__half, Fp8E5m2>(head_dim, stages, cap)
                              : fp8_kernel_for_dim<__half, Fp8E4m3>(head_dim, stages, cap);
}

// The current device's pipeline depth for head_dim (dtiles::stages; the opt-in shared memory limit is
// queried once per device).
int stages_here(int head_dim) {
  static std::mutex mu;
  static std::map<int, int> limit;
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  std::lock_guard<std::mutex> lock(mu);
  auto it = limit.find(device);
  if (it == limit.end()) {
    int bytes = 0;
    RelaxedCapture relaxed;  // not stream work; legal while the caller captures a graph
    check(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), "cudaDeviceGetAttribute");
    it = limit.emplace(device, bytes).first;
  }
  return dtiles::stages(head_dim, it->second);
}

KernelFn kernel_fn(Dtype dtype, int head_dim, int stages, bool cap) {
  return dtype == Dtype::bf16 ? kernel_for_dim<__nv_bfloat16>(head_dim, stages, cap)
                              : kernel_for_dim<__half>(head_dim, stages, cap);
}

}  // namespace

int mma_stages(int head_dim) { return stages_here(head_dim); }

size_t mma_smem(int head_dim) { return size_t(dtiles::smem_bytes(head_dim, stages_here(head_dim))); }

// Also raises the instantiation's dynamic shared memory limit (above the 48 KiB default), which the
// occupancy query and the launch both need.
const void* mma_kernel(Dtype dtype, int head_dim, bool cap) {
  const int st = stages_here(head_dim);
  const KernelFn fn = kernel_fn(dtype, head_dim, st, cap);
  RelaxedCapture relaxed;  // not a stream operation; legal while the caller captures a graph
  check(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, dtiles::smem_bytes(head_dim, st)),
        "paged attention: shared memory size");
  return reinterpret_cast<const void*>(fn);
}

void launch_mma(const AttnParams& p, Dtype dtype, int head_dim, bool cap, dim3 grid, cudaStream_t s) {
  AttnParams args = p;
  const int st = stages_here(head_dim);
  launch(kernel_fn(dtype, head_dim, st, cap), grid, dim3(kThreads), size_t(dtiles::smem_bytes(head_dim, st)), s,
         "paged attention launch", args);
}

size_t mma_smem_fp8(int head_dim) { return size_t(dtiles::smem_bytes_fp8(head_dim, stages_here(head_dim))); }

const void* mma_kernel_fp8(Dtype q_dtype, Dtype cache, int head_dim, bool cap) {
  const int st = stages_here(head_dim);
  const Fp8KernelFn fn = fp8_kernel_fn(q_dtype, cache, head_dim, st, cap);
  RelaxedCapture relaxed;  // not a stream operation; legal while the caller captures a graph
  check(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, dtiles::smem_bytes_fp8(head_dim, st)),
        "paged attention: shared memory size");
  return reinterpret_cast<const void*>(fn);
}

void launch_mma_fp8(const AttnParams& p, const Fp8HeadScales& sc, Dtype q_dtype, Dtype cache, int head_dim, bool cap,
                    dim3 grid, cudaStream_t s) {
  AttnParams args = p;
  std::vector<Fp8HeadScales> holder(1, sc);  // 1 KiB, passed by value
  const int st = stages_here(head_dim);
  launch(fp8_kernel_fn(q_dtype, cache, head_dim, st, cap), grid, dim3(kThreads),
         size_t(dtiles::smem_bytes_fp8(head_dim, st)), s, "paged attention launch", args, holder[0]);
}

}  // namespace decode

void launch_short_queries(const PrefillParams& pp, Dtype dtype, int head_dim, cudaStream_t s, const Fp8HeadScales* fp8,
                          Dtype cache) {
  if (pp.num_seqs <= 0 || pp.total_q <= 0) return;
  decode::AttnParams p;
  static_cast<AttnIo&>(p) = pp;
  p.block_tables = pp.block_tables;
  p.seq_lens = pp.seq_lens;
  p.ws_m = pp.ws_m;
  p.ws_l = pp.ws_l;
  p.ws_o = pp.ws_o;
  put_attn_shape(p, pp);
  p.heads_per_chunk = pp.group;
  p.num_chunks = 1;
  // One partition per key split of the prefill plan (the whole sequence without splits).
  p.partition_size = pp.num_splits > 1 ? pp.split_tokens : pp.max_blocks << pp.block_shift;
  p.num_partitions = pp.num_splits;
  const bool cap = pp.soft_cap > 0.f;
  p.soft_cap = pp.soft_cap;
  p.inv_cap = cap ? 1.f / pp.soft_cap : 0.f;
  p.q_scale = cap ? pp.scale : pp.scale * kLog2e;
  p.fault = pp.fault;
  p.query_start = pp.query_start;
  p.num_seqs = pp.num_seqs;
  p.total_q = pp.total_q;
  p.kernel_id = KVB_KERNEL_PREFILL_ATTENTION;
  p.tree = pp.tree_mask != nullptr;
  const dim3 grid(unsigned(pp.num_seqs), unsigned(pp.num_q_heads / pp.group), unsigned(pp.num_splits));
  if (fp8) {
    decode::mma_kernel_fp8(dtype, cache, head_dim, cap);  // raises the shared memory limit
    decode::launch_mma_fp8(p, *fp8, dtype, cache, head_dim, cap, grid, s);
    return;
  }
  decode::mma_kernel(dtype, head_dim, cap);  // raises the shared memory limit
  decode::launch_mma(p, dtype, head_dim, cap, grid, s);
}

}  // namespace cuda
}  // namespace kern
}  // namespace kvb
