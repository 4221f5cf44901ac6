// Bounded FIFO of prefix-cache events for KV-aware routers. It holds up to `capacity` events, each with
// room for one block of tokens, but allocates that only as events come: it starts with at most
// kInitialBytes and doubles when full, up to capacity (at block size 65536 the default 65536 events are
// 32 GiB, which a manager may never use). When it is full, or cannot grow because the host is out of
// memory, a new event is counted as dropped rather than silently lost (the call that emits it still
// succeeds: events describe the cache, they never decide what it does).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvb {

struct Event {
  uint32_t type = 0;         // kvb_event_type values
  uint32_t parent_kind = 0;  // kvb_parent_kind values
  uint64_t hash = 0;
  uint64_t parent_hash = 0;
  uint64_t extra = 0;
  uint32_t has_extra = 0;
  uint32_t num_tokens = 0;
  int32_t block = -1;
  uint32_t medium = 0;       // kvb_medium values: device, host, or the store (a put)
  uint32_t group = 0;        // KV cache group of the block
};

class EventQueue {
 public:
  static constexpr size_t kInitialBytes = size_t{1} << 20;

  EventQueue() = default;
  // Allocates the first slots (fail_alloc names the queue if even that fails).
  void enable(size_t capacity, uint32_t block_size);
  bool enabled() const { return capacity_ > 0; }
  size_t slots() const { return events_.size(); }  // allocated so far (<= capacity)
  size_t bytes_per_event() const { return sizeof(Event) + static_cast<size_t>(block_size_) * sizeof(int64_t); }

  // Records an event; tokens (num_tokens of them) are copied. Counts a drop when full.
  void push(const Event& e, const int64_t* tokens);
  size_t size() const { return size_; }
  const Event& front(size_t i) const { return events_[(head_ + i) % slots()]; }
  const int64_t* front_tokens(size_t i) const { return &tokens_[((head_ + i) % slots()) * block_size_]; }
  void pop(size_t n) { head_ = (head_ + n) % slots(); size_ -= n; }
  uint64_t take_dropped() { uint64_t d = dropped_since_drain_; dropped_since_drain_ = 0; return d; }
  uint64_t dropped_total() const { return dropped_total_; }

 private:
  bool grow();  // doubles the slots (up to capacity), events kept in order; false if memory ran out

  size_t capacity_ = 0, head_ = 0, size_ = 0;
  uint32_t block_size_ = 0;
  uint64_t dropped_total_ = 0, dropped_since_drain_ = 0;
  std::vector<Event> events_;
  std::vector<int64_t> tokens_;
};

}  // namespace kvb
