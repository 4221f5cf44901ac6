// CUDA paged prefill / extend attention, FlashAttention-2 style on tensor cores (fp16 / bf16 queries):
// the kernels, their launch and the host entry point. The per-CTA work (Q, K, V tiles through cp.async,
// mma.sync, the online softmax, the output or a split's partial rows) is prefill_tile, in
// prefill_mma.cuh, which describes it.
//
// One kernel per (type, cache type, head dim, key tile, tree mask): a call with a tree mask runs the
// kernels compiled with its branch, so that the branch takes no registers from the others. CTAs are
// ordered kv head fastest, a sequence's longest tiles first. With several key splits
// prefill_reduce_kernel merges the splits' rows. Short queries go to the tensor-core decode kernel
// (launch_short_queries). FP8 caches (q and out fp16 or bf16) run the same tile with the kv heads'
// scales passed by value.
#include <climits>
#include <type_traits>
#include <vector>

#include "../common/cache.h"
#include "prefill.h"
#include "prefill_tiles.h"
#include "../decode/decode.cuh"
#include "../common/fp8_vec.cuh"
#include "prefill.cuh"
#include "prefill_mma.cuh"
#include "prefill_hopper.cuh"

namespace kvb {
namespace kern {
namespace cuda {

namespace {

constexpr float kLog2e = 1.4426950408889634f;

template <typename T, int D, int BN, int NW, int MI, bool kTree>
__global__ void __launch_bounds__(32 * NW, D == 256 ? 1 : 2) prefill_mma_kernel(const PrefillParams p) {
  prefill_tile<T, T, D, BN, NW, MI, kTree>(p, 1.f, 1.f);
}

// fp8 caches: the kv heads' scales come with the launch (by value: a captured graph keeps them).
template <typename T, typename KV, int D, int BN, int NW, int MI, bool kTree>
__global__ void __launch_bounds__(32 * NW, D == 256 ? 1 : 2) prefill_fp8_kernel(const PrefillParams p,
                                                                                 const Fp8HeadScales sc) {
  const int kvh = tiles::cta_tile(int(blockIdx.x), p.num_q_heads / p.group).kv_head;
  prefill_tile<T, KV, D, BN, NW, MI, kTree>(p, sc.k_of(kvh) * KvVec<KV>::fold(), sc.v_of(kvh) * KvVec<KV>::fold());
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
  T* op = reinterpret_cast<T*>(p.out) + int64_t(row) * p.out_row_stride + int64_t(h) * p.out_head_stride;
  op[d] = Vec<T>::from_float(poisoned ? nan_f() : Wt > 0.f ? A / Wt : 0.f);
}

// Q [BM][D] + K, V [2][BN][D] + offsets [2][BN] bytes + 1 KiB of alignment: D 64 50 KB, D 128 66 KB (registers allow 2
// CTAs / SM), D 256 130 KB (1 CTA of 8 warps); D 256 with 16-key tiles 98 KB.
constexpr int prefill_smem(int D, int BN) { return 2 * BN * 8 + BM * D * 2 + 4 * BN * D * 2 + 1024; }

// sc: the fp8 kernels' scales (nullptr for 16-bit caches).
template <typename T, typename KV, int D, int BN, bool kTree>
void launch_kernel(const PrefillParams& p, const Fp8HeadScales* sc, dim3 grid, cudaStream_t s) {
  constexpr int NW = tiles::cta_warps(D), MI = tiles::mtiles_per_warp(D);
  constexpr int smem = prefill_smem(D, BN);  // the fp8 kernels' too (prefill_fp8_tiles.h)
  if constexpr (kIsFp8Tag<KV>) {
    {
      RelaxedCapture relaxed;
      check(cudaFuncSetAttribute(prefill_fp8_kernel<T, KV, D, BN, NW, MI, kTree>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 smem), "prefill attention: shared memory size");
    }
    prefill_fp8_kernel<T, KV, D, BN, NW, MI, kTree><<<grid, 32 * NW, smem, s>>>(p, *sc);
  } else {
    {
      RelaxedCapture relaxed;  // not a stream operation, but keep it legal while the caller captures a graph
      check(cudaFuncSetAttribute(prefill_mma_kernel<T, D, BN, NW, MI, kTree>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
            "prefill attention: shared memory size");
    }
    prefill_mma_kernel<T, D, BN, NW, MI, kTree><<<grid, 32 * NW, smem, s>>>(p);
  }
  check(cudaGetLastError(), "prefill attention launch");
}

// Calls with a tree mask run the kernels compiled with its branch, the others the kernels without. The
// fp8 tree kernels at head_dim 64 walk 32-key tiles: with 64, the branch's registers spilled on sm_90
// (255 registers); any split boundary, a multiple of prefill_key_tile(), is one of 32 keys too.
template <typename T, typename KV, int D, int BN>
void launch_tile(const PrefillParams& p, const Fp8HeadScales* sc, dim3 grid, cudaStream_t s) {
  constexpr int kTreeBN = kIsFp8Tag<KV> && D == 64 ? 32 : BN;
  if (p.tree_mask)
    launch_kernel<T, KV, D, kTreeBN, true>(p, sc, grid, s);
  else
    launch_kernel<T, KV, D, BN, false>(p, sc, grid, s);
}

template <typename T, typename KV, int D>
void launch_mma(const PrefillParams& p, const Fp8HeadScales* sc, dim3 grid, int device, cudaStream_t s) {
  constexpr int BN = D >= 128 ? 32 : 64;
  static_assert(BN == (D >= 128 ? 32 : 64), "key tile must match prefill_key_tile()");
  bool small_smem = false;  // sm_86 / 89 give a block at most 99 KB
  if constexpr (D == 256) {
    int optin = 0;
    RelaxedCapture relaxed;
    check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), "prefill attention: device");
    small_smem = optin < prefill_smem(D, BN) + 1024;  // the margin covers the static smem
  }
  // D 256 then walks 16-key tiles: every split boundary, a multiple of prefill_key_tile(), is one of 16.
  if constexpr (D == 256) {
    if (small_smem) launch_tile<T, KV, D, 16>(p, sc, grid, s); else launch_tile<T, KV, D, BN>(p, sc, grid, s);
  } else {
    launch_tile<T, KV, D, BN>(p, sc, grid, s);
  }
  const Dtype q_dtype = std::is_same<T, __half>::value ? Dtype::f16 : Dtype::bf16;
  if constexpr (kIsFp8Tag<KV>)
    launch_short_queries(p, q_dtype, D, s, sc, std::is_same<KV, Fp8E5m2>::value ? Dtype::e5m2 : Dtype::e4m3);
  else
    launch_short_queries(p, q_dtype, D, s);
  if (p.num_splits > 1 && p.total_q > 0) {
    prefill_reduce_kernel<T, D><<<dim3(unsigned(p.total_q), unsigned(p.num_q_heads)), D, 0, s>>>(p);
    check(cudaGetLastError(), "prefill attention reduce launch");
  }
}

template <typename T, typename KV = T>
void launch_type(const PrefillParams& p, int head_dim, dim3 grid, int device, cudaStream_t s,
                 const Fp8HeadScales* sc = nullptr) {
  switch (head_dim) {
    case 64: launch_mma<T, KV, 64>(p, sc, grid, device, s); break;
    case 128: launch_mma<T, KV, 128>(p, sc, grid, device, s); break;
    default: launch_mma<T, KV, 256>(p, sc, grid, device, s); break;
  }
}

// An fp8 cache with q / out in fp16 or bf16 (validate.cpp refuses fp32 queries on CUDA).
template <typename T>
void launch_fp8(const Cache& c, const PrefillParams& p, dim3 grid, cudaStream_t s) {
  std::vector<Fp8HeadScales> holder(1, fp8_head_scales(c));  // 1 KiB: built on the heap, passed by value
  if (c.dtype == Dtype::e5m2)
    launch_type<T, Fp8E5m2>(p, int(c.head_dim), grid, c.device_index, s, holder.data());
  else
    launch_type<T, Fp8E4m3>(p, int(c.head_dim), grid, c.device_index, s, holder.data());
}

}  // namespace

void prefill_attention(const Cache& c, const Prefill& a, void* stream) {
  const int64_t q_es = int64_t(dtype_size(a.q_dtype));  // the cache's element size, except for fp8 caches
  if (kv_align_bits(c) % 16 != 0)
    fail(Code::invalid_argument, "cache: CUDA prefill attention needs 16-byte aligned k, v and strides (block %lld, "
         "token %lld, head %lld elements)", (long long)c.block_stride, (long long)c.token_stride, (long long)c.head_stride);
  const uint64_t qo_align = uint64_t(uintptr_t(a.q)) | uint64_t(uintptr_t(a.out)) | uint64_t(a.q_row_stride * q_es) |
                            uint64_t(a.q_head_stride * q_es) | uint64_t(a.out_row_stride * q_es) |
                            uint64_t(a.out_head_stride * q_es);
  if (qo_align % 16 != 0)
    fail(Code::invalid_argument, "args: CUDA prefill attention needs 16-byte aligned q and out with strides a multiple "
         "of 16 bytes (q token %lld, head %lld; out token %lld, head %lld elements)", (long long)a.q_row_stride,
         (long long)a.q_head_stride, (long long)a.out_row_stride, (long long)a.out_head_stride);
  if (uintptr_t(a.query_start) % 4 != 0 || uintptr_t(a.seq_lens) % 4 != 0 || uintptr_t(a.block_tables) % 4 != 0)
    fail(Code::invalid_argument, "args: query_start, seq_lens and block_tables must be 4-byte aligned");
  if (a.max_blocks * c.block_size > int64_t(INT_MAX) - 4096)
    fail(Code::invalid_argument, "args: max_blocks_per_seq * block_size = %lld tokens is too long for CUDA prefill "
         "attention", (long long)(a.max_blocks * c.block_size));
  if (c.num_kv_heads > 65535 || a.num_q_heads > 65535)
    fail(Code::invalid_argument, "num_q_heads %lld / num_kv_heads %lld too large for CUDA prefill attention",
         (long long)a.num_q_heads, (long long)c.num_kv_heads);
  // Packed rows (token x query head of the group) and tile indices are int in the kernels.
  if (a.total_q * (a.num_q_heads / c.num_kv_heads) > int64_t(INT_MAX) - BM || a.plan.num_tiles * c.num_kv_heads > INT_MAX)
    fail(Code::invalid_argument, "args: total_q_tokens %lld x %lld query heads per kv head is too many rows for CUDA "
         "prefill attention", (long long)a.total_q, (long long)(a.num_q_heads / c.num_kv_heads));

  DeviceGuard guard(c.device_index);
  check_attn_pointers(c, a, a.total_q > 0);  // q and out may be NULL without rows
  check_pointer(a.query_start, c.device_index, "args.query_start");
  if (a.tree_mask) {
    if (uintptr_t(a.tree_mask) % 8 != 0) fail(Code::invalid_argument, "args: tree_mask must be 8-byte aligned");
    check_pointer(a.tree_mask, c.device_index, "args.tree_mask");
  }
  if (a.plan.num_splits > 1) check_pointer(a.workspace, c.device_index, "args.workspace");

  PrefillParams p;
  static_cast<AttnIo&>(p) = attn_io(c, a);
  p.query_start = a.query_start;
  p.seq_lens = a.seq_lens;
  p.block_tables = a.block_tables;
  p.tree_mask = a.tree_mask;
  const int64_t rows = a.total_q * a.num_q_heads * a.plan.num_splits;
  p.ws_m = a.plan.num_splits > 1 ? static_cast<float*>(a.workspace) : nullptr;
  p.ws_l = p.ws_m ? p.ws_m + rows : nullptr;
  p.ws_o = p.ws_l ? p.ws_l + rows : nullptr;
  p.num_seqs = int(a.num_seqs);
  p.total_q = int(a.total_q);
  put_attn_shape(p, attn_shape(c, a));
  p.num_splits = int(a.plan.num_splits);
  p.split_tokens = int(a.plan.split_tokens);
  p.scale = a.scale;
  p.soft_cap = a.soft_cap;
  p.q_scale = a.scale * kLog2e;
  p.fault = fault_record(c.device_index);

  cudaStream_t s = as_stream(stream);
  // x: (query tile, kv head) pairs, kv head fastest (prefill_tiles.h cta_tile).
  const dim3 grid(unsigned(a.plan.num_tiles * c.num_kv_heads), 1u, unsigned(a.plan.num_splits));
  if (hopper_prefill_selected(c, a)) {  // opt-in sm_90a kernel (KVB_CUDA_PREFILL=hopper), same grid; not fp8
    launch_prefill_hopper(p, c.dtype, grid, s);
    return;
  }
  if (c.fp8()) {
    if (a.q_dtype == Dtype::bf16) launch_fp8<__nv_bfloat16>(c, p, grid, s); else launch_fp8<__half>(c, p, grid, s);
    return;
  }
  switch (c.dtype) {
    case Dtype::f16: launch_type<__half>(p, int(c.head_dim), grid, c.device_index, s); break;
    case Dtype::bf16: launch_type<__nv_bfloat16>(p, int(c.head_dim), grid, c.device_index, s); break;
    default: launch_prefill_fp32(p, int(c.head_dim), a.allow_tf32, s); break;
  }
}

}  // namespace cuda
}  // namespace kern
}  // namespace kvb
