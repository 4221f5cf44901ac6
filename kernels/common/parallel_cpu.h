// Shares work items out over threads created for one call (the caller is thread 0): no global pool to
// outlive the library or to interact with fork(). If a thread cannot be created the others, or the
// caller alone, take its items. Used by the decode and prefill attention kernels.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <system_error>
#include <thread>

namespace kvb {
namespace kern {
namespace cpu {

constexpr int64_t kMaxThreads = 64;

// Threads worth starting for `work` units when one thread should get at least `per_thread` of them.
inline int64_t threads_for(int64_t work, int64_t per_thread, int64_t num_items) {
  if (work < 2 * per_thread) return 1;
  const unsigned hw = std::thread::hardware_concurrency();
  const int64_t t = std::min<int64_t>({int64_t(hw == 0 ? 1 : hw), kMaxThreads, num_items, work / per_thread});
  return std::max<int64_t>(t, 1);
}

// Calls fn(thread_index, item) for every item in [0, num_items), each exactly once.
template <class Fn>
void parallel_for(int64_t num_items, int64_t threads, Fn&& fn) {
  std::atomic<int64_t> next{0};
  auto work = [&](int64_t tid) {
    for (;;) {
      const int64_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= num_items) break;
      fn(tid, i);
    }
  };
  std::thread pool[kMaxThreads];
  int64_t started = 0;
  for (int64_t t = 1; t < std::min(threads, kMaxThreads); ++t) {
    try {
      pool[started] = std::thread(work, t);
      ++started;
    } catch (const std::system_error&) {
      break;
    }
  }
  work(0);
  for (int64_t t = 0; t < started; ++t) pool[t].join();
}

}  // namespace cpu
}  // namespace kern
}  // namespace kvb
