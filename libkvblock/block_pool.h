// The device block array: per-block metadata, the intrusive FIFO free queue and the flat token store.
// Everything is sized once at creation; no operation here allocates.
#pragma once
#include <cstdint>
#include <memory>

#include "hash.h"

namespace kvb {

// 48 bytes of metadata per block, plus block_size * 8 bytes of token ids (see README, "Memory").
struct BlockMeta {
  int32_t ref = 0;     // sequences holding the block
  int32_t prev = -1;   // free-queue links, valid while in_free
  int32_t next = -1;
  uint8_t in_free = 0;
  uint8_t has_hash = 0;   // holds a committed full block: hash/key/extra describe its content
  uint8_t indexed = 0;    // the prefix index points to this block
  uint8_t has_extra = 0;  // extra key hashed into this block
  uint64_t hash = 0;      // public xxh64 chain hash
  Key128 key;             // index key: a hash of the whole history (see BlockHasher)
  uint64_t extra = 0;
};

class BlockPool {
 public:
  BlockPool(uint32_t num_blocks, uint32_t block_size);

  uint32_t num_blocks() const { return num_blocks_; }
  uint32_t block_size() const { return block_size_; }
  uint32_t num_free() const { return num_free_; }
  int32_t free_head() const { return head_; }
  int32_t free_tail() const { return tail_; }

  BlockMeta& meta(int32_t b) { return meta_[b]; }
  const BlockMeta& meta(int32_t b) const { return meta_[b]; }
  int64_t* tokens(int32_t b) { return tokens_.get() + static_cast<size_t>(b) * block_size_; }
  const int64_t* tokens(int32_t b) const { return tokens_.get() + static_cast<size_t>(b) * block_size_; }

  // Unlinks the queue head (the caller has checked num_free() > 0).
  int32_t pop_head();
  // Unlinks b from anywhere in the queue in O(1) (a prefix hit on a cached-free block).
  void unlink(int32_t b);
  // Appends b at the tail.
  void push_tail(int32_t b);
  // Puts b at the head (the host cache's free drops; see manager_host.cpp).
  void push_head(int32_t b);

 private:
  uint32_t num_blocks_, block_size_;
  uint32_t num_free_ = 0;
  int32_t head_ = -1, tail_ = -1;
  std::unique_ptr<BlockMeta[]> meta_;
  std::unique_ptr<int64_t[]> tokens_;  // left uninitialised: pages are touched only when used
};

}  // namespace kvb
