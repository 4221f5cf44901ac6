// Differential test of the block manager: the engine side. Runs drained copy-on-write pairs on the
// simulated KV store, checks kvb_batch_export against the model, writes K/V at the exported slots and
// commits, as a serving engine would.
#pragma once

#include <algorithm>
#include <cinttypes>
#include <map>
#include <string>
#include <vector>

#include "run.h"

namespace {

// Drains the host cache's transfers, checks them against the model and runs them on the simulated KV
// store in the documented order: every offload (device -> host), then every load (host -> device).
void Run::drain_and_run_host_transfers() {
  if (!host_cache()) return;
  const size_t no = model_.offloads.size(), nl = model_.loads.size();
  std::vector<int32_t> off(2 * no + 2, -7), ld(2 * nl + 2, -7);
  size_t go = 99, gl = 99;
  expect(kvb_drain_host_transfers(m_, off.data(), no + 1, &go, ld.data(), nl + 1, &gl), KVB_OK,
         "drain_host_transfers");
  if (go != no || gl != nl) fail(fmt("drain_host_transfers gave %zu offloads, %zu loads; model %zu, %zu", go, gl, no, nl));
  const size_t bs = cfg_.bs;
  for (size_t i = 0; i < no; ++i) {
    if (off[2 * i] != model_.offloads[i].first || off[2 * i + 1] != model_.offloads[i].second)
      fail(fmt("offload %zu is (%d,%d), model (%d,%d)", i, off[2 * i], off[2 * i + 1], model_.offloads[i].first,
               model_.offloads[i].second));
    std::copy(&content_[off[2 * i] * bs], &content_[(off[2 * i] + 1) * bs], &host_content_[off[2 * i + 1] * bs]);
  }
  for (size_t i = 0; i < nl; ++i) {
    if (ld[2 * i] != model_.loads[i].first || ld[2 * i + 1] != model_.loads[i].second)
      fail(fmt("load %zu is (%d,%d), model (%d,%d)", i, ld[2 * i], ld[2 * i + 1], model_.loads[i].first,
               model_.loads[i].second));
    std::copy(&host_content_[ld[2 * i] * bs], &host_content_[(ld[2 * i] + 1) * bs], &content_[ld[2 * i + 1] * bs]);
  }
  if (off[2 * no] != -7 || ld[2 * nl] != -7) fail("drain_host_transfers wrote past the pairs it reported");
  model_.release_host_transfers();
}

void Run::drain_and_run_copies() {
  drain_and_run_host_transfers();
  size_t np = 0;
  std::vector<int32_t> pairs(2 * model_.pending.size() + 2, -7);
  expect(kvb_drain_copies(m_, pairs.data(), model_.pending.size() + 1, &np), KVB_OK, "drain_copies");
  if (np != model_.pending.size()) fail(fmt("drain_copies gave %zu pairs, model has %zu", np, model_.pending.size()));
  for (size_t i = 0; i < np; ++i) {
    if (pairs[2 * i] != model_.pending[i].first || pairs[2 * i + 1] != model_.pending[i].second)
      fail(fmt("drained copy %zu is (%d,%d), model (%d,%d)", i, pairs[2 * i], pairs[2 * i + 1],
               model_.pending[i].first, model_.pending[i].second));
    int32_t src = pairs[2 * i], dst = pairs[2 * i + 1];
    std::copy(&content_[static_cast<size_t>(src) * cfg_.bs], &content_[static_cast<size_t>(src + 1) * cfg_.bs],
              &content_[static_cast<size_t>(dst) * cfg_.bs]);
  }
  // Drained copies release the references they held on their sources, in order.
  std::vector<std::pair<int32_t, int32_t>> taken;
  taken.swap(model_.pending);
  for (const auto& p : taken) model_.release(p.first);
}

Run::BatchWant Run::batch_want(const std::vector<int64_t>& ids, uint32_t cols, bool tables, size_t slot_cap, bool slots,
                               uint32_t group) {
  BatchWant w;
  if (group >= num_groups()) return BatchWant{KVB_ERR_INVALID_ARGUMENT, 0, 0};
  for (int64_t id : ids) {
    MSeq* s = model_.find(id);
    if (!s) return BatchWant{KVB_ERR_NO_SUCH_SEQUENCE, 0, 0};
    if (s->swapped) return BatchWant{KVB_ERR_BAD_STATE, 0, 0};
    w.slots += s->tokens.size() - s->computed;
    w.max_blocks = std::max(w.max_blocks, static_cast<uint32_t>(s->g[group].table.size()));
  }
  if ((tables && w.max_blocks > cols) || (slots && w.slots > slot_cap)) w.st = KVB_ERR_BUFFER_TOO_SMALL;
  return w;
}

// Calls kvb_batch_export for one group with the given buffer sizes and checks every output against the
// model. Returns the slot mapping on success.
std::vector<int64_t> Run::batch_export(const std::vector<int64_t>& ids, uint32_t cols, size_t slot_cap,
                                       bool tables, bool lens, bool qs, bool slots, uint32_t group) {
  std::vector<int32_t> bt(static_cast<size_t>(cols) * ids.size() + 1, -9), sl(ids.size() + 1, -9),
      q(ids.size() + 2, -9);
  std::vector<int64_t> sm(slot_cap + 1, -9);
  kvb_batch b;
  kvb_batch_init(&b);
  b.max_blocks_per_seq = cols;
  b.block_tables = tables ? bt.data() : nullptr;
  b.seq_lens = lens ? sl.data() : nullptr;
  b.query_start = qs ? q.data() : nullptr;
  b.slot_mapping = slots ? sm.data() : nullptr;
  b.slot_capacity = slot_cap;
  b.group = group;
  BatchWant w = batch_want(ids, cols, tables, slot_cap, slots, group);
  kvb_status st = kvb_batch_export(m_, ids.empty() ? nullptr : ids.data(), ids.size(), &b);
  expect(st, w.st, "batch_export");
  if (st == KVB_OK || st == KVB_ERR_BUFFER_TOO_SMALL) {
    if (b.num_slots != w.slots || b.max_blocks_needed != w.max_blocks)
      fail(fmt("batch_export num_slots %zu max_blocks_needed %u, model %zu %u", b.num_slots, b.max_blocks_needed,
               w.slots, w.max_blocks));
  }
  if (st != KVB_OK) {  // a failed call writes nothing
    for (int32_t v : bt) if (v != -9) fail("failed batch_export wrote block_tables");
    for (int32_t v : sl) if (v != -9) fail("failed batch_export wrote seq_lens");
    for (int32_t v : q) if (v != -9) fail("failed batch_export wrote query_start");
    for (int64_t v : sm) if (v != -9) fail("failed batch_export wrote slot_mapping");
    return {};
  }
  std::vector<int64_t> want_sm;
  int32_t qacc = 0;
  if (qs && q[0] != 0) fail("query_start[0] != 0");
  for (size_t i = 0; i < ids.size(); ++i) {
    const MSeq& s = *model_.find(ids[i]);
    const std::vector<int32_t>& table = s.g[group].table;
    if (tables)
      for (uint32_t c = 0; c < cols; ++c) {
        int32_t want = c < table.size() ? table[c] : -1;
        if (bt[i * cols + c] != want)
          fail(fmt("batch (group %u) block_tables[%zu][%u] = %d, model %d", group, i, c, bt[i * cols + c], want));
      }
    if (lens && sl[i] != static_cast<int32_t>(s.tokens.size()))
      fail(fmt("batch seq_lens[%zu] = %d, model %zu", i, sl[i], s.tokens.size()));
    for (size_t p = s.computed; p < s.tokens.size(); ++p)
      want_sm.push_back(static_cast<int64_t>(table[p / cfg_.bs]) * cfg_.bs + static_cast<int64_t>(p % cfg_.bs));
    qacc += static_cast<int32_t>(s.tokens.size() - s.computed);
    if (qs && q[i + 1] != qacc) fail(fmt("batch query_start[%zu] = %d, model %d", i + 1, q[i + 1], qacc));
  }
  if (tables && bt[static_cast<size_t>(cols) * ids.size()] != -9) fail("batch_export wrote past block_tables");
  if (lens && sl[ids.size()] != -9) fail("batch_export wrote past seq_lens");
  if (qs && q[ids.size() + 1] != -9) fail("batch_export wrote past query_start");
  if (slots) {
    for (size_t k = 0; k < slot_cap; ++k) {
      int64_t want = k < want_sm.size() ? want_sm[k] : -1;
      if (sm[k] != want)
        fail(fmt("batch (group %u) slot_mapping[%zu] = %" PRId64 ", model %" PRId64, group, k, sm[k], want));
    }
    if (sm[slot_cap] != -9) fail("batch_export wrote past slot_capacity");
  }
  return want_sm;
}

void Run::write_kv(const std::vector<std::vector<int64_t>>& sm, size_t off, const std::vector<int64_t>& toks,
                   size_t from, size_t k) {
  for (const std::vector<int64_t>& group_sm : sm)
    for (size_t j = 0; j < k; ++j) {
      int64_t slot = group_sm[off + j];
      if (slot < 0 || slot >= static_cast<int64_t>(content_.size())) fail(fmt("slot %" PRId64 " out of range", slot));
      content_[static_cast<size_t>(slot)] = toks[from + j];
    }
}

// One engine step: run pending copies, export the batch of every group (the inputs of its layers),
// write K/V of the tokens to commit at every group's slots, commit.
void Run::engine_step() {
  std::vector<int64_t> cand, ids;
  for (const auto& kv : model_.seqs)
    if (!kv.second.swapped && kv.second.computed < kv.second.tokens.size()) cand.push_back(kv.first);
  if (cand.empty()) return;
  for (int64_t id : cand)
    if (rng_.chance(0.5) || ids.empty()) ids.push_back(id);
  while (ids.size() > 4) ids.erase(ids.begin() + static_cast<long>(rng_.below(ids.size())));
  note("step: drain copies, export " + vec_str(ids));
  drain_and_run_copies();
  size_t slots = 0;
  uint32_t cols = 0;
  for (int64_t id : ids) {
    slots += model_.seqs[id].tokens.size() - model_.seqs[id].computed;
    cols = std::max(cols, static_cast<uint32_t>(model_.seqs[id].g[0].table.size()));
  }
  std::vector<std::vector<int64_t>> sm(num_groups());
  for (uint32_t g = 0; g < num_groups(); ++g)
    sm[g] = batch_export(ids, cols + static_cast<uint32_t>(rng_.below(2)), slots + rng_.below(3), true, true, true,
                         true, g);
  // The commits: one call per sequence, or one kvb_batch_commit (counts NULL: every uncomputed token).
  const bool batched = rng_.chance(0.3);
  std::vector<size_t> counts;
  bool all = true;
  size_t off = 0;
  for (int64_t id : ids) {
    MSeq& s = model_.seqs[id];
    size_t unc = s.tokens.size() - s.computed;
    size_t k = rng_.chance(0.6) ? unc : rng_.below(unc + 1);
    write_kv(sm, off, s.tokens, s.computed, k);
    off += unc;
    counts.push_back(k);
    all = all && k == unc;
    if (batched) continue;
    note(fmt("commit %" PRId64 " %zu", id, k));
    expect(kvb_seq_commit(m_, id, k), model_.commit(id, k), "commit");
  }
  if (!batched) return;
  const bool null_counts = all && rng_.chance(0.5);
  note(fmt("batch_commit %s %s", vec_str(ids).c_str(), null_counts ? "(all)" : vec_str(counts).c_str()));
  expect(kvb_batch_commit(m_, ids.data(), null_counts ? nullptr : counts.data(), ids.size()),
         model_.batch_commit(ids, counts), "batch_commit");
}


}  // namespace
