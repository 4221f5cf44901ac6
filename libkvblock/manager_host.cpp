// The host tier (docs/ARCHITECTURE.md, "Host tier"): host blocks shared by swapped-out sequences and, with
// KVB_CONFIG_HOST_CACHE, a second prefix-cache level.
//
// A host block is empty (host_blocks_.empty), held (ref > 0: by a swapped-out sequence, or pinned by pending
// loads that read it), or cached: in host_.index and in one of two lists. Cached blocks whose content
// the device index also holds (twins, host_blocks_.twin >= 0) are in host_blocks_.twins; the others in host_.pool's queue,
// least recently used first. Keeping a twin saves the offload when its device copy is evicted, but
// holds a host block that unique content could use: an inclusive cache moves fewer blocks and hits
// less, an exclusive one the reverse. Twins are kept up to host_blocks_.twin_budget (host_cache_twin_percent of the
// host blocks); beyond it, or when no unique block is left, the newest twin is dropped first.
// The default, 1%, keeps >= 99% of the hits of a single tier of the combined size on the Mooncake
// synthetic trace; larger budgets move fewer blocks and hit less (docs/perf/manager.md has the table). Swapped-out sequences win over the cache: swap_out evicts cached host
// blocks; the cache never takes a swapped-out sequence's block.
#include <algorithm>
#include <cinttypes>
#include <cstring>

#include "error.h"
#include "manager.h"

