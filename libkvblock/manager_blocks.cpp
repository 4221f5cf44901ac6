// Blocks (docs/ARCHITECTURE.md, "Free queue", "Prefix index"): references, the free queue, entering and
// leaving the prefix index, the public hash of a block, and the reset of the whole prefix cache; the
// helpers every sequence operation uses to keep the queue, the index and the counters in step.
#include <algorithm>
#include <cinttypes>

#include "error.h"
#include "manager.h"

namespace kvb {

template <bool kPlain>
inline int32_t Manager::take_block() {
  const int32_t b = device_.pool.free_head() >= 0 ? device_.pool.pop_queue_head() : device_.pool.pop_head();
  // The block taken after this one (whose metadata the pop just touched): if it is cached, its index
  // slot, which its eviction will erase, loads meanwhile. On large pools that slot is a cache miss.
  const int32_t next = device_.pool.free_head();
  if (next >= 0 && device_.pool.meta(next).indexed) device_.index.prefetch(device_.pool.meta(next).key);
  BlockMeta& m = device_.pool.meta(b);
  if (m.indexed) {
    unindex_block<kPlain>(b);
    --counters_.cached_free;
    ++counters_.evictions;
    if (!kPlain && cfg_.host_cache) offload(b);  // write-back: the content moves to the host level
  }
  m.has_hash = 0;
  m.has_extra = 0;
  m.ref = 1;
  return b;
}

int32_t Manager::take_free_block() { return take_block<false>(); }

// A plain manager evicts with the index erase and the counters alone: the tests of the host level, KV
// cache groups and events are made once here instead of per block (about 30 of the miss path's
// instructions per block).
void Manager::take_free_blocks(int32_t* out, size_t n) {
  if (plain_) take_free_blocks_as<true>(out, n);
  else take_free_blocks_as<false>(out, n);
}

template <bool kPlain>
void Manager::take_free_blocks_as(int32_t* out, size_t n) {
  // A pool whose index is larger than a core's cache (pools of more than 16K blocks) misses it on every
  // eviction's slot, and the blocks' metadata and tokens miss too. Walking kAhead blocks ahead in the
  // queue keeps that many slot loads, and the token lines the copy will write, in flight at once. (A hint
  // only: the walk reads the links of blocks still queued, and stops at the queue's end.) Smaller pools
  // prefetch the next victim's slot only, one cheap iteration ahead.
  //
  // The walk itself waits on each block's metadata (the link to the next), a chain of loads that no
  // prefetch of the walk can start early. But the queue is mostly runs of consecutive ids: sequences
  // free their blocks last first, so a prompt's blocks, taken in queue order, come back as one run. So
  // the walk also prefetches the metadata kRunAhead ids further along the run it is in; where the run
  // ends the guess is wasted, no more. (2^20-block pool, `kvblock bench` miss: 71.8 -> 68.3 ns.)
  constexpr size_t kAhead = 16;
  constexpr int32_t kRunAhead = 8;
  constexpr size_t kBigIndexBytes = size_t{1} << 20;
  if (device_.index.capacity() * sizeof(IndexSlot) <= kBigIndexBytes || n <= 1) {
    for (size_t i = 0; i < n; ++i) out[i] = take_block<kPlain>();
    return;
  }
  int32_t ahead = device_.pool.free_head();
  auto step_ahead = [&] {
    const BlockMeta& m = device_.pool.meta(ahead);
    if (m.indexed) device_.index.prefetch(m.key);
    const char* t = reinterpret_cast<const char*>(device_.pool.tokens(ahead));
    __builtin_prefetch(t, 1);
    __builtin_prefetch(t + 64, 1);
    if (m.next >= 0) {
      const int64_t guess = int64_t{m.next} + (m.next > ahead ? kRunAhead : -kRunAhead);
      if (guess >= 0 && guess < int64_t{device_.pool.num_blocks()})
        __builtin_prefetch(&device_.pool.meta(static_cast<int32_t>(guess)));
    }
    ahead = m.next;
  };
  for (size_t k = 0; k < kAhead && k < n && ahead >= 0; ++k) step_ahead();
  for (size_t i = 0; i < n; ++i) {
    if (ahead >= 0 && i + kAhead < n) step_ahead();
    out[i] = take_block<kPlain>();
  }
}

void Manager::drop_copy_into(int32_t b) {
  // A copy into a block nobody holds any more must not run once the block is reused; dropping it
  // releases the reference it held on its source. (Destinations are unique.)
  for (size_t i = 0; i < pending_.copies.size(); ++i) {
    if (pending_.copies[i].second != b) continue;
    int32_t src = pending_.copies[i].first;
    pending_.copies.erase(pending_.copies.begin() + static_cast<long>(i));
    release_block(src);
    break;
  }
}

bool Manager::contains_non_cacheable(const int64_t* tokens, size_t n) const {
  if (keys_.non_cacheable.empty()) return false;
  if (keys_.non_cacheable.size() <= 4) {
    for (size_t i = 0; i < n; ++i)
      for (int64_t t : keys_.non_cacheable)
        if (tokens[i] == t) return true;
    return false;
  }
  for (size_t i = 0; i < n; ++i)
    if (std::binary_search(keys_.non_cacheable.begin(), keys_.non_cacheable.end(), tokens[i])) return true;
  return false;
}

uint64_t Manager::block_hash(int32_t b) const {
  if (b < 0 || static_cast<uint32_t>(b) >= device_.pool.num_blocks())
    fail(Code::invalid_argument, "block id %d is out of range [0, %u)", b, device_.pool.num_blocks());
  const BlockMeta& m = device_.pool.meta(b);
  if (!m.has_hash) fail(Code::bad_state, "block %d holds no committed full block", b);
  return m.hash;
}

// ---- prefix-cache reset -------------------------------------------------------------------------

void Manager::reset_prefix_cache() {
  if (device_.pool.num_free() != device_.pool.num_blocks())
    fail(Code::bad_state, "reset refused: %u block%s %s in use by running sequences",
         device_.pool.num_blocks() - device_.pool.num_free(), plural_s(device_.pool.num_blocks() - device_.pool.num_free()),
         is_are(device_.pool.num_blocks() - device_.pool.num_free()));
  while (device_.pool.num_parked() > 0) {  // parked blocks are cached ones (a swapped-out sequence's)
    int32_t b = device_.pool.parked_head();
    device_.pool.unlink(b);
    device_.pool.push_tail(b);
  }
  for (uint32_t b = 0; b < device_.pool.num_blocks(); ++b) {
    device_.forget(static_cast<int32_t>(b));
    device_.pool.meta(static_cast<int32_t>(b)).has_extra = 0;
  }
  device_.clear_index();
  counters_.cached_free = 0;
  clear_host_cache();
  emit_cleared();
}

}  // namespace kvb
