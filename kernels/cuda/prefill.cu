// CUDA paged prefill / extend attention, FlashAttention-2 style on tensor cores (fp16 / bf16).
//
// CTA = 4 warps = one tile of 64 packed query rows (token, query head of the GQA group) of one
// sequence and one kv head, over one key split. Each warp owns 16 rows. Q is staged once in shared
// memory; K and V tiles of BN tokens are gathered through the block table into shared memory with
// cp.async, double-buffered (tile i+1 loads while tile i computes). S = Q K^T and O += P V use
// mma.sync m16n8k16 (fp32 accumulation) fed by ldmatrix from XOR-swizzled shared memory (16-byte
// chunk c of row r sits at chunk c ^ (r & 7): conflict-free for cp.async stores and ldmatrix loads).
// The online softmax lives in registers (a thread holds 2 rows x 2 columns per 8-key n-tile; row
// max / sum across the 4 threads of a row by shuffles); P is repacked from the S accumulators into A
// fragments without leaving registers. Keys are walked over the attended tiles only (sinks, then the
// window up to the tile's last position); the causal / window mask is evaluated only on the tiles that
// some row does not fully attend. Keys past the sequence or behind an invalid block id are zero-filled
// (cp.async src-size 0), never read. With several splits each CTA writes (max, sum, normalised acc)
// per row to the workspace and prefill_reduce_kernel merges them.
#include <climits>
#include <type_traits>

#include "../backends.h"
#include "../prefill.h"
#include "../decode_tiles.h"
#include "../prefill_tiles.h"
#include "attention_common.cuh"
#include "prefill_common.cuh"

