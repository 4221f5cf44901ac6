#include "event_queue.h"

#include <algorithm>
#include <new>

#include "error.h"

namespace kvb {

void EventQueue::enable(size_t capacity, uint32_t block_size) {
  block_size_ = block_size;
  const size_t first = std::min(capacity, std::max<size_t>(1, kInitialBytes / bytes_per_event()));
  try {
    events_.assign(first, Event{});
    tokens_.assign(first * block_size, 0);
  } catch (const std::bad_alloc&) {
    events_ = {};
    tokens_ = {};
    fail_alloc("the event queue", static_cast<unsigned long long>(first) * bytes_per_event(),
               "the first %zu of up to %zu events of %zu bytes", first, capacity, bytes_per_event());
  }
  capacity_ = capacity;
  head_ = size_ = 0;
}

bool EventQueue::grow() {
  const size_t old = slots(), now = std::min(capacity_, 2 * old);
  try {
    std::vector<Event> events(now);
    std::vector<int64_t> tokens(now * block_size_);
    for (size_t i = 0; i < size_; ++i) {  // oldest first, from slot 0
      const size_t from = (head_ + i) % old;
      events[i] = events_[from];
      std::copy_n(&tokens_[from * block_size_], block_size_, &tokens[i * block_size_]);
    }
    events_.swap(events);
    tokens_.swap(tokens);
  } catch (const std::bad_alloc&) {
    return false;  // the queue keeps its slots: the event is dropped (counted) as when full
  }
  head_ = 0;
  return true;
}

void EventQueue::push(const Event& e, const int64_t* tokens) {
  if (!enabled()) return;
  if (size_ == slots() && (slots() == capacity_ || !grow())) {
    ++dropped_total_;
    ++dropped_since_drain_;
    return;
  }
  size_t slot = (head_ + size_) % slots();
  events_[slot] = e;
  if (e.num_tokens) std::copy(tokens, tokens + e.num_tokens, &tokens_[slot * block_size_]);
  ++size_;
}

}  // namespace kvb
