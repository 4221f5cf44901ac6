#include "event_queue.h"

#include <algorithm>

namespace kvb {

void EventQueue::enable(size_t capacity, uint32_t block_size) {
  capacity_ = capacity;
  block_size_ = block_size;
  events_.assign(capacity, Event{});
  tokens_.assign(capacity * block_size, 0);
}

void EventQueue::push(const Event& e, const int64_t* tokens) {
  if (!enabled()) return;
  if (size_ == capacity_) {
    ++dropped_total_;
    ++dropped_since_drain_;
    return;
  }
  size_t slot = (head_ + size_) % capacity_;
  events_[slot] = e;
  if (e.num_tokens) std::copy(tokens, tokens + e.num_tokens, &tokens_[slot * block_size_]);
  ++size_;
}

}  // namespace kvb
