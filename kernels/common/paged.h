// The paged KV address rule, once for the CPU and the CUDA kernels. Token `pos` (a position in a
// sequence, or a cache slot) is row pos & (block_size - 1) of block `block_id`: for a sequence the
// block table's entry pos >> block_shift, for a slot slot >> block_shift (block sizes are powers of two,
// validate.cpp). The caller adds its head's offset and scales to bytes where its strides are elements.
#pragma once
#include <cstdint>

#include "types.h"

#if defined(__CUDACC__)
#define KVB_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define KVB_HOST_DEVICE inline
#endif

namespace kvb {
namespace kern {

// Offset of token `pos`'s row in block `block_id`, in the unit of the strides. The position keeps the
// caller's type (int in the CUDA kernels, whose positions stay below 2^31: read_attention and
// read_prefill check max_blocks_per_seq * block_size), so the mask costs no 64-bit instruction there.
template <class Pos, class Mask>
KVB_HOST_DEVICE int64_t paged_offset(int64_t block_id, Pos pos, Mask block_mask, int64_t block_stride,
                                     int64_t token_stride) {
  return block_id * block_stride + int64_t(pos & block_mask) * token_stride;
}

// The CPU kernels' two uses, in elements of cache `c` (head 0): position `pos` of a sequence whose
// block table (already checked) is `table`, and cache slot `slot`.
inline int64_t paged_offset(const Cache& c, const int32_t* table, int64_t pos) {
  const int64_t block_id = table[pos >> c.block_shift];
  return paged_offset(block_id, pos, c.block_size - 1, c.block_stride, c.token_stride);
}
inline int64_t slot_offset(const Cache& c, int64_t slot) {
  return paged_offset(slot >> c.block_shift, slot, c.block_size - 1, c.block_stride, c.token_stride);
}

}  // namespace kern
}  // namespace kvb
