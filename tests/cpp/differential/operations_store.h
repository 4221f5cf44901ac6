// Differential test of the block manager: the store level's side of a run (store configurations). The
// in-memory store (store_mem.h) is registered at the start; each step draws what it does wrong (refused
// puts), each allocation what its lookup and gets do (a failing lookup; gets that succeed, are refused,
// find their key gone or read corrupted bytes; a poll that gives up on all of them), and the model
// (model_store.h) is told the same, so that it predicts the manager's cached and computed counts, loads,
// puts, stats and events.
#pragma once

#include <cinttypes>
#include <string>
#include <vector>

#include "run.h"

namespace {

void Run::set_store() {
  store_.bs = cfg_.bs;
  store_.host = &host_content_;
  store_.rng = &rng_;
  kvb_store t = store_.table(cfg_.store == 2);
  kvb_store_namespace ns;
  kvb_store_namespace_init(&ns);
  ns.dtype = KVB_DTYPE_FP16;
  ns.block_size = cfg_.bs;
  ns.num_layers = kStoreLayers;
  ns.num_kv_heads = kStoreHeads;
  ns.head_dim = kStoreHeadDim;
  ns.model_id = 42;
  expect(kvb_manager_set_store(m_, &t, &ns), KVB_OK, "manager_set_store");
  model_.store_on = true;
  model_.write_through = cfg_.store == 2;
}

void Run::store_step_behaviour() {
  store_.refuse_puts = model_.store_refuse_puts = rng_.chance(0.1);
  store_.lookup_fails = model_.store_lookup_fails = false;
  store_.plan.clear();
  model_.store_plan.clear();
  store_.next_plan = 0;
  if (store_.refuse_puts) note("store refuses puts this step");
}

// Before an allocation: how its store lookup and gets will go.
void Run::store_plan_allocation() {
  store_.lookup_fails = model_.store_lookup_fails = rng_.chance(0.05);
  store_.plan.clear();
  store_.next_plan = 0;
  std::string s;
  for (size_t j = 0; j < 64; ++j) {
    const size_t r = rng_.below(100);
    const MGetOutcome o = r < 80 ? kGetOk : r < 87 ? kGetCorrupt : r < 93 ? kGetMissing : kGetRefused;
    store_.plan.push_back(o);
    if (j < 8) s += "OCMR"[o];
  }
  model_.store_plan = store_.plan;
  note(fmt("store plan: lookup %s, gets %s...", store_.lookup_fails ? "fails" : "ok", s.c_str()));
}

void Run::store_poll() {
  const bool give_up = !model_.gets.empty() && rng_.chance(0.05);
  store_.give_up = give_up;
  store_.reported.clear();
  note(give_up ? "store_poll (the store gives up)" : "store_poll");
  size_t filling = 99;
  expect(kvb_store_poll(m_, &filling), KVB_OK, "store_poll");
  model_.store_poll(store_.reported, give_up);
  if (filling != model_.gets.size()) fail(fmt("store_poll: %zu gets filling, model %zu", filling, model_.gets.size()));
}

// Sequence id was just allocated: while its gets are in flight it is refused everything that would run
// or change it (its K/V is not all there), reports its store state, and may be freed (its staging host
// blocks then stay reserved until the poll reports their gets).
void Run::store_while_filling(int64_t id) {
  const MSeq& s = *model_.find(id);
  size_t computed = 99, filling = 99;
  expect(kvb_seq_store_state(m_, id, &computed, &filling), KVB_OK, "seq_store_state");
  if (computed != s.computed || filling != s.filling)
    fail(fmt("seq_store_state(%" PRId64 ") after allocate = %zu computed, %zu filling; model %zu, %zu", id, computed,
             filling, s.computed, s.filling));
  if (s.filling == 0) return;
  expect(kvb_seq_commit(m_, id, 0), KVB_ERR_BAD_STATE, "commit while filling");
  const int64_t tok = 1;
  expect(kvb_seq_append(m_, id, &tok, 1), KVB_ERR_BAD_STATE, "append while filling");
  std::vector<int32_t> bt(64);
  kvb_batch b;
  kvb_batch_init(&b);
  b.max_blocks_per_seq = 64;
  b.block_tables = bt.data();
  expect(kvb_batch_export(m_, &id, 1, &b), KVB_ERR_BAD_STATE, "batch_export while filling");
  if (rng_.chance(0.15)) {
    note(fmt("free %" PRId64 " while filling", id));
    expect(kvb_seq_free(m_, id), model_.free_seq(id), "free");
  }
}

// The puts since the last check, in order (host block and the bytes the store read), and every
// sequence's store state.
void Run::compare_store() {
  if (!cfg_.store) return;
  const auto& got = store_.put_log;
  const auto& want = model_.put_log;
  if (got.size() != want.size()) fail(fmt("%zu store puts, model %zu", got.size(), want.size()));
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i].first != want[i].first) fail(fmt("store put %zu from host block %d, model %d", i, got[i].first, want[i].first));
    if (got[i].second != want[i].second)
      fail(fmt("store put %zu (host block %d): bytes %s, model's tokens %s", i, got[i].first,
               vec_str(got[i].second).c_str(), vec_str(want[i].second).c_str()));
  }
  store_.put_log.clear();
  model_.put_log.clear();
  for (const auto& kv : model_.seqs) {
    size_t computed = 99, filling = 99;
    expect(kvb_seq_store_state(m_, kv.first, &computed, &filling), KVB_OK, "seq_store_state");
    if (computed != kv.second.computed || filling != kv.second.filling)
      fail(fmt("seq_store_state(%" PRId64 ") = %zu computed, %zu filling; model %zu, %zu", kv.first, computed, filling,
               kv.second.computed, kv.second.filling));
  }
}

}  // namespace
