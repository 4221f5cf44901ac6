// Differential test of the block manager, the model (model.h): host blocks, shared by the host cache
// level (docs/ARCHITECTURE.md "Host tier": write-back of evicted blocks, LRU and twin lists, loads) and swapping.
// With KV cache groups a host block keeps its group (its key is the group's), and a sequence swaps as
// one: every group's held blocks, group 0's first.
#pragma once

#include "model.h"

namespace {

void Model::host_unqueue(int32_t h) {
  if (twin[h] >= 0) host_twins.remove(h);
  else host_lru.remove(h);
}

void Model::host_enqueue(int32_t h) {
  if (twin[h] >= 0) host_twins.push_back(h);
  else host_lru.push_back(h);
}

void Model::twin_enter(int32_t b, int32_t h) {
  bool q = host_queued(h);
  if (q) host_unqueue(h);
  twin[h] = b;
  if (q) host_enqueue(h);  // to the newest end of the twin list
}

void Model::twin_leave(int32_t h) {
  bool q = host_queued(h);
  if (q) host_unqueue(h);
  twin[h] = -1;
  if (q) host_enqueue(h);  // the only copy now, most recently used
}

// An empty host block, else evict a cached one (twins first when over budget or no unique one is
// left; the newest twin); -1 when every host block is held or pinned.
int32_t Model::take_host() {
  if (!host_free.empty()) {
    int32_t h = host_free.back();
    host_free.pop_back();
    written[h] = through_pending[h] = 0;  // new content comes
    return h;
  }
  int32_t h;
  if (!host_twins.empty() && (host_twins.size() > twin_budget || host_lru.empty())) {
    h = host_twins.back();
    host_twins.pop_back();
  } else if (!host_lru.empty()) {
    h = host_lru.front();
    host_lru.pop_front();
  } else {
    return -1;
  }
  store_evicting(h);  // write-back before the block's content is dropped
  written[h] = through_pending[h] = 0;
  host_index.erase(host[h].key);
  ++host_evictions;
  removed(1, host[h], h);
  host[h] = MBlock{};
  twin[h] = -1;
  for (size_t i = 0; i < offloads.size(); ++i)  // its pending offload would overwrite the new content
    if (offloads[i].second == h) {
      offloads.erase(offloads.begin() + static_cast<long>(i));
      --offloaded;
      break;
    }
  return h;
}

// Write-back of an evicted device block (before its content is dropped).
void Model::offload(int32_t b) {
  if (host_index.count(blk[b].key)) return;  // already on the host level
  int32_t h = take_host();
  if (h < 0) return;
  host[h] = blk[b];
  host[h].ref = 0;
  host_index[host[h].key] = h;
  host_enqueue(h);
  offloads.emplace_back(b, h);
  ++offloaded;
  stored(1, host[h], h);
}

// A host hit (pinned) comes back: a free device block, held by the sequence and by the pending load
// until drained, enters the device index.
int32_t Model::load(int32_t h, int parent_kind, uint64_t parent_hash) {
  int32_t b = take_free();
  blk[b] = host[h];
  blk[b].ref = 2;
  blk[b].parent_kind = parent_kind;
  blk[b].parent_hash = parent_hash;
  loads.emplace_back(h, b);
  ++loaded;
  index_put(b);
  return b;
}

// Drained transfers: pinned host sources become evictable, load destinations are released.
void Model::release_host_transfers() {
  store_through_offloaded();
  offloads.clear();
  std::vector<std::pair<int32_t, int32_t>> taken;
  taken.swap(loads);
  for (const auto& p : taken) {
    if (--host[p.first].ref == 0) {
      if (staging[p.first]) store_release_staging(p.first);  // a store get's staging block: empty again
      else host_enqueue(p.first);
    }
    release(p.second);
  }
}

// kvb_reset_prefix_cache: the host level empties too (least recently used first, then the twins,
// oldest first); pending offloads into it are dropped. No load can be pending: its destination would
// be in use.
void Model::clear_host_level() {
  while (!host_lru.empty() || !host_twins.empty()) {
    std::list<int32_t>& l = host_lru.empty() ? host_twins : host_lru;
    int32_t h = l.front();
    l.pop_front();
    host[h] = MBlock{};
    twin[h] = -1;
    host_free.push_back(h);
  }
  host_index.clear();
  offloaded -= offloads.size();
  offloads.clear();
}

// ---- swapping: a sequence's held blocks, group after group, move to host blocks and back ----

void Model::release_swapped(MSeq& s) {
  for (MTable& t : s.g)
    for (size_t i = t.host_table.size(); i-- > 0;)
      if (t.host_table[i] >= 0) {
        host[t.host_table[i]] = MBlock{};
        host_free.push_back(t.host_table[i]);
      }
}

kvb_status Model::can_swap_out(int64_t id, kvb_availability* a) {
  MSeq* s = find(id);
  if (!s) return KVB_ERR_NO_SUCH_SEQUENCE;
  if (s->swapped || !s->tree.empty()) return KVB_ERR_BAD_STATE;
  size_t need = held(*s);
  *a = need > H ? KVB_AVAIL_NEVER : host_available() >= need ? KVB_AVAIL_OK : KVB_AVAIL_LATER;
  return KVB_OK;
}

kvb_status Model::check_swap_out(int64_t id, size_t cap, size_t* need) {
  MSeq* s = find(id);
  if (!s) return KVB_ERR_NO_SUCH_SEQUENCE;
  if (s->swapped || !s->tree.empty()) return KVB_ERR_BAD_STATE;
  *need = held(*s);
  if (cap < *need) return KVB_ERR_BUFFER_TOO_SMALL;
  if (host_available() < *need) return KVB_ERR_OUT_OF_BLOCKS;
  for (const MTable& t : s->g) {
    for (const auto& p : pending)
      if (std::find(t.table.begin(), t.table.end(), p.second) != t.table.end()) return KVB_ERR_BAD_STATE;
    for (const auto& p : loads)
      if (std::find(t.table.begin(), t.table.end(), p.second) != t.table.end()) return KVB_ERR_BAD_STATE;
  }
  return KVB_OK;
}

// Applies a swap-out and checks the library's pairs against the model's host block choice.
std::string Model::apply_swap_out(int64_t id, const int32_t* pairs, size_t np) {
  MSeq& s = seqs[id];
  size_t k = 0;
  for (MTable& t : s.g) {
    t.host_table.assign(t.table.size(), -1);
    for (size_t i = 0; i < t.table.size(); ++i) {
      int32_t b = t.table[i];
      if (b < 0) continue;
      if (k >= np) return "swap out returned too few pairs";
      if (pairs[2 * k] != b) return fmt("swap out pair %zu: device src %d, want %d", k, pairs[2 * k], b);
      int32_t h = take_host();  // never -1: check_swap_out counted them
      if (pairs[2 * k + 1] != h) return fmt("swap out pair %zu: host dst %d, model %d", k, pairs[2 * k + 1], h);
      host[h] = blk[b];
      host[h].ref = 1;
      t.host_table[i] = h;
      ++k;
    }
  }
  if (k != np) return "swap out returned too many pairs";
  for (MTable& t : s.g)
    for (size_t i = t.table.size(); i-- > 0;)
      if (t.table[i] >= 0) {
        release(t.table[i]);
        t.table[i] = -1;
      }
  s.swapped = true;
  sw_out += k;
  return "";
}

kvb_status Model::can_swap_in(int64_t id, kvb_availability* a) {
  MSeq* s = find(id);
  if (!s) return KVB_ERR_NO_SUCH_SEQUENCE;
  if (!s->swapped) return KVB_ERR_BAD_STATE;
  size_t need = held(*s);
  *a = need > N ? KVB_AVAIL_NEVER : num_free() >= need + wm ? KVB_AVAIL_OK : KVB_AVAIL_LATER;
  return KVB_OK;
}

kvb_status Model::swap_in(int64_t id, size_t cap, size_t* need, std::vector<int32_t>* pairs) {
  MSeq* s = find(id);
  if (!s) return KVB_ERR_NO_SUCH_SEQUENCE;
  if (!s->swapped) return KVB_ERR_BAD_STATE;
  *need = held(*s);
  if (cap < *need) return KVB_ERR_BUFFER_TOO_SMALL;
  if (num_free() < *need) return KVB_ERR_OUT_OF_BLOCKS;
  for (MTable& t : s->g) {
    bool parent_known = true;
    int pk = s->has_salt ? KVB_PARENT_SALT : KVB_PARENT_NONE;
    uint64_t ph = s->has_salt ? s->salt : 0;
    for (size_t i = 0; i < t.host_table.size(); ++i) {
      int32_t h = t.host_table[i];
      if (h < 0) {
        parent_known = false;
        continue;
      }
      int32_t b = take_free();
      MBlock& m = blk[b];
      m = host[h];
      m.ref = 1;
      m.parent_kind = pk;
      m.parent_hash = ph;
      // Back in the index where no other block holds its key (and its parent is known).
      if (m.has_hash && parent_known && !index.count(m.key)) index_put(b);
      parent_known = m.has_hash;
      pk = KVB_PARENT_BLOCK;
      ph = m.hash;
      t.table[i] = b;
      pairs->push_back(h);
      pairs->push_back(b);
      ++sw_in;
    }
  }
  release_swapped(*s);
  for (MTable& t : s->g) t.host_table.clear();
  s->swapped = false;
  return KVB_OK;
}

}  // namespace
