// The paged KV address rule, once for the CPU and the CUDA kernels. Token `pos` (a position in a
// sequence, or a cache slot) is row pos & (block_size - 1) of block `block`: for a sequence the block
// table's entry pos >> block_shift, for a slot slot >> block_shift (block sizes are powers of two,
// validate.cpp). `PagedKv` holds the three strides; the cache descriptor (`Cache`) is one, and every
// launch-parameter struct embeds one, so that no kernel multiplies by a block stride itself
// (tests/scripts/paged_address.sh). Its unit is its owner's: elements in `Cache` and the attention
// kernels' parameters, bytes where a kernel moves raw bytes (write_kv, copy, copy_slots: `in_bytes`).
#pragma once
#include <cstdint>

#include "host_device.h"

namespace kvb {
namespace kern {

struct PagedKv {
  int64_t block_stride = 0, token_stride = 0, head_stride = 0;

  // Offset of token `pos`'s row (head 0) in block `block`; `block_mask` is block_size - 1. The position
  // keeps the caller's type (int in the CUDA kernels, whose positions stay below 2^31: read_attention
  // and read_prefill check max_blocks_per_seq * block_size), so the mask costs no 64-bit instruction.
  template <class Pos, class Mask>
  KVB_HD int64_t row(int64_t block, Pos pos, Mask block_mask) const {
    return block * block_stride + int64_t(pos & block_mask) * token_stride;
  }
  // The same row at kv head `head`.
  template <class Pos, class Mask>
  KVB_HD int64_t row(int64_t block, Pos pos, Mask block_mask, int64_t head) const {
    return row(block, pos, block_mask) + head * head_stride;
  }
  // Row of cache slot `slot` (head 0).
  template <class Mask>
  KVB_HD int64_t slot_row(int64_t slot, int block_shift, Mask block_mask) const {
    return row(slot >> block_shift, slot, block_mask);
  }
  // Offset of kv head `head` within a row, and of block `block`'s start (whole-block copies).
  KVB_HD int64_t head(int64_t h) const { return h * head_stride; }
  KVB_HD int64_t block(int64_t b) const { return b * block_stride; }
  // Elements of `num_blocks` blocks (a pool's extent).
  KVB_HD int64_t blocks_extent(int64_t num_blocks) const { return num_blocks * block_stride; }

  // The strides scaled by `elem_size` (element strides to bytes).
  PagedKv in_bytes(int64_t elem_size) const {
    PagedKv b;
    b.block_stride = block_stride * elem_size;
    b.token_stride = token_stride * elem_size;
    b.head_stride = head_stride * elem_size;
    return b;
  }
  // The strides OR-ed together (alignment checks: the low bits of every address they can form).
  uint64_t stride_bits() const { return uint64_t(block_stride) | uint64_t(token_stride) | uint64_t(head_stride); }
  bool operator==(const PagedKv& o) const {
    return block_stride == o.block_stride && token_stride == o.token_stride && head_stride == o.head_stride;
  }
};

}  // namespace kern
}  // namespace kvb
