// Shared by the paged decode kernels (decode.cu: CUDA cores, every dtype; decode_mma.cu: tensor cores
// for 16-bit and fp8 caches and GQA groups of kMinGroup and more): launch parameters, the checks every kernel
// makes the same way, the workspace layout the partition-merge kernel reads.
#pragma once
#include "../../abi/kvblock.h"
#include "decode.h"
#include "../common/attn_io.cuh"
#include "../common/cuda.cuh"

namespace kvb {
namespace kern {
namespace cuda {

struct Fp8HeadScales;  // fp8_vec.cuh

// What a paged decode-style kernel reads and writes, first in its launch parameters: the attention I/O
// (rows: sequences, or tokens for a prefill's short queries), the block tables and sequence lengths.
struct PagedIo : AttnIo {
  const int32_t* block_tables;
  const int32_t* seq_lens;
};

inline PagedIo paged_io(const Cache& c, const AttnCall& a) {
  PagedIo io;
  static_cast<AttnIo&>(io) = attn_io(c, a);
  io.block_tables = a.block_tables;
  io.seq_lens = a.seq_lens;
  return io;
}

namespace decode {

constexpr int kMaxPartitionBlocks = 2048;  // partition_size <= 2048 tokens and block_size >= 1

// Workspace rows (split launches): row (seq * num_q_heads + head) * num_partitions + partition holds
// ws_m (base-2 max), ws_l (sum of weights; NaN = the partition met a bad block id) and ws_o[D]
// (normalised accumulator).
struct AttnParams : PagedIo {
  float* ws_m;
  float* ws_l;
  float* ws_o;
  int num_blocks, block_shift, max_blocks;
  int num_q_heads, group, heads_per_chunk, num_chunks;  // chunks: CUDA-core kernel only
  int window, sink, partition_size, num_partitions;
  float q_scale;   // scale, times log2(e) when there is no soft cap
  float soft_cap;  // 0 = off
  float inv_cap;   // 1 / soft_cap
  FaultRecord* fault;
  // Short queries of a prefill call (decode_mma.cu only; null query_start = decode): q / out rows are
  // tokens, partitions are the prefill plan's key splits.
  const int32_t* query_start;
  int num_seqs, total_q;
  unsigned kernel_id;  // kvb_kernel_id of faults
  int tree;            // the prefill call has a tree mask: only q_len 1 sequences are this path's
};

// seq_lens[seq], or -1 when it is outside [0, max_blocks << block_shift] (a fault).
__device__ __forceinline__ int checked_len(const AttnParams& p, int seq) {
  const int len = p.seq_lens[seq];
  return (len < 0 || len > (p.max_blocks << p.block_shift)) ? -1 : len;
}

// Every output element of heads [h0, h0 + count) of seq is NaN: a faulty sequence is visibly wrong.
template <typename T, int D>
__device__ void write_nan(const AttnParams& p, int seq, int h0, int count) {
  for (int i = threadIdx.x; i < count * D; i += blockDim.x) {
    const int h = h0 + i / D, d = i % D;
    T* op = reinterpret_cast<T*>(p.out) + int64_t(seq) * p.out_row_stride + int64_t(h) * p.out_head_stride;
    op[d] = Vec<T>::from_float(__int_as_float(0x7fffffff));
  }
}

// Tensor-core kernel for 16-bit caches (decode_mma.cu; fp8 caches: the _fp8 functions below); grid (num_partitions, num_kv_heads *
// dtiles::num_chunks(group), num_seqs), mma_smem(head_dim) bytes of dynamic shared memory (the current
// device's pipeline depth). mma_kernel gives the instantiation (for occupancy queries); launch_mma runs it.
size_t mma_smem(int head_dim);
int mma_stages(int head_dim);  // the current device's pipeline depth (dtiles::stages)
const void* mma_kernel(Dtype dtype, int head_dim, bool cap);
void launch_mma(const AttnParams& p, Dtype dtype, int head_dim, bool cap, dim3 grid, cudaStream_t s);
// The same for fp8 caches (cache e4m3 / e5m2, q and out in q_dtype fp16 / bf16): mma_smem_fp8 bytes,
// the kv heads' scales by value.
size_t mma_smem_fp8(int head_dim);
const void* mma_kernel_fp8(Dtype q_dtype, Dtype cache, int head_dim, bool cap);
void launch_mma_fp8(const AttnParams& p, const Fp8HeadScales& sc, Dtype q_dtype, Dtype cache, int head_dim, bool cap,
                    dim3 grid, cudaStream_t s);

}  // namespace decode

struct PrefillParams;
// The short-query sequences of a prefill call (dtiles::decode_path_owns), fp16 / bf16: through the
// tensor-core decode kernel, which writes their rows (or, with key splits, their workspace rows, before
// the prefill reduce kernel runs); the prefill kernel skips them. Launch it after the prefill kernel
// and before its reduce kernel, on the same stream.
// fp8 caches: dtype is q's, cache the fp8 format, fp8 the kv heads' scales.
void launch_short_queries(const PrefillParams& p, Dtype dtype, int head_dim, cudaStream_t s,
                          const Fp8HeadScales* fp8 = nullptr, Dtype cache = Dtype::f16);

namespace decode {

}  // namespace decode
}  // namespace cuda
}  // namespace kern
}  // namespace kvb
