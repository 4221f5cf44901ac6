// Differential test of the block manager, the model (model.h): the one free queue all groups share, the
// device prefix index and the events it emits (docs/ARCHITECTURE.md, "Free queue and eviction";
// kvblock.h "Events").
#pragma once

#include "model.h"

namespace {

// ---- events: per medium and KV cache group, the set of public hashes the index holds ----

// One STORED event of block b (content m) on a medium, whatever decided that it is one.
void Model::push_stored(int medium, const MBlock& m, int32_t b) {
  MEvent e;
  e.type = KVB_EVENT_BLOCK_STORED;
  e.medium = static_cast<uint32_t>(medium);
  e.group = m.group;
  e.hash = m.hash;
  e.parent_kind = static_cast<uint32_t>(m.parent_kind);
  e.parent_hash = m.parent_hash;
  e.has_extra = m.has_extra;
  e.extra = m.has_extra ? m.extra : 0;
  e.block = b;
  e.toks = m.toks;
  events.push_back(e);
}

void Model::stored(int medium, const MBlock& m, int32_t b) {
  if (++hash_count[medium][{m.group, m.hash}] != 1) return;
  push_stored(medium, m, b);
}

void Model::removed(int medium, const MBlock& m, int32_t b) {
  auto it = hash_count[medium].find({m.group, m.hash});
  if (--it->second != 0) return;
  hash_count[medium].erase(it);
  MEvent e;
  e.type = KVB_EVENT_BLOCK_REMOVED;
  e.medium = static_cast<uint32_t>(medium);
  e.group = m.group;
  e.hash = m.hash;
  e.block = b;
  events.push_back(e);
}

// ---- the device index (with the host level's twin bookkeeping and events) ----

// Enters committed block b (its hash, key, group, tokens and parent set); replaces an older entry.
void Model::index_put(int32_t b) {
  auto it = index.find(blk[b].key);
  int32_t old = it == index.end() ? -1 : it->second;
  if (old == b) return;
  index[blk[b].key] = b;
  if (host_cache) {
    auto h = host_index.find(blk[b].key);
    if (h != host_index.end()) twin_enter(b, h->second);
  }
  stored(0, blk[b], b);
  if (old < 0) return;
  removed(0, blk[old], old);
  // A parked block that no longer holds cached content is reused first (kvblock.h parks cached ones).
  if (std::find(parked.begin(), parked.end(), old) != parked.end()) {
    parked.remove(old);
    freeq.push_front(old);
  }
}

void Model::index_erase(int32_t b) {  // b is indexed
  index.erase(blk[b].key);
  if (host_cache) {
    auto h = host_index.find(blk[b].key);
    if (h != host_index.end() && twin[h->second] == b) twin_leave(h->second);
  }
  removed(0, blk[b], b);
}

// ---- the free queue ----

// The free queue's head, else the parked queue's (docs/ARCHITECTURE.md "Eviction order with groups"); a cached
// block there is evicted.
int32_t Model::take_free() {
  std::list<int32_t>& q = freeq.empty() ? parked : freeq;
  int32_t b = q.front();
  q.pop_front();
  if (indexed(b)) {
    index_erase(b);
    ++evictions;
    if (host_cache) offload(b);
  }
  blk[b] = MBlock{};
  blk[b].ref = 1;
  return b;
}

void Model::acquire(int32_t b) {
  if (blk[b].ref == 0) {
    freeq.remove(b);
    parked.remove(b);
  }
  ++blk[b].ref;
}

// Sequences holding b: its ref count less the pending copies that read it.
int Model::holders(int32_t b) const {
  int n = blk[b].ref;
  for (const auto& p : pending) n -= p.first == b;
  return n;
}

// To the free queue's tail, or parked for the sequence whose window released it (a cached block, with
// groups).
void Model::release(int32_t b, const MSeq* parker) {
  if (--blk[b].ref > 0) return;
  if (parker) {
    parked.push_back(b);
    parked_for[b] = parker->id;
  } else {
    freeq.push_back(b);
  }
  // A copy into a block nobody holds any more is dropped, with the reference it held on its source.
  for (size_t i = 0; i < pending.size(); ++i) {
    if (pending[i].second != b) continue;
    int32_t src = pending[i].first;
    pending.erase(pending.begin() + static_cast<long>(i));
    release(src);
    break;
  }
}

// A block the window of sequence id released goes to the free queue's tail if it is still free and
// holds that content, unless another sequence's window has parked it since (that one still runs).
void Model::requeue(const MTable::Released& r, int64_t id) {
  if (!is_free(r.block) || !indexed(r.block) || blk[r.block].key != r.key) return;
  const bool is_parked = std::find(parked.begin(), parked.end(), r.block) != parked.end();
  if (is_parked && parked_for[r.block] != id) return;
  freeq.remove(r.block);
  parked.remove(r.block);
  freeq.push_back(r.block);
}

void Model::forget(int32_t b) {
  if (indexed(b)) index_erase(b);
  blk[b].has_hash = false;
  blk[b].has_extra = false;
}

}  // namespace
