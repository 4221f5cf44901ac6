// The fuzz target's handlers of the sequence lifecycle: allocate / can_allocate, commit, append /
// can_append, free, fork(_at), rollback, set_window, set_extra_key. Included only by fuzz_capi.cpp.
#pragma once
#include "fuzz_model.h"
#include "fuzz_store.h"

namespace kvbfuzz {

inline void Step::allocate(bool can) {
  int64_t id = pick_id(r);
  size_t n = pick_len(r, md);
  make_tokens(r, toks, n);
  uint8_t f = r.u8();
  kvb_seq_options o;
  kvb_seq_options_init(&o);
  uint32_t ekb[3];
  uint64_t ek[3];
  bool opts_valid = true;
  if (f & 1) {
    o.has_cache_salt = 1;
    o.cache_salt = r.u8() % 3;
  }
  if (f & 2) {
    o.num_extra_keys = 1 + (f >> 6) % 3;
    uint32_t base = r.u8() % 4;
    for (size_t i = 0; i < o.num_extra_keys; ++i) {
      ekb[i] = base + static_cast<uint32_t>(i) * (1 + (f >> 5 & 1));
      ek[i] = r.u8() % 3;
    }
    o.extra_key_blocks = ekb;
    o.extra_keys = ek;
    if ((f & 0x30) == 0x30) { ekb[0] = ekb[o.num_extra_keys - 1] + 1; opts_valid = o.num_extra_keys == 1; }
  }
  if (f & 4) {
    o.window_tokens = r.u8() % (4 * bs);
    o.sink_tokens = r.u8() % (2 * bs);
    if (o.window_tokens == 0 && o.sink_tokens != 0) opts_valid = false;
  }
  if ((f & 0x18) == 0x18) { o.has_cache_salt = 2; opts_valid = false; }
  if ((f & 0x18) == 0x10 && r.u8() < 32) { o.struct_size = 3; opts_valid = false; }
  const kvb_seq_options* po = (f & 7) ? &o : nullptr;
  if (!po) opts_valid = true;
  const int64_t* tp = (f & 0x08) && (f & 0x10) == 0 && r.u8() < 40 ? nullptr : toks.data();
  if (n == 0 && tp == toks.data() && (r.u8() & 1)) tp = nullptr;
  if (trace)
    std::fprintf(stderr, "  allocate id %" PRId64 " n %zu tokens %s opts %s salt %u extra %zu window %u sink %u size %u\n",
                 id, n, tp ? "set" : "NULL", po ? "set" : "NULL", o.has_cache_salt, o.num_extra_keys,
                 o.window_tokens, o.sink_tokens, o.struct_size);
  const bool args_valid = opts_valid && n > 0 && (tp || n == 0);
  // With KV cache groups each group's window is its spec's: a per-sequence window is refused.
  const bool window_refused = !md.groups.empty() && po && (o.window_tokens || o.sink_tokens);
  size_t cached = SIZE_MAX, cached2 = SIZE_MAX;
  kvb_status cs2 = kvb_seq_can_allocate_ex(m, tp, n, po, &cached2);
  if (can) {
    s = cs2;
    predicted = true;
    if (!args_valid || window_refused)
      REQUIRE(s == KVB_ERR_INVALID_ARGUMENT, "can_allocate(invalid args): %s", kvb_status_string(s));
    else REQUIRE(s == KVB_OK || s == KVB_ERR_OUT_OF_BLOCKS, "can_allocate: %s", kvb_status_string(s));
    return;
  }
  kvb_stats st0;
  kvb_stats_init(&st0);
  if (g_store.on) REQUIRE(kvb_get_stats(m, &st0) == KVB_OK, "stats before allocate");
  prime_last_error();
  s = kvb_seq_allocate_ex(m, id, tp, n, po, (r.u8() & 1) ? &cached : nullptr);
  predicted = true;
  if (!args_valid) {
    REQUIRE(s == KVB_ERR_INVALID_ARGUMENT, "allocate(invalid args): %s", kvb_status_string(s));
  } else if (md.seqs.count(id)) {
    REQUIRE(s == KVB_ERR_SEQUENCE_EXISTS, "allocate(existing id): %s", kvb_status_string(s));
  } else if (window_refused) {
    REQUIRE(s == KVB_ERR_INVALID_ARGUMENT, "allocate(window with groups): %s", kvb_status_string(s));
  } else {
    REQUIRE(s == KVB_OK || s == KVB_ERR_OUT_OF_BLOCKS, "allocate: %s", kvb_status_string(s));
    REQUIRE((s == KVB_OK) == (cs2 == KVB_OK), "allocate gave %s but can_allocate said %s",
            kvb_status_string(s), kvb_status_string(cs2));
  }
  if (s != KVB_OK) return;
  MSeq q;
  q.toks = toks;
  q.has_salt = po && o.has_cache_salt;
  q.salt = o.cache_salt;
  if (po)
    for (size_t i = 0; i < o.num_extra_keys; ++i) q.extra[ekb[i]] = ek[i];
  if (md.groups.empty()) {
    q.window = po ? o.window_tokens : 0;
    q.sink = po ? o.sink_tokens : 0;
  } else if (md.groups[0].on) {
    q.window = md.groups[0].tokens;
    q.sink = md.groups[0].sinks;
  }
  kvb_seq_info info;
  kvb_seq_info_init(&info);
  REQUIRE(kvb_seq_get_info(m, id, &info) == KVB_OK, "get_info after allocate");
  const uint64_t hit = info.num_cached;
  if (cached != SIZE_MAX) REQUIRE(cached == hit, "allocate reported %zu cached, info %" PRIu64, cached, hit);
  REQUIRE(hit == cached2, "allocate hit %" PRIu64 " tokens, can_allocate predicted %zu", hit, cached2);
  REQUIRE(hit % bs == 0 && hit < n, "allocate: %" PRIu64 " cached tokens of %zu", hit, n);
  q.computed = hit;
  uint64_t store_hit = 0;  // the last store_hit / bs blocks of the hit come from the store (fuzz_store.h)
  if (g_store.on) {
    kvb_stats st1;
    kvb_stats_init(&st1);
    REQUIRE(kvb_get_stats(m, &st1) == KVB_OK, "stats after allocate");
    store_hit = st1.store_hit_tokens - st0.store_hit_tokens;
  }
  // The hit rule of kvblock.h: every hit block is cacheable in the prompt; every group holds, where its
  // table is not -1, a block with the prompt's committed K/V of that group; a window group holds exactly
  // the blocks the first uncached token's window and sinks need (the released sets, checked by
  // check_info once the model has released the rest), the others read -1; blocks past the hit are new.
  const std::vector<uint64_t> d0 = md.descriptors(q, 0);
  for (uint32_t i = 0; i < hit / bs; ++i)
    REQUIRE(d0[i] != 0, "allocate: hit on block %u of a prompt that is not cacheable there", i);
  for (uint32_t g = 0; g < md.num_tables(); ++g) {
    std::vector<int32_t> t = table_of(m, id, g);
    std::vector<uint64_t> d = md.descriptors(q, g);
    for (uint32_t i = 0; i < (hit - store_hit) / bs; ++i) {
      if (t[i] < 0) continue;  // a block the window does not need (released at once, or never taken)
      if (md.host_cache && md.content[t[i]] != d[i]) {
        // A hit from the host level: its load is pending (and holds the block); checked once drained.
        md.unverified.emplace_back(t[i], d[i]);
        md.content[t[i]] = d[i];
        continue;
      }
      REQUIRE(md.content[t[i]] == d[i],
              "allocate seq %" PRId64 ": prefix hit on block %d at index %u of group %u whose K/V is not the "
              "prompt's", id, t[i], i, g);
    }
    for (size_t i = hit / bs; i < t.size(); ++i) {
      REQUIRE(t[i] >= 0, "allocate seq %" PRId64 ": block index %zu of group %u past the hit reads -1", id, i, g);
      md.content[t[i]] = 0;
    }
  }
  if (g_store.on) store_allocated(m, md, id, q, hit, store_hit, table_of(m, id));
  md.release(q);
  md.seqs[id] = q;
}

inline void Step::commit() {
  int64_t id = pick_id(r);
  uint8_t b = r.u8();
  auto it = md.seqs.find(id);
  size_t n = b % (2 * bs + 1);
  if (it != md.seqs.end() && (b & 0x80)) n = it->second.toks.size() - it->second.computed;  // all
  // The tables before the call: a window may release the blocks this very commit completes.
  std::vector<std::vector<int32_t>> tables;
  if (it != md.seqs.end() && !it->second.swapped) tables = tables_of(m, md, id);
  s = kvb_seq_commit(m, id, n);
  predicted = true;
  if (it == md.seqs.end()) { REQUIRE(s == KVB_ERR_NO_SUCH_SEQUENCE, "commit(unknown): %s", kvb_status_string(s)); return; }
  MSeq& q = it->second;
  if (q.swapped) { REQUIRE(s == KVB_ERR_BAD_STATE, "commit(swapped): %s", kvb_status_string(s)); return; }
  if (n > q.toks.size() - q.computed) { REQUIRE(s == KVB_ERR_INVALID_ARGUMENT, "commit(too many): %s", kvb_status_string(s)); return; }
  REQUIRE(s == KVB_OK, "commit: %s", kvb_status_string(s));
  md.commit(q, tables, q.computed + n);
}

inline void Step::append(bool can) {
  int64_t id = pick_id(r);
  size_t n = r.u8() % (3 * bs + 2);
  make_tokens(r, toks, n);
  auto it = md.seqs.find(id);
  kvb_status ca = kvb_seq_can_append(m, id, n);
  if (can) {
    s = ca;
    predicted = true;
    if (it == md.seqs.end()) REQUIRE(s == KVB_ERR_NO_SUCH_SEQUENCE, "can_append(unknown): %s", kvb_status_string(s));
    else if (it->second.swapped) REQUIRE(s == KVB_ERR_BAD_STATE, "can_append(swapped): %s", kvb_status_string(s));
    else REQUIRE(s == KVB_OK || s == KVB_ERR_OUT_OF_BLOCKS, "can_append: %s", kvb_status_string(s));
    return;
  }
  const bool null_tokens = n > 0 && r.u8() < 20;
  const int64_t* tp = null_tokens ? nullptr : toks.data();
  prime_last_error();
  s = kvb_seq_append(m, id, tp, n);
  predicted = true;
  if (null_tokens) { REQUIRE(s == KVB_ERR_INVALID_ARGUMENT, "append(NULL tokens): %s", kvb_status_string(s)); return; }
  if (it == md.seqs.end()) { REQUIRE(s == KVB_ERR_NO_SUCH_SEQUENCE, "append(unknown): %s", kvb_status_string(s)); return; }
  MSeq& q = it->second;
  if (q.swapped) { REQUIRE(s == KVB_ERR_BAD_STATE, "append(swapped): %s", kvb_status_string(s)); return; }
  REQUIRE(s == KVB_OK || s == KVB_ERR_OUT_OF_BLOCKS, "append: %s", kvb_status_string(s));
  REQUIRE((s == KVB_OK) == (ca == KVB_OK), "append gave %s but can_append said %s", kvb_status_string(s),
          kvb_status_string(ca));
  if (s != KVB_OK) return;
  if (n > 0) md.appended(q, tables_of(m, md, id));
  q.toks.insert(q.toks.end(), toks.begin(), toks.end());
}

inline void Step::free_seq() {
  int64_t id = pick_id(r);
  s = kvb_seq_free(m, id);
  predicted = true;
  if (s == KVB_OK) store_forget(id);
  if (md.seqs.erase(id)) REQUIRE(s == KVB_OK, "free: %s", kvb_status_string(s));
  else REQUIRE(s == KVB_ERR_NO_SUCH_SEQUENCE, "free(unknown or double): %s", kvb_status_string(s));
}

inline void Step::fork() {
  int64_t parent = pick_id(r), child = pick_id(r);
  uint8_t b = r.u8();
  auto it = md.seqs.find(parent);
  size_t pos = b % (3 * bs + 1);
  if (it != md.seqs.end() && (b & 0x80)) pos = it->second.computed;
  if (b & 0x40) s = kvb_seq_fork(m, parent, child), pos = it != md.seqs.end() ? it->second.toks.size() : 0;
  else s = kvb_seq_fork_at(m, parent, child, pos);
  if (it == md.seqs.end()) { REQUIRE(s == KVB_ERR_NO_SUCH_SEQUENCE, "fork(unknown parent): %s", kvb_status_string(s)); predicted = true; return; }
  const MSeq& p = it->second;
  if (p.swapped) { REQUIRE(s == KVB_ERR_BAD_STATE, "fork(swapped parent): %s", kvb_status_string(s)); predicted = true; return; }
  if (child == parent || md.seqs.count(child)) { REQUIRE(s == KVB_ERR_SEQUENCE_EXISTS, "fork(existing child): %s", kvb_status_string(s)); predicted = true; return; }
  if (pos == 0 || pos > p.toks.size()) { REQUIRE(s == KVB_ERR_INVALID_ARGUMENT, "fork(bad position): %s", kvb_status_string(s)); predicted = true; return; }
  if (pos > p.computed) { REQUIRE(s == KVB_ERR_BAD_STATE, "fork(uncommitted): %s", kvb_status_string(s)); predicted = true; return; }
  // BAD_STATE where the child would need a block a window released (in any group), else OK.
  const uint32_t nb = static_cast<uint32_t>((pos + bs - 1) / bs);
  const kvb_status want = md.needs_released(p, pos, pos) ? KVB_ERR_BAD_STATE : KVB_OK;
  REQUIRE(s == want, "fork at %zu: %s, model %s", pos, kvb_status_string(s), kvb_status_string(want));
  predicted = true;
  if (s != KVB_OK) return;
  MSeq c = p;
  c.toks.resize(pos);
  c.computed = pos;
  for (auto& rel : c.released) rel.erase(rel.lower_bound(nb), rel.end());
  md.release(c);
  md.seqs[child] = c;
}

inline void Step::rollback() {
  int64_t id = pick_id(r);
  size_t n = r.u8() % (2 * bs + 2);
  auto it = md.seqs.find(id);
  s = kvb_seq_rollback(m, id, n);
  if (it == md.seqs.end()) { REQUIRE(s == KVB_ERR_NO_SUCH_SEQUENCE, "rollback(unknown): %s", kvb_status_string(s)); predicted = true; return; }
  MSeq& q = it->second;
  if (q.swapped) { REQUIRE(s == KVB_ERR_BAD_STATE, "rollback(swapped): %s", kvb_status_string(s)); predicted = true; return; }
  if (n > 0 && n >= q.toks.size()) { REQUIRE(s == KVB_ERR_INVALID_ARGUMENT, "rollback(all): %s", kvb_status_string(s)); predicted = true; return; }
  // Refused where the result would need a block a window released (in any group): its last block (also
  // under a window switched off since) or one its next query attends; else done.
  const uint64_t len = q.toks.size() - n;
  const kvb_status want =
      n > 0 && md.needs_released(q, len, std::min<uint64_t>(q.computed, len)) ? KVB_ERR_BAD_STATE : KVB_OK;
  REQUIRE(s == want, "rollback of %zu: %s, model %s", n, kvb_status_string(s), kvb_status_string(want));
  predicted = true;
  if (s != KVB_OK) return;
  q.toks.resize(q.toks.size() - n);
  q.computed = std::min<uint64_t>(q.computed, q.toks.size());
  for (auto& rel : q.released) rel.erase(rel.lower_bound(static_cast<uint32_t>((len + bs - 1) / bs)), rel.end());
}

inline void Step::set_window() {
  int64_t id = pick_id(r);
  uint32_t w = r.u8() % (4 * bs), sink = r.u8() % (2 * bs);
  if (r.u8() & 1) sink = 0;
  s = kvb_seq_set_window(m, id, w, sink);
  auto it = md.seqs.find(id);
  predicted = true;
  if (it == md.seqs.end()) { REQUIRE(s == KVB_ERR_NO_SUCH_SEQUENCE, "set_window(unknown): %s", kvb_status_string(s)); return; }
  if (it->second.swapped) { REQUIRE(s == KVB_ERR_BAD_STATE, "set_window(swapped): %s", kvb_status_string(s)); return; }
  // With KV cache groups the windows are the groups' specs: refused whatever the arguments.
  if (!md.groups.empty()) { REQUIRE(s == KVB_ERR_BAD_STATE, "set_window(groups): %s", kvb_status_string(s)); return; }
  if (w == 0 && sink != 0) { REQUIRE(s == KVB_ERR_INVALID_ARGUMENT, "set_window(sink, no window): %s", kvb_status_string(s)); return; }
  // Done, also where a window that released blocks is switched off (they stay released).
  REQUIRE(s == KVB_OK, "set_window: %s", kvb_status_string(s));
  it->second.window = w;
  it->second.sink = sink;
  md.release(it->second);
}

inline void Step::extra_key() {
  int64_t id = pick_id(r);
  uint32_t bi = r.u8() % 6;
  uint64_t key = r.u8() % 3;
  s = kvb_seq_set_extra_key(m, id, bi, key);
  auto it = md.seqs.find(id);
  if (it == md.seqs.end()) { REQUIRE(s == KVB_ERR_NO_SUCH_SEQUENCE, "set_extra_key(unknown): %s", kvb_status_string(s)); predicted = true; return; }
  if (s == KVB_OK) it->second.extra[bi] = key;
}

}  // namespace kvbfuzz
