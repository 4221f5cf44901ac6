// Differential test of the block manager, the model (model.h): the sequence calls. Each returns the
// kvb_status the library must return and changes nothing on failure. With KV cache groups every call
// works on all groups at once, group after group in group order over the one free queue (kvblock.h
// "KV cache groups"); each group keeps its own table and window.
#pragma once

#include "model.h"

namespace {

kvb_status Model::check_opts(const Opts& o) const {
  for (size_t i = 1; i < o.ek_blocks.size(); ++i)
    if (o.ek_blocks[i] <= o.ek_blocks[i - 1]) return KVB_ERR_INVALID_ARGUMENT;
  if (o.window == 0 && o.sink != 0) return KVB_ERR_INVALID_ARGUMENT;
  // With groups each group's window is its spec's: a per-sequence window is refused.
  if (!groups.empty() && (o.window != 0 || o.sink != 0)) return KVB_ERR_INVALID_ARGUMENT;
  return KVB_OK;
}

kvb_status Model::can_allocate(const std::vector<int64_t>& t, const Opts& o, size_t* cached) const {
  if (t.empty()) return KVB_ERR_INVALID_ARGUMENT;
  if (kvb_status st = check_opts(o)) return st;
  Lookup lk = lookup(t, o);
  *cached = (lk.k + lk.store_hits) * bs;
  return num_free() >= lk.needed + wm ? KVB_OK : KVB_ERR_OUT_OF_BLOCKS;
}

kvb_status Model::allocate(int64_t id, const std::vector<int64_t>& t, const Opts& o, size_t* cached) {
  if (t.empty()) return KVB_ERR_INVALID_ARGUMENT;
  if (kvb_status st = check_opts(o)) return st;
  if (find(id)) return KVB_ERR_SEQUENCE_EXISTS;
  Lookup lk = lookup(t, o);
  if (num_free() < lk.needed + wm) return KVB_ERR_OUT_OF_BLOCKS;
  const size_t G = num_groups(), k = lk.k;
  MSeq& s = seqs[id];
  s.id = id;
  s.g.assign(G, MTable{});
  // Every group's hits are taken (device) or pinned (host) before any block leaves the free queue.
  for (size_t g = 0; g < G; ++g)
    for (size_t i = 0; i < k; ++i) {
      if (!group_needs(g, k, i)) continue;
      const int32_t at = lk.found[g][i];
      if (at >= 0) {
        acquire(at);
      } else {
        const int32_t h = -2 - at;
        if (host_queued(h)) host_unqueue(h);
        ++host[h].ref;
      }
    }
  // Then the store hits' staging host blocks (before the device blocks, whose evictions offload).
  std::vector<int32_t> stage;
  for (size_t j = 0; j < lk.store_hits; ++j) {
    const int32_t h = take_host();
    if (h < 0) throw Divergence("model: no host block for a store hit the lookup counted");
    host[h] = MBlock{};
    host[h].ref = 1;
    staging[h] = 1;
    stage.push_back(h);
  }
  s.tokens = t;
  s.computed = s.cached = (k + lk.store_hits) * bs;
  s.hashed = k;
  s.hashes.assign(lk.hashes.begin(), lk.hashes.begin() + static_cast<long>(k));
  s.has_salt = o.has_salt;
  s.salt = o.salt;
  for (size_t j = 0; j < o.ek_blocks.size(); ++j) s.extra[o.ek_blocks[j]] = o.ek_vals[j];
  for (size_t g = 0; g < G; ++g) {
    MTable& tb = s.g[g];
    for (size_t i = 0; i < k; ++i) {
      int32_t at = lk.found[g][i];
      if (!group_needs(g, k, i)) {  // not needed: not taken, its slot reads -1
        tb.table.push_back(-1);
        ++window_skipped;
        continue;
      }
      if (at <= -2)  // a load from the host: a free device block, held by the load until drained
        at = load(-2 - at, i > 0 ? KVB_PARENT_BLOCK : o.has_salt ? KVB_PARENT_SALT : KVB_PARENT_NONE,
                  i > 0 ? lk.hashes[i - 1] : o.has_salt ? o.salt : 0);
      tb.table.push_back(at);
    }
    while (tb.table.size() < lk.nb) tb.table.push_back(take_free());
    tb.keys.assign(lk.keys[g].begin(), lk.keys[g].begin() + static_cast<long>(k));
    tb.window = groups.empty() ? o.window : window_group(g) ? groups[g].window_tokens : 0;
    tb.sink = groups.empty() ? o.sink : window_group(g) ? groups[g].sink_tokens : 0;
    apply_window(s, tb);
  }
  // Activity: did a window group cut the hit below the full groups' cached prefix?
  size_t kfull = 0;
  for (bool cached_in_full = true; cached_in_full && kfull < lk.hashes.size(); kfull += cached_in_full)
    for (size_t g = 0; g < G; ++g) cached_in_full = cached_in_full && (window_group(g) || lk.found[g][kfull] != -1);
  window_cut += kfull > k;
  query += t.size();
  hit += s.cached;
  host_hit += lk.host_hits * bs;
  store_hit += lk.store_hits * bs;
  if (!stage.empty())
    store_start_gets(s, k, stage, std::vector<uint64_t>(lk.keys[0].begin() + static_cast<long>(k),
                                                        lk.keys[0].begin() + static_cast<long>(k + stage.size())));
  *cached = s.cached;
  return KVB_OK;
}

// Sliding window with sinks: every held block wholly before the window of the first query still to
// come (position `computed`: [computed + 1 - window, computed]) and past the first `sink` tokens is
// released (ascending order), except the block of the last computed token. With groups a cached block
// is parked and remembered (docs/ARCHITECTURE.md, "Eviction order with groups").
void Model::apply_window(const MSeq& s, MTable& t) {
  if (t.window == 0 || s.computed == 0) return;
  size_t before = s.computed + 1 > t.window ? s.computed + 1 - t.window : 0;
  size_t end = std::min(before / bs, (s.computed - 1) / bs);
  for (size_t i = (t.sink + bs - 1) / bs; i < end; ++i) {
    const int32_t b = t.table[i];
    if (b < 0) continue;
    const bool park = !groups.empty() && indexed(b);
    if (park) {
      if (!t.released.empty() && t.released.back().index >= i) throw Divergence("model: releases out of order");
      t.released.push_back({i, b, blk[b].key});
    }
    release(b, park ? &s : nullptr);
    t.table[i] = -1;
    ++window_released;
  }
}

kvb_status Model::commit(int64_t id, size_t n) {
  MSeq* s = find(id);
  if (!s) return KVB_ERR_NO_SUCH_SEQUENCE;
  if (s->swapped || !s->tree.empty()) return KVB_ERR_BAD_STATE;  // a pending tree commits with its path
  if (n > s->tokens.size() - s->computed) return KVB_ERR_INVALID_ARGUMENT;
  s->computed += n;
  computed += n;
  // The chain hashes of the blocks this makes full (the same in every group) and each group's keys.
  const size_t end = s->computed / bs, from = s->hashed;
  size_t to = from;
  if (s->hashed < end && s->unc < 0) {
    for (size_t i = s->hashed; i < end; ++i, ++to) {
      const int64_t* bt = &s->tokens[i * bs];
      auto e = s->extra.find(static_cast<uint32_t>(i));
      bool hx = e != s->extra.end();
      uint64_t xv = hx ? e->second : 0;
      if (!cacheable(bt, hx)) {
        s->unc = static_cast<long>(i);
        break;
      }
      if (s->hashes.size() != i) throw Divergence("model: chain bookkeeping broken");
      s->hashes.push_back(model_hash(i > 0 || s->has_salt, i > 0 ? s->hashes[i - 1] : s->salt, bt, bs, hx, xv));
      for (size_t g = 0; g < s->g.size(); ++g) {
        MTable& t = s->g[g];
        t.keys.push_back(model_key(static_cast<uint32_t>(g), i > 0 ? 1 : (s->has_salt ? 2 : 0),
                                   i > 0 ? t.keys[i - 1] : s->salt, bt, bs, hx, xv));
      }
    }
  }
  s->hashed = std::max(s->hashed, end);
  // Group after group: its new full blocks enter the index (overwriting an older entry for the same
  // key), then its window releases what no coming query reaches.
  for (size_t g = 0; g < s->g.size(); ++g) {
    MTable& t = s->g[g];
    for (size_t i = from; i < to; ++i) {
      const int32_t b = t.table[i];
      if (b < 0) throw Divergence("model: a block to hash was released");
      MBlock& m = blk[b];
      m.has_hash = true;
      m.hash = s->hashes[i];
      m.key = t.keys[i];
      m.group = static_cast<uint32_t>(g);
      m.toks.assign(&s->tokens[i * bs], &s->tokens[i * bs] + bs);
      auto e = s->extra.find(static_cast<uint32_t>(i));
      m.has_extra = e != s->extra.end();
      m.extra = m.has_extra ? e->second : 0;
      m.parent_kind = i > 0 ? KVB_PARENT_BLOCK : s->has_salt ? KVB_PARENT_SALT : KVB_PARENT_NONE;
      m.parent_hash = i > 0 ? s->hashes[i - 1] : s->has_salt ? s->salt : 0;
      index_put(b);
    }
    apply_window(*s, t);
  }
  return KVB_OK;
}

size_t Model::append_needed(const MSeq& s, const MTable& t, size_t n) const {
  if (n == 0) return 0;
  size_t L = s.tokens.size();
  size_t need = nblocks(L + n) - t.table.size();
  if (L % bs != 0 && holders(t.table.back()) > 1) ++need;  // copy-on-write of a shared partial block
  return need;
}

kvb_status Model::can_append(int64_t id, size_t n) {
  MSeq* s = find(id);
  if (!s) return KVB_ERR_NO_SUCH_SEQUENCE;
  if (s->swapped) return KVB_ERR_BAD_STATE;
  size_t need = 0;
  for (const MTable& t : s->g) need += append_needed(*s, t, n);
  return num_free() >= need ? KVB_OK : KVB_ERR_OUT_OF_BLOCKS;
}

// Appending never releases window blocks (the new tokens' queries attend back from their own positions).
kvb_status Model::append(int64_t id, const std::vector<int64_t>& tok) {
  MSeq* s = find(id);
  if (!s) return KVB_ERR_NO_SUCH_SEQUENCE;
  if (s->swapped || !s->tree.empty()) return KVB_ERR_BAD_STATE;
  if (tok.empty()) return KVB_OK;
  size_t need = 0;
  for (const MTable& t : s->g) need += append_needed(*s, t, tok.size());
  if (num_free() < need) return KVB_ERR_OUT_OF_BLOCKS;
  const size_t L = s->tokens.size();
  for (MTable& t : s->g) {
    if (L % bs != 0) {
      int32_t last = t.table.back();
      if (holders(last) > 1) {
        int32_t dst = take_free();
        // The sequence's reference on last moves to the pending copy; a copy from a block that is
        // itself waiting for a copy is taken from that copy's source instead.
        int32_t from = last;
        for (const auto& p : pending)
          if (p.second == last) from = p.first;
        if (from != last) {
          ++blk[from].ref;
          release(last);
        }
        pending.emplace_back(from, dst);
        ++cow;
        t.table.back() = dst;
      } else if (blk[last].has_hash) {
        // The block still held a committed full block (rolled back while shared): it is overwritten now.
        forget(last);
      }
    }
    while (t.table.size() < nblocks(L + tok.size())) t.table.push_back(take_free());
  }
  s->tokens.insert(s->tokens.end(), tok.begin(), tok.end());
  return KVB_OK;
}

// Free: last block first. With groups every group at each block index (group 0's block i, group 1's,
// ..., then block i - 1), a block a window released taking its place there while it still holds the
// sequence's content (docs/ARCHITECTURE.md, "Eviction order with groups").
kvb_status Model::free_seq(int64_t id) {
  MSeq* s = find(id);
  if (!s) return KVB_ERR_NO_SUCH_SEQUENCE;
  if (s->swapped) {
    release_swapped(*s);
    for (const MTable& t : s->g)
      for (size_t k = t.released.size(); k-- > 0;) requeue(t.released[k], id);
  } else {
    for (size_t i = s->g[0].table.size(); i-- > 0;)
      for (const MTable& t : s->g) {
        if (t.table[i] >= 0) {
          release(t.table[i]);
          continue;
        }
        for (const MTable::Released& r : t.released)
          if (r.index == i) requeue(r, id);
      }
  }
  seqs.erase(id);
  return KVB_OK;
}

kvb_status Model::fork(int64_t pid, int64_t cid, size_t pos, bool at) {
  MSeq* p = find(pid);
  if (!p) return KVB_ERR_NO_SUCH_SEQUENCE;
  if (!at) pos = p->tokens.size();
  if (p->swapped || !p->tree.empty()) return KVB_ERR_BAD_STATE;
  if (pid == cid || find(cid)) return KVB_ERR_SEQUENCE_EXISTS;
  if (pos == 0 || pos > p->tokens.size()) return KVB_ERR_INVALID_ARGUMENT;
  if (pos > p->computed) return KVB_ERR_BAD_STATE;
  const size_t nb = nblocks(pos);
  if (needs_released(*p, pos, pos)) return KVB_ERR_BAD_STATE;
  const size_t hashed = std::min(p->hashed, pos / bs);
  MSeq c;
  c.id = cid;
  c.tokens.assign(p->tokens.begin(), p->tokens.begin() + static_cast<long>(pos));
  c.computed = pos;
  c.cached = std::min(p->cached, pos);
  c.hashed = hashed;
  c.unc = (p->unc >= 0 && static_cast<size_t>(p->unc) < hashed) ? p->unc : -1;
  c.hashes.assign(p->hashes.begin(), p->hashes.begin() + static_cast<long>(std::min(hashed, p->hashes.size())));
  c.has_salt = p->has_salt;
  c.salt = p->salt;
  c.extra = p->extra;
  for (const MTable& pt : p->g) {
    MTable t;
    t.table.assign(pt.table.begin(), pt.table.begin() + static_cast<long>(nb));
    for (int32_t b : t.table)
      if (b >= 0) acquire(b);
    t.keys.assign(pt.keys.begin(), pt.keys.begin() + static_cast<long>(std::min(hashed, pt.keys.size())));
    for (const MTable::Released& r : pt.released)  // the shared prefix ages with the child too
      if (r.index < nb) t.released.push_back(r);
    t.window = pt.window;
    t.sink = pt.sink;
    c.g.push_back(t);
  }
  MSeq& cs = seqs[cid] = c;
  for (MTable& t : cs.g) apply_window(cs, t);
  return KVB_OK;
}

// kvblock.h: a rollback or fork_at leaving len tokens, `done` of them computed, is refused where it
// would need a block released in any group: its last block, or one its next query (at computed) attends.
bool Model::needs_released(const MSeq& s, size_t len, size_t done) const {
  const size_t nb = nblocks(len);
  for (const MTable& t : s.g) {
    size_t first = nb - 1;
    if (t.window > 0) first = std::min(first, (done + 1 > t.window ? done + 1 - t.window : 0) / bs);
    for (size_t i = first; i < nb; ++i)
      if (t.table[i] < 0) return true;
  }
  return false;
}

kvb_status Model::rollback(int64_t id, size_t n, bool window_check) {
  MSeq* s = find(id);
  if (!s) return KVB_ERR_NO_SUCH_SEQUENCE;
  if (s->swapped || !s->tree.empty()) return KVB_ERR_BAD_STATE;
  if (n == 0) return KVB_OK;
  if (n >= s->tokens.size()) return KVB_ERR_INVALID_ARGUMENT;
  const size_t len = s->tokens.size() - n;
  const size_t nb = nblocks(len);
  if (window_check && needs_released(*s, len, std::min(s->computed, len))) return KVB_ERR_BAD_STATE;
  const size_t hashed = std::min(s->hashed, len / bs);
  // The library releases the groups last to first here (and first to last in kvb_seq_free); kvblock.h
  // does not say which, so the model follows it.
  for (size_t g = s->g.size(); g-- > 0;) {
    MTable& t = s->g[g];
    for (size_t i = t.table.size(); i-- > nb;)
      if (t.table[i] >= 0) release(t.table[i]);
    t.table.resize(nb);
    while (!t.released.empty() && t.released.back().index >= nb) {  // back to the free queue's tail
      requeue(t.released.back(), id);
      t.released.pop_back();
    }
    if (len % bs != 0) {
      int32_t last = t.table.back();
      if (blk[last].has_hash && holders(last) == 1) forget(last);  // stops being full, unless shared
    }
    if (t.keys.size() > hashed) t.keys.resize(hashed);
  }
  s->tokens.resize(len);
  s->computed = std::min(s->computed, len);
  s->cached = std::min(s->cached, len);
  s->hashed = hashed;
  if (s->unc >= 0 && static_cast<size_t>(s->unc) >= hashed) s->unc = -1;
  if (s->hashes.size() > hashed) s->hashes.resize(hashed);
  return KVB_OK;
}

kvb_status Model::set_window(int64_t id, uint32_t w, uint32_t sk) {
  MSeq* s = find(id);
  if (!s) return KVB_ERR_NO_SUCH_SEQUENCE;
  if (s->swapped) return KVB_ERR_BAD_STATE;
  if (!groups.empty()) return KVB_ERR_BAD_STATE;  // each group's window is its spec's
  if (w == 0 && sk != 0) return KVB_ERR_INVALID_ARGUMENT;
  MTable& t = s->g[0];
  t.window = w;
  t.sink = sk;
  apply_window(*s, t);
  return KVB_OK;
}

kvb_status Model::set_extra_key(int64_t id, uint32_t bi, uint64_t key) {
  MSeq* s = find(id);
  if (!s) return KVB_ERR_NO_SUCH_SEQUENCE;
  if (bi < s->hashed) return KVB_ERR_BAD_STATE;
  s->extra[bi] = key;
  return KVB_OK;
}

kvb_status Model::reset_prefix_cache() {
  if (num_free() != N) return KVB_ERR_BAD_STATE;
  freeq.splice(freeq.end(), parked);  // parked blocks (a swapped-out sequence's) join the queue, in order
  index.clear();
  for (MBlock& m : blk) {
    m.has_hash = false;
    m.has_extra = false;
  }
  clear_host_level();
  hash_count[0].clear();
  hash_count[1].clear();
  MEvent e;
  e.type = KVB_EVENT_ALL_CLEARED;
  events.push_back(e);
  return KVB_OK;
}

}  // namespace
