// Blocks (docs/ARCHITECTURE.md, "Free queue", "Prefix index"): references, the free queue, entering and
// leaving the prefix index, the public hash of a block, and the reset of the whole prefix cache; the
// helpers every sequence operation uses to keep the queue, the index and the counters in step.
#include <algorithm>
#include <cinttypes>

#include "error.h"
#include "manager.h"

namespace kvb {

int32_t Manager::take_free_block() {
  int32_t b = device_.pool.pop_head();
  // The block taken after this one (whose metadata pop_head just touched): if it is cached, its index
  // slot, which its eviction will erase, loads meanwhile. On large pools that slot is a cache miss.
  const int32_t next = device_.pool.free_head();
  if (next >= 0 && device_.pool.meta(next).indexed) device_.index.prefetch(device_.pool.meta(next).key);
  BlockMeta& m = device_.pool.meta(b);
  if (m.indexed) {
    unindex_block(b);
    --counters_.cached_free;
    ++counters_.evictions;
    if (cfg_.host_cache) offload(b);  // write-back: the content moves to the host level
  }
  m.has_hash = 0;
  m.has_extra = 0;
  m.ref = 1;
  return b;
}

void Manager::take_free_blocks(int32_t* out, size_t n) {
  // A plain manager (no host level, no KV cache groups, no events) evicts with nothing but the index erase
  // and the counters: take_free_block's and unindex_block's tests of those features, and their calls, are
  // made once here instead of per block (about 30 of the miss path's instructions per block).
  const bool plain = !cfg_.host_cache && groups_.cached.empty() && !events_.enabled();
  auto take = [&]() -> int32_t {
    if (!plain) return take_free_block();
    const int32_t b = device_.pool.free_head() >= 0 ? device_.pool.pop_queue_head() : device_.pool.pop_head();
    BlockMeta& m = device_.pool.meta(b);
    if (m.indexed) {
      device_.index.erase_if_points_to(m.key, b);
      m.indexed = 0;
      --counters_.cached_free;
      ++counters_.evictions;
    }
    m.has_hash = 0;
    m.has_extra = 0;
    m.ref = 1;
    return b;
  };
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
    for (size_t i = 0; i < n; ++i) {
      out[i] = take();
      const int32_t next = device_.pool.free_head();
      if (plain && next >= 0 && device_.pool.meta(next).indexed) device_.index.prefetch(device_.pool.meta(next).key);
    }
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
    out[i] = take();
  }
}

void Manager::release_block(int32_t b, const Sequence* parker) {
  BlockMeta& m = device_.pool.meta(b);
  if (--m.ref > 0) return;
  if (parker) {
    device_.pool.park(b);
    groups_.parked_for[b] = parker->id;
  } else {
    device_.pool.push_tail(b);
  }
  if (m.indexed) ++counters_.cached_free;
  if (!pending_.copies.empty()) drop_copy_into(b);
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

void Manager::unindex_block(int32_t b) {
  BlockMeta& m = device_.pool.meta(b);
  device_.index.erase_if_points_to(m.key, b);
  if (m.indexed && !groups_.cached.empty()) --groups_.cached[device_.group_of(b)];
  m.indexed = 0;
  if (cfg_.host_cache) host_twin_leave(b);
  if (events_.enabled() && device_.hashes->remove(device_.group_of(b), m.hash))
    emit_block(device_, 0, 2 /* KVB_EVENT_BLOCK_REMOVED */, b, false);
}

void Manager::index_block(int32_t b, const ChainLink& parent, uint32_t group, int32_t host_copy) {
  BlockMeta& m = device_.pool.meta(b);
  int32_t old = device_.index.put(m.key, b);
  if (old == b) return;
  // Keys carry the group (the first link does), so a replaced block is always of the same group.
  if (!device_.group.empty()) device_.group[b] = static_cast<uint8_t>(group);
  if (!m.indexed && m.in_free) ++counters_.cached_free;
  if (!m.indexed && !groups_.cached.empty()) ++groups_.cached[group];
  m.indexed = 1;
  if (cfg_.host_cache) host_twin_enter(b, host_copy == kUnknownHost ? host_.index.find(m.key) : host_copy);
  if (events_.enabled()) device_.parents[b] = ParentRef{parent.hash, static_cast<uint8_t>(parent.kind)};
  // The new block is counted before the one it replaces is uncounted: equal keys carry equal public
  // hashes, so replacing a block by a recomputed copy emits nothing.
  if (events_.enabled() && device_.hashes->add(group, m.hash)) emit_block(device_, 0, 1 /* KVB_EVENT_BLOCK_STORED */, b, true);
  if (old >= 0) {
    BlockMeta& o = device_.pool.meta(old);
    o.indexed = 0;
    if (!groups_.cached.empty()) --groups_.cached[group];
    if (o.in_free) --counters_.cached_free;
    if (o.in_free == 2) {  // parked blocks are cached ones (see park): an empty one is reused first
      device_.pool.unlink(old);
      device_.pool.push_head(old);
    }
    if (events_.enabled() && device_.hashes->remove(group, o.hash)) emit_block(device_, 0, 2 /* KVB_EVENT_BLOCK_REMOVED */, old, false);
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
  device_.index.clear();
  while (device_.pool.num_parked() > 0) {  // parked blocks are cached ones (a swapped-out sequence's)
    int32_t b = device_.pool.parked_head();
    device_.pool.unlink(b);
    device_.pool.push_tail(b);
  }
  for (uint32_t b = 0; b < device_.pool.num_blocks(); ++b) {
    BlockMeta& m = device_.pool.meta(static_cast<int32_t>(b));
    if (m.indexed && !groups_.cached.empty()) --groups_.cached[device_.group_of(static_cast<int32_t>(b))];
    m.has_hash = m.indexed = m.has_extra = 0;
  }
  counters_.cached_free = 0;
  if (device_.hashes) device_.hashes->clear();
  clear_host_cache();
  emit_cleared();
}

}  // namespace kvb
