// The device block array: per-block metadata, the intrusive FIFO free queue and the flat token store.
// Everything is sized once at creation; no operation here allocates.
//
// The free queue has two parts: the queue proper, and behind it a parked queue (KV cache groups only:
// cached blocks that a window group let go of while their sequence still runs, see
// Manager::free_blocks(Grouped)). A block is taken from the head of the queue proper, and from the parked
// queue's head only when the queue proper is empty: in eviction order the parked queue simply follows
// the queue proper.
#pragma once
#include <cstdint>
#include <memory>

#include "hash.h"
#include "large_alloc.h"

namespace kvb {

// 48 bytes of metadata per block, plus block_size * 8 bytes of token ids (see README, "Memory").
struct BlockMeta {
  int32_t ref = 0;     // sequences holding the block
  int32_t prev = -1;   // free-queue links, valid while in_free
  int32_t next = -1;
  uint8_t in_free = 0;  // 0: held; 1: in the free queue; 2: parked (see above)
  uint8_t has_hash = 0;   // holds a committed full block: hash/key/extra describe its content
  uint8_t indexed = 0;    // the prefix index points to this block
  uint8_t has_extra = 0;  // extra key hashed into this block
  uint64_t hash = 0;      // public xxh64 chain hash
  Key128 key;             // index key: a hash of the whole history (see BlockHasher)
  uint64_t extra = 0;
};

class BlockPool {
 public:
  BlockPool(uint32_t num_blocks, uint32_t block_size, const char* what);  // what: named if out of memory

  uint32_t num_blocks() const { return num_blocks_; }
  uint32_t block_size() const { return block_size_; }
  uint32_t num_free() const { return num_free_; }  // both parts
  uint32_t num_parked() const { return num_parked_; }
  int32_t free_head() const { return head_; }  // the queue proper
  int32_t free_tail() const { return tail_; }
  int32_t parked_head() const { return parked_.head; }
  int32_t parked_tail() const { return parked_.tail; }

  BlockMeta& meta(int32_t b) { return meta_[b]; }
  const BlockMeta& meta(int32_t b) const { return meta_[b]; }
  int64_t* tokens(int32_t b) { return tokens_.get() + static_cast<size_t>(b) * block_size_; }
  const int64_t* tokens(int32_t b) const { return tokens_.get() + static_cast<size_t>(b) * block_size_; }

  // Unlinks the queue head, the parked head if the queue proper is empty (the caller has checked
  // num_free() > 0).
  int32_t pop_head();
  // pop_head when the queue proper is not empty (free_head() >= 0): the miss path's pop, without unlink's
  // tests for the parked queue and for a block in the middle.
  int32_t pop_queue_head();
  // Unlinks b from anywhere in either part in O(1) (a prefix hit on a cached-free block).
  void unlink(int32_t b);
  // Appends b at the tail.
  void push_tail(int32_t b);
  // Puts b at the head (the host cache's free drops; see manager_host.cpp).
  void push_head(int32_t b);
  // Appends b at the parked queue's tail.
  void park(int32_t b);

 private:
  struct Ends {
    int32_t head = -1, tail = -1;
  };

  uint32_t num_blocks_, block_size_;
  uint32_t num_free_ = 0, num_parked_ = 0;
  int32_t head_ = -1, tail_ = -1;
  Ends parked_;
  LargeArray<BlockMeta> meta_;  // both on huge pages when large (large_alloc.h)
  LargeArray<int64_t> tokens_;  // left uninitialised: pages are touched only when used
};

// The queue operations every miss, hit and free performs, inline: out of line, their calls cost as much as
// their bodies on the miss path.
inline int32_t BlockPool::pop_head() {
  int32_t b = head_ >= 0 ? head_ : parked_.head;
  unlink(b);
  return b;
}

inline int32_t BlockPool::pop_queue_head() {
  const int32_t b = head_;
  BlockMeta& m = meta_[b];
  head_ = m.next;
  if (head_ >= 0) meta_[head_].prev = -1; else tail_ = -1;
  m.next = -1;  // (prev is -1 already: b was the head)
  m.in_free = 0;
  --num_free_;
  return b;
}

inline void BlockPool::unlink(int32_t b) {
  BlockMeta& m = meta_[b];
  int32_t& head = m.in_free == 2 ? parked_.head : head_;
  int32_t& tail = m.in_free == 2 ? parked_.tail : tail_;
  if (m.prev >= 0) meta_[m.prev].next = m.next; else head = m.next;
  if (m.next >= 0) meta_[m.next].prev = m.prev; else tail = m.prev;
  if (m.in_free == 2) --num_parked_;
  m.prev = m.next = -1;
  m.in_free = 0;
  --num_free_;
}

inline void BlockPool::push_tail(int32_t b) {
  BlockMeta& m = meta_[b];
  m.prev = tail_;
  m.next = -1;
  if (tail_ >= 0) meta_[tail_].next = b; else head_ = b;
  tail_ = b;
  m.in_free = 1;
  ++num_free_;
}

}  // namespace kvb