namespace kvb {

static void copy_content(const BlockMeta& from, BlockMeta& to) {
  to.has_hash = from.has_hash;
  to.hash = from.hash;
  to.key = from.key;
  to.has_extra = from.has_extra;
  to.extra = from.extra;
}

// ---- host cache -----------------------------------------------------------------------------------

void Manager::host_enqueue(int32_t h) {
  if (host_blocks_.twin[h] < 0) {
    host_.pool.push_tail(h);  // most recently used unique block
    return;
  }
  BlockMeta& m = host_.pool.meta(h);
  m.prev = host_blocks_.twins.tail;
  m.next = -1;
  if (host_blocks_.twins.tail >= 0) host_.pool.meta(host_blocks_.twins.tail).next = h;
  else host_blocks_.twins.head = h;
  host_blocks_.twins.tail = h;
  m.in_free = 2;
  ++host_blocks_.twins.size;
}

void Manager::host_unqueue(int32_t h) {
  BlockMeta& m = host_.pool.meta(h);
  if (m.in_free == 1) {
    host_.pool.unlink(h);
    return;
  }
  if (m.in_free != 2) return;
  if (m.prev >= 0) host_.pool.meta(m.prev).next = m.next;
  else host_blocks_.twins.head = m.next;
  if (m.next >= 0) host_.pool.meta(m.next).prev = m.prev;
  else host_blocks_.twins.tail = m.prev;
  m.prev = m.next = -1;
  m.in_free = 0;
  --host_blocks_.twins.size;
}

int32_t Manager::take_host_block() {
  if (!host_blocks_.empty.empty()) {
    int32_t h = host_blocks_.empty.back();
    host_blocks_.empty.pop_back();
    if (!store_.written.empty()) store_.written[h] = store_.through_pending[h] = 0;  // new content comes
    return h;
  }
  // A twin costs nothing to drop now (its content is on the device), but keeping it saves the offload
  // when the device copy is evicted. Up to host_blocks_.twin_budget twins are kept; beyond, the newest goes first
  // (its device copy, just used, is the last to be evicted there).
  int32_t h;
  if (host_blocks_.twins.size > 0 && (host_blocks_.twins.size > host_blocks_.twin_budget || host_.pool.num_free() == 0)) h = host_blocks_.twins.tail;
  else if (host_.pool.num_free() > 0) h = host_.pool.free_head();
  else return -1;
  host_unqueue(h);
  BlockMeta& m = host_.pool.meta(h);
  // Its pending offload (if any) would now overwrite the block's next content: dropped below. Without
  // one, the block's bytes are in host memory: write-back to the store.
  size_t pending = pending_.offloads.size();
  for (size_t i = 0; i < pending_.offloads.size(); ++i)
    if (pending_.offloads[i].second == h) pending = i;
  if (store_.on && pending == pending_.offloads.size() && !store_.written[h]) store_put(h);
  if (!store_.written.empty()) store_.written[h] = store_.through_pending[h] = 0;  // new content comes
  host_.index.erase_if_points_to(m.key, h);
  if (m.indexed && !groups_.cached.empty()) --groups_.cached[host_.group_of(h)];
  m.indexed = 0;
  ++counters_.host_evictions;
  if (events_.enabled() && host_.hashes->remove(host_.group_of(h), m.hash))
    emit_block(host_, 1, 2 /* KVB_EVENT_BLOCK_REMOVED */, h, false);
  m.has_hash = 0;
  host_blocks_.twin[h] = -1;
  if (pending < pending_.offloads.size()) {
    pending_.offloads.erase(pending_.offloads.begin() + static_cast<long>(pending));
    --counters_.offloaded;
  }
  return h;
}

void Manager::offload(int32_t b) {
  const BlockMeta& m = device_.pool.meta(b);
  if (host_.index.find(m.key) >= 0) return;  // already on the host (it came from there): nothing to copy
  int32_t h = take_host_block();
  if (h < 0) return;  // every host block is held: the content is dropped
  BlockMeta& hm = host_.pool.meta(h);
  copy_content(m, hm);
  std::memcpy(host_.pool.tokens(h), device_.pool.tokens(b), bs_ * sizeof(int64_t));
  host_.index.put(hm.key, h);
  hm.indexed = 1;
  if (!host_.group.empty()) host_.group[h] = static_cast<uint8_t>(device_.group_of(b));  // the key carries it too
  if (!groups_.cached.empty()) ++groups_.cached[host_.group_of(h)];
  hm.ref = 0;
  host_enqueue(h);
  pending_.offloads.push_back(BlockPair{b, h});  // capacity reserved: destinations are unique host blocks
  ++counters_.offloaded;
  if (events_.enabled()) {
    host_.parents[h] = device_.parents[b];
    if (host_.hashes->add(host_.group_of(h), hm.hash)) emit_block(host_, 1, 1 /* KVB_EVENT_BLOCK_STORED */, h, true);
  }
}

void Manager::host_twin_enter(int32_t b, int32_t h) {
  if (h < 0) return;
  const bool queued = host_.pool.meta(h).in_free != 0;
  if (queued) host_unqueue(h);
  host_blocks_.twin[h] = b;
  if (queued) host_enqueue(h);  // to the twin list
}

void Manager::host_twin_leave(int32_t b) {
  int32_t h = host_.index.find(device_.pool.meta(b).key);
  if (h < 0 || host_blocks_.twin[h] != b) return;
  const bool queued = host_.pool.meta(h).in_free != 0;
  if (queued) host_unqueue(h);
  host_blocks_.twin[h] = -1;
  if (queued) host_enqueue(h);  // the only copy now, and just used: most recent in the LRU
}

void Manager::pin_host(int32_t h) {
  host_unqueue(h);
  ++host_.pool.meta(h).ref;
}

int32_t Manager::load_from_host(int32_t h, const ChainLink& parent) {
  int32_t d = take_free_block();
  BlockMeta& m = device_.pool.meta(d);
  copy_content(host_.pool.meta(h), m);
  std::memcpy(device_.pool.tokens(d), host_.pool.tokens(h), bs_ * sizeof(int64_t));
  ++m.ref;  // held by the pending load until drained: d cannot be reused (or offloaded) before it runs
  pending_.loads.push_back(BlockPair{h, d});  // capacity reserved: destinations are unique device blocks
  ++counters_.loaded;
  index_block(d, parent, host_.group_of(h), h);
  return d;
}

void Manager::release_host_transfers() {
  store_through_offloaded();
  pending_.offloads.clear();
  for (const BlockPair& p : pending_.loads) {
    if (--host_.pool.meta(p.first).ref == 0) {
      if (!store_.staging.empty() && store_.staging[p.first]) store_release_staging(p.first);  // a store get's
      else host_enqueue(p.first);
    }
    release_block(p.second);
  }
  pending_.loads.clear();
}

void Manager::clear_host_cache() {
  while (host_.pool.num_free() > 0 || host_blocks_.twins.size > 0) {
    int32_t h = host_.pool.num_free() > 0 ? host_.pool.free_head() : host_blocks_.twins.head;
    host_unqueue(h);
    BlockMeta& m = host_.pool.meta(h);
    if (m.indexed && !groups_.cached.empty()) --groups_.cached[host_.group_of(h)];
    m.indexed = m.has_hash = 0;
    host_blocks_.twin[h] = -1;
    host_blocks_.empty.push_back(h);
  }
  host_.index.clear();
  if (host_.hashes) host_.hashes->clear();
  counters_.offloaded -= pending_.offloads.size();
  pending_.offloads.clear();
}

// ---- swapping -----------------------------------------------------------------------------------
// With KV cache groups every group's held blocks move together: one host table per group, the pairs of
// group 0 first, then group 1, ... (each in block order); window slots released (-1) stay released.

size_t Manager::held_blocks(const Sequence& s, bool host) const {
  size_t n = 0;
  for (const GroupTable& t : s.groups)
    for (int32_t b : host ? t.host_table : t.table) n += b >= 0;
  return n;
}

size_t Manager::host_available() const { return host_blocks_.empty.size() + host_.pool.num_free() + host_blocks_.twins.size; }

Sequence& Manager::swap_out_seq(int64_t id) {
  Sequence& s = device_seq(id);
  if (s.tree_nodes) refuse_pending_tree(s, "swapping out");
  return s;
}

Availability Manager::can_swap_out(int64_t id) {
  size_t need = held_blocks(swap_out_seq(id), false);
  if (need > cfg_.num_host_blocks) return Availability::never;
  return host_available() >= need ? Availability::ok : Availability::later;
}

Availability Manager::can_swap_in(int64_t id) {
  Sequence& s = seq(id);
  if (!s.swapped) fail(Code::bad_state, "seq %" PRId64 " is not swapped out", id);
  size_t need = held_blocks(s, true);
  if (need > device_.pool.num_blocks()) return Availability::never;
  return device_.pool.num_free() >= need + watermark_blocks_ ? Availability::ok : Availability::later;
}

size_t Manager::swap_out_size(int64_t id) { return held_blocks(swap_out_seq(id), false); }

size_t Manager::swap_in_size(int64_t id) {
  Sequence& s = seq(id);
  if (!s.swapped) fail(Code::bad_state, "seq %" PRId64 " is not swapped out", id);
  return held_blocks(s, true);
}

void Manager::swap_out(int64_t id, int32_t* pairs) {
  Sequence& s = swap_out_seq(id);
  size_t need = held_blocks(s, false);
  if (cfg_.num_host_blocks == 0)
    fail(Code::out_of_blocks, "seq %" PRId64 ": swap out needs %zu host block%s, but there is no host tier "
         "(num_host_blocks is 0)", id, need, plural_s(need));
  if (need > host_available())
    fail(Code::out_of_blocks, "seq %" PRId64 ": swap out needs %zu host block%s, %zu %s free", id, need,
         plural_s(need), host_available(), is_are(host_available()));
  for (const GroupTable& t : s.groups) {
    const std::vector<int32_t>& table = t.table;
    for (const BlockPair& p : pending_.copies)
      if (std::find(table.begin(), table.end(), p.second) != table.end())
        fail(Code::bad_state, "seq %" PRId64 ": block %d has a pending copy-on-write copy; drain and run copies first",
             id, p.second);
    for (const BlockPair& p : pending_.loads)
      if (std::find(table.begin(), table.end(), p.second) != table.end())
        fail(Code::bad_state, "seq %" PRId64 ": block %d has a pending load from the host; drain and run it first", id,
             p.second);
  }
  // The only allocations, before any change: the host tables stay empty until every one has room.
  for (GroupTable& t : s.groups) t.host_table.reserve(t.table.size());
  size_t k = 0;
  for (GroupTable& gs : s.groups) {
    gs.host_table.assign(gs.table.size(), -1);
    for (size_t i = 0; i < gs.table.size(); ++i) {
      int32_t b = gs.table[i];
      if (b < 0) continue;
      int32_t h = take_host_block();  // never -1: host_available() >= need
      BlockMeta& hm = host_.pool.meta(h);
      copy_content(device_.pool.meta(b), hm);  // content description travels with the data
      hm.ref = 1;
      std::memcpy(host_.pool.tokens(h), device_.pool.tokens(b), bs_ * sizeof(int64_t));
      ++host_blocks_.held;
      gs.host_table[i] = h;
      pairs[2 * k] = b;
      pairs[2 * k + 1] = h;
      ++k;
    }
  }
  // The device copies stay valid until reused, so cached ones remain findable until evicted.
  for (GroupTable& gs : s.groups)
    for (size_t i = gs.table.size(); i-- > 0;)
      if (gs.table[i] >= 0) {
        release_block(gs.table[i]);
        gs.table[i] = -1;
      }
  s.swapped = true;
  counters_.swapped_out += k;
}

void Manager::release_swapped(Sequence& s) {
  for (const GroupTable& gs : s.groups) {
    for (size_t i = gs.host_table.size(); i-- > 0;) {
      int32_t h = gs.host_table[i];
      if (h < 0) continue;
      BlockMeta& hm = host_.pool.meta(h);
      hm.ref = 0;
      hm.has_hash = 0;
      host_blocks_.empty.push_back(h);  // capacity is num_host_blocks
      --host_blocks_.held;
    }
  }
}

void Manager::swap_in(int64_t id, int32_t* pairs) {
  Sequence& s = seq(id);
  if (!s.swapped) fail(Code::bad_state, "seq %" PRId64 " is not swapped out", id);
  size_t need = held_blocks(s, true);
  if (need > device_.pool.num_free())
    fail(Code::out_of_blocks, "seq %" PRId64 ": swap in needs %zu free block%s, %u %s free", id, need, plural_s(need),
         device_.pool.num_free(), is_are(device_.pool.num_free()));
  size_t k = 0;
  for (uint32_t g = 0; g < groups_.count; ++g) {
    GroupTable& gs = s.groups[g];
    ChainLink parent = gs.first_link;  // the link of the next block, while the chain is unbroken
    bool parent_known = true;
    for (size_t i = 0; i < gs.host_table.size(); ++i) {
      int32_t h = gs.host_table[i];
      if (h < 0) {
        parent_known = false;  // released by the window: its hash is gone with it
        continue;
      }
      int32_t b = take_free_block();
      BlockMeta& m = device_.pool.meta(b);
      copy_content(host_.pool.meta(h), m);
      std::memcpy(device_.pool.tokens(b), host_.pool.tokens(h), bs_ * sizeof(int64_t));
      // A committed block becomes findable again where no other block holds its key (keys carry the group).
      if (m.has_hash && parent_known && device_.index.find(m.key) < 0) index_block(b, parent, g);
      parent_known = m.has_hash;
      if (m.has_hash) parent = link_after(m);
      gs.table[i] = b;
      pairs[2 * k] = h;
      pairs[2 * k + 1] = b;
      ++k;
    }
  }
  release_swapped(s);
  for (GroupTable& t : s.groups) t.host_table.clear();
  s.swapped = false;
  counters_.swapped_in += k;
}

}  // namespace kvb
