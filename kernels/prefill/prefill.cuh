// Shared by the CUDA prefill kernels (prefill.cu: tensor cores for fp16 / bf16; prefill_fp32.cu: CUDA
// cores): the launch parameters and the device-side lookups that replace any host read of query_start.
#pragma once
#include "../../abi/kvblock.h"
#include "../common/attn_io.cuh"
#include "../common/cuda.cuh"

namespace kvb {
namespace kern {
namespace cuda {

// The attention I/O (rows: query tokens), then the prefill call's own fields.
struct PrefillParams : AttnIo {
  const int32_t* query_start;
  const int32_t* seq_lens;
  const int32_t* block_tables;
  const uint64_t* tree_mask;  // [total_q] or NULL (kvb_prefill_args.tree_mask)
  float* ws_m;
  float* ws_l;
  float* ws_o;
  int num_seqs, total_q, num_blocks, block_shift, max_blocks;
  int num_q_heads, group, window, sink, num_splits, split_tokens;
  float scale, soft_cap;
  float q_scale;  // scale * log2(e) (no soft cap)
  FaultRecord* fault;
};

// One sequence as the kernels see it. fault != 0 (a kvb_fault_kind, with fault_index / fault_value)
// when its query_start / seq_lens break the contract the CPU back end checks; its rows (q_len clipped
// to [0, total_q)) are then written as NaN and nothing else of it is read.
struct SeqView {
  int seq, row0, q_len, len;
  int fault, fault_index, fault_value;
};

__device__ __forceinline__ SeqView seq_view(const PrefillParams& p, int seq) {
  SeqView s;
  s.seq = seq;
  s.row0 = p.query_start[seq];
  const int row1 = p.query_start[seq + 1];
  s.len = p.seq_lens[seq];
  s.q_len = row1 - s.row0;
  s.fault = KVB_FAULT_NONE, s.fault_index = seq, s.fault_value = 0;
  if (seq == 0 && s.row0 != 0)
    s.fault = KVB_FAULT_QUERY_START, s.fault_index = 0, s.fault_value = s.row0;
  else if (row1 < s.row0 || row1 > p.total_q || (seq == p.num_seqs - 1 && row1 != p.total_q))
    s.fault = KVB_FAULT_QUERY_START, s.fault_index = seq + 1, s.fault_value = row1;
  else if (s.len < s.q_len || s.len > (p.max_blocks << p.block_shift))
    s.fault = KVB_FAULT_SEQ_LEN, s.fault_value = s.len;
  if (s.fault != KVB_FAULT_NONE) s.q_len = max(0, min(row1, p.total_q) - max(s.row0, 0)), s.row0 = max(s.row0, 0);
  return s;
}

__device__ __forceinline__ float nan_f() { return __int_as_float(0x7fffffff); }

// The last step of a prefill tile: 16 bytes (chunk c of 8 elements) of packed tile row pr, staged in
// shared memory at src, to out (query row row0 + pr / G, head kvh * G + pr % G). Rows outside
// [0, total_q) are the padding of a faulty sequence: not written.
template <typename T>
__device__ __forceinline__ void store_out_chunk(const PrefillParams& p, int row0, int pr, int kvh, int G, int c,
                                                uint32_t src) {
  const int row = row0 + pr / G, h = kvh * G + pr % G;
  if (row < 0 || row >= p.total_q) return;
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(src));
  T* op = reinterpret_cast<T*>(p.out) + int64_t(row) * p.out_row_stride + int64_t(h) * p.out_head_stride + c * 8;
  *reinterpret_cast<uint4*>(op) = v;
}

// Sequence of query row `row`: the last i with query_start[i] <= row (binary search).
__device__ __forceinline__ int seq_of_row(const PrefillParams& p, int row) {
  int lo = 0, hi = p.num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (p.query_start[mid] <= row) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// Sequence of query tile `tile`: sequence i owns tiles [b_i, b_{i+1}) with
// b_i = floor(query_start[i] * group / rows_per_tile) + i (see kvblock.h); the last i with b_i <= tile.
__device__ __forceinline__ int seq_of_tile(const PrefillParams& p, int tile, int rows_per_tile) {
  int lo = 0, hi = p.num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    const int64_t b = int64_t(p.query_start[mid]) * p.group / rows_per_tile + mid;
    if (b <= tile) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// tf32: Prefill::allow_tf32 (TF32 tensor cores instead of exact fp32 products on CUDA cores).
void launch_prefill_fp32(const PrefillParams& p, int head_dim, bool tf32, cudaStream_t s);

}  // namespace cuda
}  // namespace kern
}  // namespace kvb
