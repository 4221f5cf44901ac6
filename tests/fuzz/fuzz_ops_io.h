// The fuzz target's handlers of what the engine reads and drains (block tables, hashes, copy-on-write
// pairs, batch export and the batched decode step, events, host transfers), swapping, stats and control
// calls. Included only by fuzz_capi.cpp.
#pragma once
#include <cstddef>

#include "fuzz_model.h"

namespace kvbfuzz {


// kvb_batch_append / kvb_batch_commit over up to 5 ids (any ids, repeats, NULL arrays), their statuses
// predicted by the model: the first bad id decides (unknown, swapped out, repeated), then over-commits;
// a batch append of valid ids succeeds or runs out of blocks. On success the model takes every
// sequence's token / commit, as for the per-sequence calls. (All-or-nothing is checked by the caller.)
inline kvb_status batch_decode_step(kvb_manager* m, Model& md, Reader& r, uint8_t b) {
  const bool append = b & 1;
  const size_t ns = r.u8() % 6;
  std::vector<int64_t> ids(ns + 1), tok(ns + 1);
  std::vector<size_t> counts(ns + 1);
  const uint8_t f = r.u8();
  for (size_t i = 0; i < ns; ++i) {
    ids[i] = pick_id(r);
    tok[i] = r.u8() % 9;
    auto it = md.seqs.find(ids[i]);
    const size_t unc = it == md.seqs.end() ? 0 : it->second.toks.size() - it->second.computed;
    const uint8_t c = r.u8();
    counts[i] = c >= 240 ? unc + 1 + c % 3 : (c & 1 ? unc : c % (unc + 1));
  }
  const bool null_ids = ns > 0 && (f & 0x0f) == 1, null_second = ns > 0 && (f & 0x0f) == 2;
  const bool all = !append && (f & 0x10);
  // Every group's tables before a commit (a window may release the blocks it completes).
  std::map<int64_t, std::vector<std::vector<int32_t>>> before;
  kvb_status want = KVB_OK;
  if (null_ids || (append && null_second)) want = KVB_ERR_INVALID_ARGUMENT;
  std::vector<int64_t> seen;
  for (size_t i = 0; i < ns && want == KVB_OK; ++i) {
    auto it = md.seqs.find(ids[i]);
    if (it == md.seqs.end()) want = KVB_ERR_NO_SUCH_SEQUENCE;
    else if (it->second.swapped) want = KVB_ERR_BAD_STATE;
    else if (std::find(seen.begin(), seen.end(), ids[i]) != seen.end()) want = KVB_ERR_INVALID_ARGUMENT;
    seen.push_back(ids[i]);
    if (want == KVB_OK) before[ids[i]] = tables_of(m, md, ids[i]);
  }
  if (!append && !all)
    for (size_t i = 0; i < ns && want == KVB_OK; ++i)
      if (counts[i] > md.seqs.at(ids[i]).toks.size() - md.seqs.at(ids[i]).computed) want = KVB_ERR_INVALID_ARGUMENT;
  prime_last_error();
  const int64_t* ip = null_ids ? nullptr : ids.data();
  kvb_status s = append ? kvb_batch_append(m, ip, null_second ? nullptr : tok.data(), ns)
                        : kvb_batch_commit(m, ip, all ? nullptr : counts.data(), ns);
  const char* name = append ? "batch_append" : "batch_commit";
  if (want != KVB_OK || !append) {
    REQUIRE(s == want, "%s: %s, model %s", name, kvb_status_string(s), kvb_status_string(want));
  } else {
    REQUIRE(s == KVB_OK || s == KVB_ERR_OUT_OF_BLOCKS, "%s: %s", name, kvb_status_string(s));
  }
  if (s != KVB_OK) return s;
  for (size_t i = 0; i < ns; ++i) {
    MSeq& q = md.seqs.at(ids[i]);
    if (append) {
      md.appended(q, tables_of(m, md, ids[i]));
      q.toks.push_back(tok[i]);
    } else {
      md.commit(q, before.at(ids[i]), all ? q.toks.size() : q.computed + counts[i]);
    }
  }
  for (size_t i = 0; i < ns; ++i) check_info(m, md, ids[i]);
  return s;
}

inline void Step::block_table() {
  int64_t id = pick_id(r);
  uint8_t b = r.u8();
  size_t cap = b % 12;
  auto buf = exact_buffer<int32_t>(cap);
  size_t len = SIZE_MAX;
  const uint8_t g = r.u8();  // the group variant, groups 0..3 (without groups only group 0 exists)
  const uint32_t group = (g & 1) ? g >> 6 : 0;
  int32_t* const out = (b & 0x40) ? nullptr : buf.get();
  size_t* const lp = (b & 0x80) ? nullptr : &len;
  if (g & 1) s = kvb_seq_block_table_group(m, id, group, out, cap, lp);
  else s = kvb_seq_block_table(m, id, out, cap, lp);
  // Refusals in kvb_seq_block_table_group's order: len, the sequence, the group, swapped out, capacity, out.
  auto it = md.seqs.find(id);
  std::vector<int32_t> t;
  kvb_status want = KVB_OK;
  if (!lp) want = KVB_ERR_INVALID_ARGUMENT;
  else if (it == md.seqs.end()) want = KVB_ERR_NO_SUCH_SEQUENCE;
  else if (group >= md.num_tables()) want = KVB_ERR_INVALID_ARGUMENT;
  else if (it->second.swapped) want = KVB_ERR_BAD_STATE;
  else if ((t = table_of(m, id, group)).size() > cap) want = KVB_ERR_BUFFER_TOO_SMALL;
  else if (!out) want = KVB_ERR_INVALID_ARGUMENT;
  REQUIRE(s == want, "block_table(group %u): %s, model %s", group, kvb_status_string(s), kvb_status_string(want));
  predicted = true;
  if (s != KVB_OK) return;
  REQUIRE(len == t.size(), "block_table: len %zu, table %zu", len, t.size());
  for (size_t i = 0; i < len; ++i) REQUIRE(buf[i] == t[i], "block_table(group %u): entry %zu", group, i);
}

inline void Step::block_hash() {
  uint8_t b = r.u8();
  int32_t block = b < 200 ? static_cast<int32_t>(b % (md.nblocks + 1)) : (b & 1 ? -1 : INT32_MAX);
  uint64_t h = 0;
  s = kvb_block_hash(m, block, (b & 0x40) && r.u8() < 30 ? nullptr : &h);
}

inline void Step::drain_copies() {
  uint8_t b = r.u8();
  size_t cap = b % 8;
  auto buf = exact_buffer<int32_t>(2 * cap);
  size_t np = SIZE_MAX;
  s = kvb_drain_copies(m, (b & 0x40) ? nullptr : buf.get(), cap, (b & 0x80) ? nullptr : &np);
  if (s == KVB_OK)
    for (size_t i = 0; i < 2 * np; ++i)
      REQUIRE(buf[i] >= 0 && buf[i] < static_cast<int32_t>(md.nblocks), "drain_copies: block %d", buf[i]);
}

inline void Step::swap(bool in) {
  int64_t id = pick_id(r);
  uint8_t b = r.u8();
  size_t cap = (b & 0x20) ? (b % 5) : 4096;
  auto buf = exact_buffer<int32_t>(2 * cap);
  size_t np = SIZE_MAX;
  kvb_availability av = KVB_AVAIL_NEVER;
  kvb_status cs2;
  auto it = md.seqs.find(id);
  if (!in) {
    cs2 = kvb_seq_can_swap_out(m, id, (b & 0x40) && r.u8() < 40 ? nullptr : &av);
    prime_last_error();
    s = kvb_seq_swap_out(m, id, (b & 0x80) ? nullptr : buf.get(), cap, (b & 0x10) && r.u8() < 40 ? nullptr : &np);
  } else {
    cs2 = kvb_seq_can_swap_in(m, id, (b & 0x40) && r.u8() < 40 ? nullptr : &av);
    prime_last_error();
    s = kvb_seq_swap_in(m, id, (b & 0x80) ? nullptr : buf.get(), cap, (b & 0x10) && r.u8() < 40 ? nullptr : &np);
  }
  (void)cs2;
  if (it == md.seqs.end()) { REQUIRE(s == KVB_ERR_NO_SUCH_SEQUENCE || s == KVB_ERR_INVALID_ARGUMENT, "swap(unknown): %s", kvb_status_string(s)); predicted = s == KVB_ERR_NO_SUCH_SEQUENCE; return; }
  if (s != KVB_OK) return;
  REQUIRE(np <= cap, "swap: %zu pairs > capacity %zu", np, cap);
  MSeq& q = it->second;
  if (!in) {
    REQUIRE(!q.swapped, "swap_out of a swapped sequence succeeded");
    for (size_t i = 0; i < np; ++i) {
      REQUIRE(buf[2 * i] >= 0 && buf[2 * i] < static_cast<int32_t>(md.nblocks), "swap_out: device block %d", buf[2 * i]);
      REQUIRE(buf[2 * i + 1] >= 0 && buf[2 * i + 1] < static_cast<int32_t>(md.nhost), "swap_out: host block %d", buf[2 * i + 1]);
    }
    for (size_t i = 0; i < np; ++i) md.host_kv[buf[2 * i + 1]] = md.kv[buf[2 * i]];  // run the pairs
    q.swapped = true;
  } else {
    REQUIRE(q.swapped, "swap_in of a sequence on device succeeded");
    q.swapped = false;
    for (size_t i = 0; i < np; ++i) {
      REQUIRE(buf[2 * i] >= 0 && buf[2 * i] < static_cast<int32_t>(md.nhost), "swap_in: host block %d", buf[2 * i]);
      REQUIRE(buf[2 * i + 1] >= 0 && buf[2 * i + 1] < static_cast<int32_t>(md.nblocks), "swap_in: device block %d", buf[2 * i + 1]);
    }
    // Offloads of blocks this swap-in evicted run before its pairs overwrite them.
    drain_host_all(m, md);
    for (size_t i = 0; i < np; ++i) md.kv[buf[2 * i + 1]] = md.host_kv[buf[2 * i]];
    // The swapped-in blocks hold what was swapped out (kv: the store's bytes, rewritten only by a
    // commit): the committed full blocks, and also a block that a fork_at child shares partially
    // but that its parent had filled and committed (its K/V and hash travel with it, so the
    // manager may index it again).
    for (uint32_t g = 0; g < md.num_tables(); ++g) {
      std::vector<int32_t> t = table_of(m, id, g);
      std::vector<uint64_t> d = md.descriptors(q, g);
      for (size_t i = 0; i < t.size(); ++i) {
        if (t[i] < 0) continue;
        if (i < q.computed / bs)
          REQUIRE(md.kv[t[i]] == d[i], "swap_in: block %zu of group %u lost its K/V", i, g);
        md.content[t[i]] = md.kv[t[i]];
      }
    }
  }
}

inline void Step::batch() {
  uint8_t b = r.u8();
  if (b >= 200) {  // the batched decode calls instead of batch_export
    what = (b & 1) ? "batch_append" : "batch_commit";
    s = batch_decode_step(m, md, r, b);
    predicted = true;
    return;
  }
  size_t ns = b % 5;
  std::vector<int64_t> ids(ns + 1);
  for (size_t i = 0; i < ns; ++i) ids[i] = pick_id(r);
  uint8_t f = r.u8();
  kvb_batch batch;
  kvb_batch_init(&batch);
  batch.max_blocks_per_seq = r.u8() % 10;
  batch.slot_capacity = r.u8() % 40;
  auto bt = exact_buffer<int32_t>(ns * batch.max_blocks_per_seq);
  auto sl = exact_buffer<int32_t>(ns);
  auto qs = exact_buffer<int32_t>(ns + 1);
  auto sm = exact_buffer<int64_t>(batch.slot_capacity);
  batch.block_tables = (f & 1) ? bt.get() : nullptr;
  batch.seq_lens = (f & 2) ? sl.get() : nullptr;
  batch.query_start = (f & 4) ? qs.get() : nullptr;
  batch.slot_mapping = (f & 8) ? sm.get() : nullptr;
  if ((f & 0x30) == 0x30) batch.struct_size = 8;
  // The KV cache group: without groups group 1 (which does not exist) or 0; with groups any of them or
  // one past the last, sometimes with the struct size of callers before groups (group 0 then).
  uint32_t group = (f & 0x30) == 0x20 ? 1 : 0;
  bool before_groups = false;
  if (!md.groups.empty() && (f & 0x30) != 0x30) {
    const uint8_t gsel = r.u8();
    group = gsel % (md.num_tables() + 1);
    before_groups = gsel & 0x80;
    if (before_groups) batch.struct_size = offsetof(kvb_batch, group);
  }
  batch.group = group;
  const uint32_t read_group = before_groups ? 0 : group;
  s = kvb_batch_export(m, (f & 0x40) && ns ? nullptr : ids.data(), ns, (f & 0x80) && r.u8() < 40 ? nullptr : &batch);
  if (s != KVB_OK) return;
  REQUIRE(read_group < md.num_tables(), "batch: group %u of %u was accepted", read_group, md.num_tables());
  for (size_t i = 0; i < ns; ++i)
    for (size_t j = 0; j < i; ++j)
      REQUIRE(ids[i] != ids[j], "batch: seq %" PRId64 " listed twice was accepted", ids[i]);
  // The outputs are the group's tables and the slots of every uncomputed token, in its (held) blocks.
  size_t k = 0;
  REQUIRE(!batch.query_start || qs[0] == 0, "batch: query_start[0] %d", qs[0]);
  for (size_t i = 0; i < ns; ++i) {
    const MSeq& q = md.seqs.at(ids[i]);
    const std::vector<int32_t> t = table_of(m, ids[i], read_group);
    if (batch.block_tables)
      for (uint32_t j = 0; j < batch.max_blocks_per_seq; ++j)
        REQUIRE(bt[i * batch.max_blocks_per_seq + j] == (j < t.size() ? t[j] : -1), "batch: group %u row %zu column %u",
                read_group, i, j);
    REQUIRE(!batch.seq_lens || sl[i] == static_cast<int32_t>(q.toks.size()), "batch: seq_lens[%zu] %d", i, sl[i]);
    for (uint64_t pos = q.computed; pos < q.toks.size(); ++pos, ++k) {
      const int32_t blk = t[pos / bs];
      REQUIRE(blk >= 0, "batch: seq %" PRId64 " token %" PRIu64 " lies in a released block of group %u", ids[i], pos,
              read_group);
      REQUIRE(!batch.slot_mapping || sm[k] == static_cast<int64_t>(blk) * bs + static_cast<int64_t>(pos % bs),
              "batch: slot %zu of group %u is %" PRId64, k, read_group, sm[k]);
    }
    REQUIRE(!batch.query_start || qs[i + 1] == static_cast<int32_t>(k), "batch: query_start[%zu] %d", i + 1, qs[i + 1]);
  }
  REQUIRE(batch.num_slots == k, "batch: %zu slots, model %zu", batch.num_slots, k);
  if (batch.slot_mapping)
    for (size_t j = k; j < batch.slot_capacity; ++j) REQUIRE(sm[j] == -1, "batch: slot %zu past the end is %" PRId64, j, sm[j]);
}

inline void Step::stats() {
  uint8_t b = r.u8();
  kvb_stats st;
  kvb_stats_init(&st);
  if (b & 1) st.struct_size = b & 2 ? 0 : 8;
  s = kvb_get_stats(m, (b & 4) && (b & 8) ? nullptr : &st);
  if (s == KVB_OK) {
    REQUIRE(st.free_blocks + st.used_blocks == md.nblocks, "stats: free + used != num_blocks");
    REQUIRE(st.num_seqs == md.seqs.size(), "stats: %" PRIu64 " seqs, model %zu", st.num_seqs, md.seqs.size());
    REQUIRE(st.cached_free_blocks <= st.free_blocks, "stats: cached free > free");
    REQUIRE(st.free_host_blocks <= md.nhost, "stats: free host blocks");
    if (!(b & 1)) {  // the host cache's fields are covered by the full struct size
      REQUIRE(st.free_host_blocks + st.cached_host_blocks <= md.nhost, "stats: free + cached host blocks");
      REQUIRE(st.device_hit_tokens + st.host_hit_tokens + st.store_hit_tokens == st.hit_tokens,
              "stats: device + host + store hits != hits");
      REQUIRE(md.host_cache || (st.host_hit_tokens == 0 && st.offloaded_blocks == 0 && st.loaded_blocks == 0 &&
                                st.cached_host_blocks == 0),
              "stats: host cache activity without KVB_CONFIG_HOST_CACHE");
    }
  }
}

inline void Step::events() {
  uint8_t b = r.u8();
  size_t cap = b % 6, tcap = r.u8() % (3 * bs + 1);
  auto ev = exact_buffer<kvb_event>(cap);
  auto tk = exact_buffer<int64_t>(tcap);
  size_t ne = SIZE_MAX;
  uint64_t dropped = 0;
  const uint8_t v = r.u8();  // the group variant, with or without the groups array
  auto grp = exact_buffer<uint32_t>(cap);
  kvb_stats st;
  kvb_stats_init(&st);
  REQUIRE(kvb_get_stats(m, &st) == KVB_OK, "get_stats");
  if (st.events_dropped > 0) md.events_known = false;
  prime_last_error();
  if (v & 1)
    s = kvb_drain_events_group(m, (b & 0x40) ? nullptr : ev.get(), (v & 2) ? nullptr : grp.get(), cap,
                               (b & 0x80) ? nullptr : tk.get(), tcap, (b & 0x20) && r.u8() < 40 ? nullptr : &ne,
                               (b & 0x10) ? nullptr : &dropped);
  else
    s = kvb_drain_events(m, (b & 0x40) ? nullptr : ev.get(), cap, (b & 0x80) ? nullptr : tk.get(), tcap,
                         (b & 0x20) && r.u8() < 40 ? nullptr : &ne, (b & 0x10) ? nullptr : &dropped);
  // With several groups the plain drain is refused (an event without its group would be ambiguous).
  if (!(v & 1) && md.num_tables() > 1) {
    REQUIRE(s == KVB_ERR_BAD_STATE, "drain_events with %u groups: %s", md.num_tables(), kvb_status_string(s));
    predicted = true;
  }
  if (s != KVB_OK) return;
  if (trace) std::fprintf(stderr, "  drained %zu events%s\n", ne, md.events_known ? "" : " (hash sets unknown)");
  const bool with_groups = (v & 1) && !(v & 2);
  if (!with_groups && md.num_tables() > 1) md.events_known = false;
  for (size_t i = 0; i < ne; ++i) {
    REQUIRE(ev[i].token_offset + ev[i].num_tokens <= tcap, "drain_events: tokens beyond capacity");
    const uint32_t g = with_groups ? grp[i] : 0;
    REQUIRE(g < md.num_tables(), "drain_events_group: group %u of %u", g, md.num_tables());
    REQUIRE(ev[i].type != KVB_EVENT_ALL_CLEARED || g == 0, "drain_events_group: ALL_CLEARED in group %u", g);
    if (!md.events_known) continue;
    const auto key = std::make_tuple(ev[i].medium, g, ev[i].block_hash);
    if (ev[i].type == KVB_EVENT_ALL_CLEARED) md.stored_hashes.clear();
    else if (ev[i].medium == KVB_MEDIUM_STORE)  // a put: the store outlives the index, no REMOVED follows
      REQUIRE(ev[i].type == KVB_EVENT_BLOCK_STORED && g_store.on, "drain_events: store medium event %u", ev[i].type);
    else if (ev[i].type == KVB_EVENT_BLOCK_STORED)
      REQUIRE(md.stored_hashes.insert(key).second, "drain_events: STORED twice (medium %u, group %u, hash %" PRIx64 ")",
              ev[i].medium, g, ev[i].block_hash);
    else
      REQUIRE(md.stored_hashes.erase(key) == 1, "drain_events: REMOVED of a hash not stored (medium %u, group %u, hash %"
              PRIx64 ")", ev[i].medium, g, ev[i].block_hash);
  }
}

inline void Step::reset() {
  s = kvb_reset_prefix_cache(m);
  predicted = true;
  size_t nf = 0;
  kvb_num_free_blocks(m, &nf);
  if (s == KVB_OK) {
    for (auto& e : md.seqs) REQUIRE(e.second.swapped, "reset_prefix_cache succeeded with a sequence on device");
    std::fill(md.content.begin(), md.content.end(), 0);
  } else {
    REQUIRE(s == KVB_ERR_BAD_STATE, "reset_prefix_cache: %s", kvb_status_string(s));
  }
}

inline void Step::info() {
  int64_t id = pick_id(r);
  uint8_t b = r.u8();
  kvb_seq_info info;
  kvb_seq_info_init(&info);
  if (b & 1) info.struct_size = 4;
  s = kvb_seq_get_info(m, id, (b & 2) && (b & 4) ? nullptr : &info);
}

inline void Step::num_free() {
  size_t nf = 0;
  s = kvb_num_free_blocks(m, (r.u8() & 1) ? nullptr : &nf);
}

inline void Step::null_manager() {
  size_t x = 0;
  int32_t buf[4];
  switch (r.u8() % 6) {
    case 0: s = kvb_seq_allocate(nullptr, 0, toks.data(), toks.size(), &x); break;
    case 1: s = kvb_seq_commit(nullptr, 0, 1); break;
    case 2: s = kvb_seq_free(nullptr, 0); break;
    case 3: s = kvb_seq_block_table(nullptr, 0, buf, 4, &x); break;
    case 4: s = kvb_drain_copies(nullptr, buf, 2, &x); break;
    default: s = kvb_check_invariants(nullptr); break;
  }
  REQUIRE(s == KVB_ERR_INVALID_ARGUMENT, "NULL manager: %s", kvb_status_string(s));
  predicted = true;
}

inline void Step::drain_host_transfers() {  // capacities too small or NULL are refused and drain nothing
  uint8_t b = r.u8();
  size_t oc = (b & 0x10) ? b % 3 : 4096, lc = (b & 0x20) ? (b >> 2) % 3 : 4096;
  s = drain_host(m, md, oc, lc, (b & 0x40) && r.u8() < 60, (b & 0x80) && r.u8() < 60);
}

}  // namespace kvbfuzz