namespace kvb {
namespace kern {
namespace cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int BM = int(kPrefillTileRows);  // packed rows per CTA, 16 per warp
constexpr float kLog2e = 1.4426950408889634f;

template <typename T>
struct Mma;

template <>
struct Mma<__half> {
  static __device__ __forceinline__ void run(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ uint32_t pack(float x, float y) {
    const __half2 h = __floats2half2_rn(x, y);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
};

template <>
struct Mma<__nv_bfloat16> {
  static __device__ __forceinline__ void run(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ uint32_t pack(float x, float y) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
};

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// 16 bytes global -> shared; src_bytes 0 writes zeros and reads nothing.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

using tiles::frag::swz;  // byte offset of 16-byte chunk c of row r in a swizzled [rows][C chunks] tile

template <typename T, int D, int BN>
__global__ void __launch_bounds__(kThreads) prefill_mma_kernel(const PrefillParams p) {
  constexpr int C = D / 8;   // 16-byte chunks per row
  constexpr int NT = BN / 8;  // 8-key n-tiles of S per warp
  constexpr int DT = D / 8;   // 8-dim n-tiles of O per warp
  extern __shared__ __align__(16) unsigned char smem[];
  const uint32_t sQ = uint32_t(__cvta_generic_to_shared(smem));
  const uint32_t sK = sQ + BM * D * 2;       // [2][BN][D]
  const uint32_t sV = sK + 2 * BN * D * 2;   // [2][BN][D]
  constexpr uint32_t kBuf = BN * D * 2;      // bytes of one K (or V) buffer

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int kvh = blockIdx.y, split = blockIdx.z, G = p.group;
  const int seq = tiles::seq_of_tile(p.query_start, p.num_seqs, G, BM, int(blockIdx.x));
  const SeqView sv = seq_view(p, seq);
  if (dtiles::decode_path_owns(seq, p.num_seqs, p.query_start[seq], p.query_start[seq + 1], p.total_q, p.seq_lens[seq],
                               p.max_blocks << p.block_shift, G))
    return;  // a short query: launch_short_queries (decode_mma.cu) computes its rows
  const int64_t lt = int64_t(blockIdx.x) - tiles::tile_base(p.query_start[seq], seq, G, BM);  // tile of seq
  const int pr0 = lt >= 0 && lt * BM <= INT_MAX ? int(lt) * BM : -1;  // first packed row
  const int rows = min(BM, sv.q_len * G - pr0);  // packed rows of this tile
  if (sv.fault != KVB_FAULT_NONE && pr0 == 0 && kvh == 0 && split == 0 && tid == 0)  // once per sequence
    record_fault(p.fault, sv.fault, KVB_KERNEL_PREFILL_ATTENTION, sv.fault_index, -1, sv.fault_value);
  if (pr0 < 0 || rows <= 0) return;  // a surplus tile (uniform over the CTA)

  const int base = sv.len - sv.q_len;
  const int pos_first = base + pr0 / G, pos_last = base + (pr0 + rows - 1) / G;
  // Attended key tiles of this split: the sinks, then the window up to pos_last (prefill_tiles.h).
  const tiles::KeyTiles kt =
      tiles::key_tiles(pos_first, pos_last, p.window, p.sink, BN, split, p.split_tokens / BN);
  const int W = p.window, sink = kt.sink, lo_first = kt.lo_first;
  const int n_tiles = sv.fault == KVB_FAULT_NONE ? kt.count() : 0;
  __shared__ int s_bad;  // an attended key's block id was out of range: this tile's rows are NaN
  if (tid == 0) s_bad = 0;
  __syncthreads();

  const int32_t* table = p.block_tables + int64_t(seq) * p.max_blocks;
  const int64_t head_off = int64_t(kvh) * p.head_stride;
  const int kmask = (1 << p.block_shift) - 1;

  // Q: packed row r -> (token (pr0 + r) / G, head kvh * G + (pr0 + r) % G); rows past the tile are zeros.
  for (int i = tid; i < BM * C; i += kThreads) {
    const int r = i / C, c = i - r * C;
    const int pr = pr0 + r;
    const bool ok = sv.fault == KVB_FAULT_NONE && r < rows;
    const T* src = reinterpret_cast<const T*>(p.q);
    if (ok)
      src += int64_t(sv.row0 + pr / G) * p.q_token_stride + int64_t(kvh * G + pr % G) * p.q_head_stride + c * 8;
    cp_async16(sQ + swz(C, r, c), src, ok ? 16 : 0);
  }
  auto load_kv = [&](int i, int buf) {
    const int k0 = kt.tile(i) * BN;
    for (int x = tid; x < BN * C; x += kThreads) {
      const int r = x / C, c = x - r * C;
      const int tok = k0 + r;
      int blk = -1;
      if (tok < sv.len) {
        const int id = table[tok >> p.block_shift];
        blk = (id >= 0 && id < p.num_blocks) ? id : -1;
        // A token some row of this tile attends needs a valid block (what the CPU checks); other
        // tokens of the key tile may sit in blocks a window released (-1): zero-filled, masked.
        if (blk < 0 && c == 0 && tok <= pos_last && (tok < sink || tok >= lo_first))
          if (atomicExch(&s_bad, 1) == 0 && kvh == 0)  // counted once per (query tile, split), not per kv head
            record_fault(p.fault, KVB_FAULT_BLOCK_ID, KVB_KERNEL_PREFILL_ATTENTION, seq, tok >> p.block_shift, id);
      }
      const int64_t off = blk >= 0 ? int64_t(blk) * p.block_stride + int64_t(tok & kmask) * p.token_stride + head_off + c * 8 : 0;
      cp_async16(sK + buf * kBuf + swz(C, r, c), reinterpret_cast<const T*>(p.k) + off, blk >= 0 ? 16 : 0);
      cp_async16(sV + buf * kBuf + swz(C, r, c), reinterpret_cast<const T*>(p.v) + off, blk >= 0 ? 16 : 0);
    }
  };
  if (n_tiles > 0) load_kv(0, 0);
  cp_async_commit();

  // This thread's two rows (lane / 4 and lane / 4 + 8 of the warp's 16); padding rows copy the last.
  const int r_lo = min(warp * 16 + tiles::frag::c_row(lane, 0), rows - 1);
  const int r_hi = min(warp * 16 + tiles::frag::c_row(lane, 2), rows - 1);
  const int pos0 = base + (pr0 + r_lo) / G, pos1 = base + (pr0 + r_hi) / G;

  float o[DT][4];
#pragma unroll
  for (int d = 0; d < DT; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;

  for (int i = 0; i < n_tiles; ++i) {
    const int buf = i & 1;
    if (i + 1 < n_tiles) load_kv(i + 1, buf ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();

    // S = Q K^T for the warp's 16 rows x BN keys.
    float s[NT][4];
#pragma unroll
    for (int n = 0; n < NT; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[4];
      ldsm_x4(a, sQ + swz(C, tiles::frag::q_row(warp, lane), tiles::frag::q_chunk(kk, lane)));
#pragma unroll
      for (int n2 = 0; n2 < NT / 2; ++n2) {
        uint32_t b[4];
        ldsm_x4(b, sK + buf * kBuf + swz(C, tiles::frag::k_row(n2, lane), tiles::frag::k_chunk(kk, lane)));
        Mma<T>::run(s[2 * n2], a, b[0], b[1]);
        Mma<T>::run(s[2 * n2 + 1], a, b[2], b[3]);
      }
    }

    // Logits in base 2, the mask where some row does not see the whole tile, online softmax.
    const int k0 = kt.tile(i) * BN;
    const bool full = kt.full(kt.tile(i));
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[n][e];
        x = p.soft_cap > 0.f ? p.soft_cap * tanhf(x * p.scale / p.soft_cap) * kLog2e : x * p.q_scale;
        if (!full) {
          const int key = k0 + n * 8 + tiles::frag::c_col(lane, e);
          if (!tiles::attends(key, e < 2 ? pos0 : pos1, W, sink)) x = -INFINITY;
        }
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
    for (int n = 0; n < NT; ++n) {
      s[n][0] = exp2f(s[n][0] - u0), s[n][1] = exp2f(s[n][1] - u0);
      s[n][2] = exp2f(s[n][2] - u1), s[n][3] = exp2f(s[n][3] - u1);
      l0 += s[n][0] + s[n][1], l1 += s[n][2] + s[n][3];
    }

    // O += P V: P (16 x BN) from the S accumulators, V through ldmatrix.trans.
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      const uint32_t a[4] = {Mma<T>::pack(s[2 * kk][0], s[2 * kk][1]), Mma<T>::pack(s[2 * kk][2], s[2 * kk][3]),
                             Mma<T>::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             Mma<T>::pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int d2 = 0; d2 < DT / 2; ++d2) {
        uint32_t b[4];
        ldsm_x4_trans(b, sV + buf * kBuf + swz(C, tiles::frag::v_row(kk, lane), tiles::frag::v_chunk(d2, lane)));
        Mma<T>::run(o[2 * d2], a, b[0], b[1]);
        Mma<T>::run(o[2 * d2 + 1], a, b[2], b[3]);
      }
    }
    __syncthreads();  // everyone is done with buf before the next iteration refills it
  }
  cp_async_wait<0>();
  __syncthreads();
  const bool bad = sv.fault != KVB_FAULT_NONE || s_bad != 0;

#pragma unroll
  for (int o2 = 1; o2 <= 2; o2 <<= 1) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, o2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, o2);
  }
  // Write the two rows (skipping padding): output directly, or this split's partial to the workspace.
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = warp * 16 + tiles::frag::c_row(lane, 2 * half);
    if (r >= rows) continue;
    const float l = half ? l1 : l0, m = half ? m1 : m0;
    const float inv = bad ? nan_f() : (l > 0.f ? 1.f / l : 0.f);
    const int pr = pr0 + r;
    const int row = sv.row0 + pr / G, h = kvh * G + pr % G;
    if (row < 0 || row >= p.total_q) continue;
    if (p.num_splits == 1) {
      T* op = reinterpret_cast<T*>(p.out) + int64_t(row) * p.out_token_stride + int64_t(h) * p.out_head_stride;
#pragma unroll
      for (int d = 0; d < DT; ++d)
        *reinterpret_cast<uint32_t*>(op + d * 8 + tiles::frag::c_col(lane, 0)) =
            Mma<T>::pack(o[d][2 * half] * inv, o[d][2 * half + 1] * inv);
    } else {
      const int64_t wrow = (int64_t(row) * p.num_q_heads + h) * p.num_splits + split;
      float* op = p.ws_o + wrow * D;
#pragma unroll
      for (int d = 0; d < DT; ++d) {  // scalar: ws_o is only 4-byte aligned when num_splits is odd
        op[d * 8 + tiles::frag::c_col(lane, 0)] = o[d][2 * half] * inv;
        op[d * 8 + tiles::frag::c_col(lane, 1)] = o[d][2 * half + 1] * inv;
      }
      if ((lane & 3) == 0) {
        p.ws_m[wrow] = m;
        p.ws_l[wrow] = bad ? nan_f() : l;  // the reduce kernel passes a NaN weight on
      }
    }
  }
}

// One CTA of D threads per (query row, query head): merge the splits with weights l_s * 2^(m_s - M).
template <typename T, int D>
__global__ void __launch_bounds__(D) prefill_reduce_kernel(const PrefillParams p) {
  const int row = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
  const int64_t w0 = (int64_t(row) * p.num_q_heads + h) * p.num_splits;
  float M = -INFINITY;
  bool poisoned = false;
  for (int i = 0; i < p.num_splits; ++i) {
    const float li = p.ws_l[w0 + i];
    poisoned |= li != li;
    if (li > 0.f) M = fmaxf(M, p.ws_m[w0 + i]);
  }
  float Wt = 0.f, A = 0.f;
  for (int i = 0; i < p.num_splits; ++i) {
    const float li = p.ws_l[w0 + i];
    if (!(li > 0.f)) continue;
    const float w = li * exp2f(p.ws_m[w0 + i] - M);
    Wt += w;
    A += w * p.ws_o[(w0 + i) * D + d];
  }
  T* op = reinterpret_cast<T*>(p.out) + int64_t(row) * p.out_token_stride + int64_t(h) * p.out_head_stride;
  op[d] = Vec<T>::from_float(poisoned ? nan_f() : Wt > 0.f ? A / Wt : 0.f);
}

template <typename T, int D>
void launch_mma(const PrefillParams& p, dim3 grid, cudaStream_t s) {
  constexpr int BN = D == 256 ? 32 : 64;
  static_assert(BN == (D == 256 ? 32 : 64), "key tile must match prefill_key_tile()");
  constexpr int smem = BM * D * 2 + 4 * BN * D * 2;
  {
    RelaxedCapture relaxed;  // not a stream operation, but keep it legal while the caller captures a graph
    check(cudaFuncSetAttribute(prefill_mma_kernel<T, D, BN>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
          "prefill attention: shared memory size");
  }
  prefill_mma_kernel<T, D, BN><<<grid, kThreads, smem, s>>>(p);
  check(cudaGetLastError(), "prefill attention launch");
  launch_short_queries(p, std::is_same<T, __half>::value ? Dtype::f16 : Dtype::bf16, D, s);
  if (p.num_splits > 1 && p.total_q > 0) {
    prefill_reduce_kernel<T, D><<<dim3(unsigned(p.total_q), unsigned(p.num_q_heads)), D, 0, s>>>(p);
    check(cudaGetLastError(), "prefill attention reduce launch");
  }
}

template <typename T>
void launch_type(const PrefillParams& p, int head_dim, dim3 grid, cudaStream_t s) {
  switch (head_dim) {
    case 64: launch_mma<T, 64>(p, grid, s); break;
    case 128: launch_mma<T, 128>(p, grid, s); break;
    default: launch_mma<T, 256>(p, grid, s); break;
  }
}

}  // namespace

void prefill_attention(const Cache& c, const Prefill& a, void* stream) {
  const int64_t es = int64_t(c.elem());
  const uint64_t kv_align = uint64_t(uintptr_t(c.k)) | uint64_t(uintptr_t(c.v)) | uint64_t(c.block_stride * es) |
                            uint64_t(c.token_stride * es) | uint64_t(c.head_stride * es);
  if (kv_align % 16 != 0)
    fail(Code::invalid_argument, "cache: CUDA prefill attention needs 16-byte aligned k, v and strides (block %lld, "
         "token %lld, head %lld elements)", (long long)c.block_stride, (long long)c.token_stride, (long long)c.head_stride);
  const uint64_t qo_align = uint64_t(uintptr_t(a.q)) | uint64_t(uintptr_t(a.out)) | uint64_t(a.q_token_stride * es) |
                            uint64_t(a.q_head_stride * es) | uint64_t(a.out_token_stride * es) |
                            uint64_t(a.out_head_stride * es);
  if (qo_align % 16 != 0)
    fail(Code::invalid_argument, "args: CUDA prefill attention needs 16-byte aligned q and out with strides a multiple "
         "of 16 bytes (q token %lld, head %lld; out token %lld, head %lld elements)", (long long)a.q_token_stride,
         (long long)a.q_head_stride, (long long)a.out_token_stride, (long long)a.out_head_stride);
  if (uintptr_t(a.query_start) % 4 != 0 || uintptr_t(a.seq_lens) % 4 != 0 || uintptr_t(a.block_tables) % 4 != 0)
    fail(Code::invalid_argument, "args: query_start, seq_lens and block_tables must be 4-byte aligned");
  if (a.max_blocks * c.block_size > int64_t(INT_MAX) - 4096)
    fail(Code::invalid_argument, "args: max_blocks_per_seq * block_size = %lld tokens is too long for CUDA prefill "
         "attention", (long long)(a.max_blocks * c.block_size));
  if (c.num_kv_heads > 65535 || a.num_q_heads > 65535)
    fail(Code::invalid_argument, "num_q_heads %lld / num_kv_heads %lld too large for CUDA prefill attention",
         (long long)a.num_q_heads, (long long)c.num_kv_heads);
  // Packed rows (token x query head of the group) and tile indices are int in the kernels.
  if (a.total_q * (a.num_q_heads / c.num_kv_heads) > int64_t(INT_MAX) - BM || a.plan.num_tiles > INT_MAX)
    fail(Code::invalid_argument, "args: total_q_tokens %lld x %lld query heads per kv head is too many rows for CUDA "
         "prefill attention", (long long)a.total_q, (long long)(a.num_q_heads / c.num_kv_heads));

  DeviceGuard guard(c.device_index);
  check_pointer(c.k, c.device_index, "cache.k");
  check_pointer(c.v, c.device_index, "cache.v");
  if (a.total_q > 0) {  // q and out may be NULL without rows; the sequences are still checked
    check_pointer(a.q, c.device_index, "args.q");
    check_pointer(a.out, c.device_index, "args.out");
  }
  check_pointer(a.query_start, c.device_index, "args.query_start");
  check_pointer(a.seq_lens, c.device_index, "args.seq_lens");
  check_pointer(a.block_tables, c.device_index, "args.block_tables");
  if (a.plan.num_splits > 1) check_pointer(a.workspace, c.device_index, "args.workspace");

  PrefillParams p;
  p.k = static_cast<const char*>(c.k);
  p.v = static_cast<const char*>(c.v);
  p.block_stride = c.block_stride;
  p.token_stride = c.token_stride;
  p.head_stride = c.head_stride;
  p.q = static_cast<const char*>(a.q);
  p.q_token_stride = a.q_token_stride;
  p.q_head_stride = a.q_head_stride;
  p.out = static_cast<char*>(a.out);
  p.out_token_stride = a.out_token_stride;
  p.out_head_stride = a.out_head_stride;
  p.query_start = a.query_start;
  p.seq_lens = a.seq_lens;
  p.block_tables = a.block_tables;
  const int64_t rows = a.total_q * a.num_q_heads * a.plan.num_splits;
  p.ws_m = a.plan.num_splits > 1 ? static_cast<float*>(a.workspace) : nullptr;
  p.ws_l = p.ws_m ? p.ws_m + rows : nullptr;
  p.ws_o = p.ws_l ? p.ws_l + rows : nullptr;
  p.num_seqs = int(a.num_seqs);
  p.total_q = int(a.total_q);
  p.num_blocks = int(c.num_blocks);
  p.block_shift = c.block_shift;
  p.max_blocks = int(a.max_blocks);
  p.num_q_heads = int(a.num_q_heads);
  p.group = int(a.num_q_heads / c.num_kv_heads);
  p.window = a.window > INT_MAX ? INT_MAX : int(a.window);
  p.sink = a.sink > INT_MAX ? INT_MAX : int(a.sink);
  p.num_splits = int(a.plan.num_splits);
  p.split_tokens = int(a.plan.split_tokens);
  p.scale = a.scale;
  p.soft_cap = a.soft_cap;
  p.q_scale = a.scale * kLog2e;
  p.fault = fault_record(c.device_index);

  cudaStream_t s = as_stream(stream);
  const dim3 grid(unsigned(a.plan.num_tiles), unsigned(c.num_kv_heads), unsigned(a.plan.num_splits));
  switch (c.dtype) {
    case Dtype::f16: launch_type<__half>(p, int(c.head_dim), grid, s); break;
    case Dtype::bf16: launch_type<__nv_bfloat16>(p, int(c.head_dim), grid, s); break;
    default: launch_prefill_fp32(p, int(c.head_dim), s); break;
  }
}

}  // namespace cuda
}  // namespace kern
}  // namespace kvb
