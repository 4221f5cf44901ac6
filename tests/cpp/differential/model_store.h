// Differential test of the block manager, the model (model.h): the store level below the host cache, as
// kvblock.h "Store tier" states it. A prefix lookup continues past the device and host levels into the
// store (the blocks after the first miss, while a staging host block is left for each); each store hit
// takes a staging host block and a free device block, counts as cached and starts a get; a completed get
// becomes a host -> device load, a failed one cuts the sequence's computed tokens back to that block; once
// a sequence's last get resolves, its computed blocks are hashed and indexed (commit of 0 tokens). A cached
// host block that is evicted is put (unless its offload was never handed out to run, or it was put
// already); with write-through, the blocks whose offloads were drained are put at the next poll.
#pragma once

#include "model.h"

namespace {

// Store hits after r.k device / host hits: the longest run of the following candidates the store holds,
// at most one per host block an allocation can take for staging (its host hits are pinned first).
size_t Model::store_lookup(const Lookup& r, const Opts& o) const {
  if (!store_on || o.window != 0 || r.k + 1 >= r.nb || store_lookup_fails) return 0;
  const size_t most = std::min(r.nb - 1 - r.k, host_available() - r.host_hits);
  size_t n = 0;
  for (size_t i = r.k; i < std::min(r.k + most, r.hashes.size()) && store_keys.count(r.keys[0][i]); ++i) ++n;
  return n;
}

void Model::store_put(int32_t h) {
  if (store_refuse_puts) {
    ++put_failures;
    return;
  }
  ++put_blocks;
  written[h] = 1;
  const MBlock& m = host[h];
  store_keys.insert(m.key);
  put_log.emplace_back(h, m.toks);
  // Every accepted put is a STORED event on the store medium (no per-hash dedup there).
  push_stored(KVB_MEDIUM_STORE, m, h);
}

// Cached host block h is being evicted: write-back unless its bytes never reached host memory (its
// offload is still pending) or it is in the store already.
void Model::store_evicting(int32_t h) {
  if (!store_on) return;
  bool pending_offload = false;
  for (const auto& p : offloads) pending_offload = pending_offload || p.second == h;
  if (!pending_offload && !written[h]) store_put(h);
}

void Model::store_release_staging(int32_t h) {
  host[h] = MBlock{};
  staging[h] = 0;
  host_free.push_back(h);
}

// The gets of sequence s's blocks [first, first + hosts.size()), in ticket order; a get the store refuses
// at once ends as a failed completion right there.
void Model::store_start_gets(MSeq& s, size_t first, const std::vector<int32_t>& hosts,
                             const std::vector<uint64_t>& keys) {
  const uint64_t first_ticket = next_ticket;
  for (size_t j = 0; j < hosts.size(); ++j) {
    gets.push_back(MGet{next_ticket++, s.id, first + j, hosts[j], s.g[0].table[first + j], keys[j]});
    ++s.filling;
  }
  for (size_t j = 0; j < hosts.size(); ++j) {
    const MGetOutcome out = j < store_plan.size() ? store_plan[j] : kGetOk;
    if (out == kGetMissing) store_keys.erase(keys[j]);  // gone from the store between lookup and get
    if (out != kGetRefused) continue;
    for (size_t k = 0; k < gets.size(); ++k)
      if (gets[k].ticket == first_ticket + j) {
        store_complete(k, -1);
        break;
      }
  }
}

void Model::store_complete(size_t k, int32_t status) {
  const MGet g = gets[k];
  gets[k] = gets.back();
  gets.pop_back();
  if (status == 0) ++get_blocks;
  else ++get_failures;
  MSeq* s = find(g.id);
  if (!s) {
    store_release_staging(g.host);
    return;
  }
  --s->filling;
  const size_t start = g.index * bs;
  if (status != 0 && start < s->computed) {  // recompute from this block on
    recomputed += s->computed - start;
    s->computed = start;
  }
  if (status == 0 && start < s->computed) {
    staging[g.host] = 2;
    ++blk[g.device].ref;  // held by its load until drained
    loads.emplace_back(g.host, g.device);
    ++loaded;
  } else {
    store_release_staging(g.host);
  }
  if (s->filling == 0) commit(g.id, 0);  // the good store blocks are hashed and enter the index
}

// kvb_drain_host_transfers handed out these offloads: with write-through they are put at the next poll.
void Model::store_through_offloaded() {
  if (!store_on || !write_through) return;
  through.erase(std::remove_if(through.begin(), through.end(), [&](int32_t h) { return !through_pending[h]; }),
                through.end());  // entries whose host block was taken since: a new offload goes last
  for (const auto& p : offloads)
    if (!through_pending[p.second]) {
      through_pending[p.second] = 1;
      through.push_back(p.second);
    }
}

// kvb_store_poll: write-through puts first, then the completions in the order the store reported them
// (or, when it gave up, every get in flight fails, the last first).
void Model::store_poll(const std::vector<kvb_store_completion>& reported, bool gave_up) {
  if (!store_on) return;
  if (write_through) {
    for (int32_t h : through) {
      if (!through_pending[h]) continue;
      through_pending[h] = 0;
      if (host_cached(h) && !written[h]) store_put(h);
    }
    through.clear();
  }
  if (gave_up) {
    while (!gets.empty()) store_complete(gets.size() - 1, -1);
    return;
  }
  for (const kvb_store_completion& c : reported)
    for (size_t k = 0; k < gets.size(); ++k)
      if (gets[k].ticket == c.ticket) {
        store_complete(k, c.status);
        break;
      }
}

}  // namespace
