#include "block_pool.h"

#include <new>

#include "error.h"

namespace kvb {

BlockPool::BlockPool(uint32_t num_blocks, uint32_t block_size, const char* what) try
    : num_blocks_(num_blocks),
      block_size_(block_size),
      meta_(num_blocks, true),
      tokens_(static_cast<size_t>(num_blocks) * block_size, false) {
  for (uint32_t b = 0; b < num_blocks; ++b) push_tail(static_cast<int32_t>(b));
} catch (const std::bad_alloc&) {
  const unsigned long long per = sizeof(BlockMeta) + static_cast<unsigned long long>(block_size) * sizeof(int64_t);
  fail_alloc(what, per * num_blocks, "%u blocks of %zu bytes of metadata and %u token ids", num_blocks,
             sizeof(BlockMeta), block_size);
}

void BlockPool::park(int32_t b) {
  BlockMeta& m = meta_[b];
  m.prev = parked_.tail;
  m.next = -1;
  if (parked_.tail >= 0) meta_[parked_.tail].next = b; else parked_.head = b;
  parked_.tail = b;
  m.in_free = 2;
  ++num_free_;
  ++num_parked_;
}

void BlockPool::push_head(int32_t b) {
  BlockMeta& m = meta_[b];
  m.prev = -1;
  m.next = head_;
  if (head_ >= 0) meta_[head_].prev = b; else tail_ = b;
  head_ = b;
  m.in_free = 1;
  ++num_free_;
}

}  // namespace kvb
