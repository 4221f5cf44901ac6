// Differential test of the block manager: the full comparison after every step. Block tables, sequence
// info, the KV read back through each table ("data is never lost"), every block's hash, stats and
// kvb_check_invariants. State a new feature makes observable is compared here.
#pragma once

#include <algorithm>
#include <cinttypes>
#include <map>
#include <string>
#include <vector>

#include "run.h"

namespace {

int64_t Run::read_slot(const std::map<int32_t, std::vector<int64_t>>& overlay, int32_t b, size_t off) const {
  auto it = overlay.find(b);
  if (it != overlay.end()) return it->second[off];
  return content_[static_cast<size_t>(b) * cfg_.bs + off];
}

int64_t Run::read_host_slot(const std::map<int32_t, std::vector<int64_t>>& overlay, int32_t h, size_t off) const {
  auto it = overlay.find(h);
  if (it != overlay.end()) return it->second[off];
  return host_content_[static_cast<size_t>(h) * cfg_.bs + off];
}

// Events drained after every step must be exactly the model's, in order (type, medium, block, hashes,
// parent, extra key, tokens).
// With KV cache groups every event's group is checked too (kvb_drain_events_group).
void Run::compare_events() {
  std::vector<kvb_event> ev(model_.events.size() + 1);
  std::vector<uint32_t> grp(ev.size(), 99);
  std::vector<int64_t> toks((model_.events.size() + 1) * cfg_.bs);
  size_t n = 0;
  uint64_t dropped = 7;
  if (cfg_.groups)
    expect(kvb_drain_events_group(m_, ev.data(), grp.data(), ev.size(), toks.data(), toks.size(), &n, &dropped), KVB_OK,
           "drain_events_group");
  else
    expect(kvb_drain_events(m_, ev.data(), ev.size(), toks.data(), toks.size(), &n, &dropped), KVB_OK, "drain_events");
  if (dropped != 0) fail(fmt("drain_events: %" PRIu64 " dropped", dropped));
  if (n != model_.events.size()) fail(fmt("drain_events gave %zu events, model %zu", n, model_.events.size()));
  for (size_t i = 0; i < n; ++i) {
    const kvb_event& e = ev[i];
    const MEvent& w = model_.events[i];
    bool st = w.type == KVB_EVENT_BLOCK_STORED;
    if (cfg_.groups && grp[i] != w.group)
      fail(fmt("event %zu (type %u, block %d): group %u, model %u", i, e.type, e.block_id, grp[i], w.group));
    if (e.type != w.type || e.medium != w.medium || e.block_id != w.block ||
        (w.type != KVB_EVENT_ALL_CLEARED && e.block_hash != w.hash) ||
        (st && (e.parent_kind != w.parent_kind || e.parent_hash != w.parent_hash || e.has_extra_key != w.has_extra ||
                (w.has_extra && e.extra_key != w.extra) || e.num_tokens != cfg_.bs)))
      fail(fmt("event %zu: type %u medium %u block %d hash %016" PRIx64 " parent %u/%016" PRIx64
               " extra %u/%" PRIu64 "; model type %u medium %u block %d hash %016" PRIx64 " parent %u/%016" PRIx64
               " extra %u/%" PRIu64,
               i, e.type, e.medium, e.block_id, e.block_hash, e.parent_kind, e.parent_hash, e.has_extra_key,
               e.extra_key, w.type, w.medium, w.block, w.hash, w.parent_kind, w.parent_hash, w.has_extra, w.extra));
    if (st && !std::equal(w.toks.begin(), w.toks.end(), toks.begin() + static_cast<long>(e.token_offset)))
      fail(fmt("event %zu (STORED, medium %u, block %d): tokens differ from the model's", i, w.medium, w.block));
  }
  g_act.events += n;
  model_.events.clear();
}

void Run::compare() {
  size_t nf = 0;
  expect(kvb_num_free_blocks(m_, &nf), KVB_OK, "num_free_blocks");
  if (nf != model_.num_free()) fail(fmt("free blocks %zu, model %zu", nf, model_.num_free()));

  // Pending transfers not yet run, in the order the engine runs them: host cache offloads, then loads,
  // then copy-on-write copies. Destinations read through their sources.
  std::map<int32_t, std::vector<int64_t>> overlay, host_overlay;
  for (const auto& p : model_.offloads) {
    std::vector<int64_t> row(cfg_.bs);
    for (size_t o = 0; o < cfg_.bs; ++o) row[o] = read_slot(overlay, p.first, o);
    host_overlay[p.second] = row;
  }
  for (const auto& p : model_.loads) {
    std::vector<int64_t> row(cfg_.bs);
    for (size_t o = 0; o < cfg_.bs; ++o) row[o] = read_host_slot(host_overlay, p.first, o);
    overlay[p.second] = row;
  }
  for (const auto& p : model_.pending) {
    std::vector<int64_t> row(cfg_.bs);
    for (size_t o = 0; o < cfg_.bs; ++o) row[o] = read_slot(overlay, p.first, o);
    overlay[p.second] = row;
  }

  std::vector<int32_t> tab;
  for (const auto& kv : model_.seqs) {
    const int64_t id = kv.first;
    const MSeq& s = kv.second;
    // Every group's block table (group 0 also through the plain kvb_seq_block_table).
    for (uint32_t g = 0; g < num_groups(); ++g) {
      const std::vector<int32_t>& want = s.g[g].table;
      tab.assign(want.size() + 1, -8);
      size_t len = 0;
      kvb_status st = g == 0 ? kvb_seq_block_table(m_, id, tab.data(), tab.size(), &len)
                             : kvb_seq_block_table_group(m_, id, g, tab.data(), tab.size(), &len);
      expect(st, s.swapped ? KVB_ERR_BAD_STATE : KVB_OK, "block_table");
      if (s.swapped) continue;
      tab.resize(len);
      if (tab != want)
        fail(fmt("block table of %" PRId64 " group %u: %s, model %s", id, g, vec_str(tab).c_str(),
                 vec_str(want).c_str()));
    }
    kvb_seq_info info;
    kvb_seq_info_init(&info);
    expect(kvb_seq_get_info(m_, id, &info), KVB_OK, "get_info");
    // One table's entries (the same in every group), blocks held summed over the groups, group 0's window.
    const size_t nblk = (s.swapped ? s.g[0].host_table : s.g[0].table).size();
    if (info.location != (s.swapped ? KVB_SEQ_SWAPPED_OUT : KVB_SEQ_ON_DEVICE) ||
        info.num_tokens != s.tokens.size() || info.num_computed != s.computed || info.num_cached != s.cached ||
        info.num_blocks != nblk || info.num_held_blocks != Model::held(s) || info.window_tokens != s.g[0].window ||
        info.sink_tokens != s.g[0].sink)
      fail(fmt("info of %" PRId64 ": loc %u tokens %" PRIu64 " computed %" PRIu64 " cached %" PRIu64
               " blocks %" PRIu64 " held %" PRIu64 " window %u sink %u; model loc %d tokens %zu computed %zu "
               "cached %zu blocks %zu held %zu window %u sink %u",
               id, info.location, info.num_tokens, info.num_computed, info.num_cached, info.num_blocks,
               info.num_held_blocks, info.window_tokens, info.sink_tokens, s.swapped, s.tokens.size(), s.computed,
               s.cached, nblk, Model::held(s), s.g[0].window, s.g[0].sink));
    // Data is never lost: every computed token reads back through every group's table (device or host)
    // wherever that group still holds its block.
    for (uint32_t g = 0; g < num_groups(); ++g) {
      const std::vector<int32_t>& t = s.swapped ? s.g[g].host_table : s.g[g].table;
      for (size_t p = 0; p < s.computed; ++p) {
        int32_t b = t[p / cfg_.bs];
        if (b < 0) continue;
        int64_t got = s.swapped ? read_host_slot(host_overlay, b, p % cfg_.bs) : read_slot(overlay, b, p % cfg_.bs);
        if (got != s.tokens[p])
          fail(fmt("KV of seq %" PRId64 " group %u token %zu (%s block %d slot %zu) holds %" PRId64 ", want %" PRId64,
                   id, g, p, s.swapped ? "host" : "device", b, p % cfg_.bs, got, s.tokens[p]));
      }
    }
  }

  // Data is never lost in the cache either: every block a prefix hit can return (device index, host
  // index) holds exactly the tokens committed into it, once the pending transfers have run.
  for (const auto& kv : model_.index)
    for (size_t o = 0; o < cfg_.bs; ++o)
      if (read_slot(overlay, kv.second, o) != model_.blk[kv.second].toks[o])
        fail(fmt("KV of cached device block %d slot %zu holds %" PRId64 ", committed %" PRId64, kv.second, o,
                 read_slot(overlay, kv.second, o), model_.blk[kv.second].toks[o]));
  for (const auto& kv : model_.host_index)
    for (size_t o = 0; o < cfg_.bs; ++o)
      if (read_host_slot(host_overlay, kv.second, o) != model_.host[kv.second].toks[o])
        fail(fmt("KV of cached host block %d slot %zu holds %" PRId64 ", committed %" PRId64, kv.second, o,
                 read_host_slot(host_overlay, kv.second, o), model_.host[kv.second].toks[o]));

  // The hash of every block. A BAD_STATE answer costs the library an exception and a message, so for
  // large pools a step checks the blocks the model gives a hash, the blocks in tables and a rotating
  // slice of 32, and every 32nd step (and the last) all of them.
  std::vector<char> want(cfg_.N, 0);
  bool sweep = cfg_.N <= 64 || step_ % 32 == 0 || step_ >= cfg_.steps;
  if (!sweep) {
    for (uint32_t b = 0; b < cfg_.N; ++b) want[b] = model_.blk[b].has_hash;
    for (const auto& kv : model_.seqs)
      for (const MTable& t : kv.second.g)
        for (int32_t b : t.table)
          if (b >= 0) want[static_cast<size_t>(b)] = 1;
    for (uint32_t k = 0; k < 32; ++k) want[(static_cast<uint32_t>(step_) * 32 + k) % cfg_.N] = 1;
  }
  for (uint32_t b = 0; b < cfg_.N; ++b) {
    if (!sweep && !want[b]) continue;
    uint64_t h = 0;
    const MBlock& mb = model_.blk[b];
    kvb_status st = kvb_block_hash(m_, static_cast<int32_t>(b), &h);
    if (mb.has_hash) {
      if (st != KVB_OK || h != mb.hash)
        fail(fmt("block_hash(%u) = %s %016" PRIx64 ", model %016" PRIx64, b, sname(st), h, mb.hash));
    } else if (st != KVB_ERR_BAD_STATE) {
      fail(fmt("block_hash(%u) = %s %016" PRIx64 ", model: no committed full block (BAD_STATE)", b, sname(st), h));
    }
  }

  kvb_stats st;
  kvb_stats_init(&st);
  expect(kvb_get_stats(m_, &st), KVB_OK, "get_stats");
  struct F { const char* name; uint64_t got, want; } fields[] = {
      {"block_size", st.block_size, cfg_.bs},
      {"num_blocks", st.num_blocks, cfg_.N},
      {"free_blocks", st.free_blocks, model_.num_free()},
      {"used_blocks", st.used_blocks, cfg_.N - model_.num_free()},
      {"cached_free_blocks", st.cached_free_blocks, model_.cached_free()},
      {"num_seqs", st.num_seqs, model_.seqs.size()},
      {"query_tokens", st.query_tokens, model_.query},
      {"hit_tokens", st.hit_tokens, model_.hit},
      {"computed_tokens", st.computed_tokens, model_.computed},
      {"evictions", st.evictions, model_.evictions},
      {"cow_copies", st.cow_copies, model_.cow},
      {"swapped_out_blocks", st.swapped_out_blocks, model_.sw_out},
      {"swapped_in_blocks", st.swapped_in_blocks, model_.sw_in},
      {"num_host_blocks", st.num_host_blocks, cfg_.host},
      {"free_host_blocks", st.free_host_blocks, model_.host_free.size()},
      {"events_dropped", st.events_dropped, 0},
      {"device_hit_tokens", st.device_hit_tokens, model_.hit - model_.host_hit - model_.store_hit},
      {"host_hit_tokens", st.host_hit_tokens, model_.host_hit},
      {"offloaded_blocks", st.offloaded_blocks, model_.offloaded},
      {"loaded_blocks", st.loaded_blocks, model_.loaded},
      {"host_evictions", st.host_evictions, model_.host_evictions},
      {"cached_host_blocks", st.cached_host_blocks, model_.host_index.size()},
      {"store_hit_tokens", st.store_hit_tokens, model_.store_hit},
      {"store_put_blocks", st.store_put_blocks, model_.put_blocks},
      {"store_put_bytes", st.store_put_bytes, model_.put_blocks * kStoreTokenBytes * cfg_.bs},
      {"store_put_failures", st.store_put_failures, model_.put_failures},
      {"store_get_blocks", st.store_get_blocks, model_.get_blocks},
      {"store_get_bytes", st.store_get_bytes, model_.get_blocks * kStoreTokenBytes * cfg_.bs},
      {"store_get_failures", st.store_get_failures, model_.get_failures},
      {"store_recomputed_tokens", st.store_recomputed_tokens, model_.recomputed},
      {"store_filling_blocks", st.store_filling_blocks, model_.gets.size()},
  };
  for (const F& f : fields)
    if (f.got != f.want) fail(fmt("stats.%s = %" PRIu64 ", model %" PRIu64, f.name, f.got, f.want));

  compare_store();
  if (cfg_.flags & KVB_CONFIG_EVENTS) compare_events();
  else model_.events.clear();

  if (kvb_check_invariants(m_) != KVB_OK) fail(fmt("kvb_check_invariants: %s", kvb_last_error()));
}


}  // namespace
