// Differential test of the block manager: the operation generator. Each op_* draws random arguments,
// calls the library and the model (model.h) and expects the same status; one_step picks one by weight.
// A new operation (a host cache tier, KV cache groups, ...) is an op_* here, a line in one_step, a Model
// method in model.h, and its observable state in compare.h.
#pragma once

#include <algorithm>
#include <cinttypes>
#include <map>
#include <string>
#include <vector>

#include "run.h"

namespace {

void Run::op_allocate() {
  std::vector<int64_t> t = gen_prompt();
  bool ex = rng_.chance(0.5);
  Opts o = ex ? gen_opts(t) : Opts{};
  kvb_seq_options so = to_c(o);
  int64_t id = new_id();
  note(fmt("allocate%s %" PRId64 " %s%s", ex ? "_ex" : "", id, vec_str(t).c_str(), opts_str(o).c_str()));
  if (cfg_.store) store_plan_allocation();
  size_t want_c = 0, got_c = 99999;
  kvb_status want = model_.can_allocate(t, o, &want_c);
  kvb_status st = ex ? kvb_seq_can_allocate_ex(m_, t.data(), t.size(), &so, &got_c)
                     : kvb_seq_can_allocate(m_, t.data(), t.size(), &got_c);
  expect(st, want, "can_allocate");
  if ((st == KVB_OK || st == KVB_ERR_OUT_OF_BLOCKS) && got_c != want_c)  // OUT_OF_BLOCKS writes it too
    fail(fmt("can_allocate cached %zu, model %zu", got_c, want_c));
  got_c = 99999;
  want = model_.allocate(id, t, o, &want_c);
  st = ex ? kvb_seq_allocate_ex(m_, id, t.data(), t.size(), &so, &got_c)
          : kvb_seq_allocate(m_, id, t.data(), t.size(), &got_c);
  expect(st, want, "allocate");
  if (st == KVB_OK && got_c != want_c) fail(fmt("allocate cached %zu, model %zu", got_c, want_c));
  // The engine's step order (kvblock.h "Store tier"): completions right after the allocations.
  if (cfg_.store && st == KVB_OK) store_while_filling(id);
  if (cfg_.store) store_poll();
}

void Run::op_append() {
  int64_t id;
  if (!pick(&id, 1)) return;
  size_t n = rng_.chance(0.6) ? 1 : rng_.range(1, cfg_.bs + 3);
  std::vector<int64_t> t = gen_tokens(n);
  note(fmt("append %" PRId64 " %s", id, vec_str(t).c_str()));
  expect(kvb_seq_can_append(m_, id, n), model_.can_append(id, n), "can_append");
  expect(kvb_seq_append(m_, id, t.data(), n), model_.append(id, t), "append");
}

// A decode step's appends in one call: some device sequences, now and then an id twice, an unknown or a
// swapped-out one (all refused, nothing changed).
void Run::op_batch_append() {
  std::vector<int64_t> ids;
  for (const auto& kv : model_.seqs)
    if ((!kv.second.swapped || rng_.chance(0.05)) && rng_.chance(0.5)) ids.push_back(kv.first);
  if (!ids.empty() && rng_.chance(0.05)) ids.push_back(ids[rng_.below(ids.size())]);
  if (rng_.chance(0.05)) ids.insert(ids.begin() + static_cast<long>(rng_.below(ids.size() + 1)), unknown_id());
  std::vector<int64_t> t = gen_tokens(ids.size());
  note(fmt("batch_append %s %s", vec_str(ids).c_str(), vec_str(t).c_str()));
  expect(kvb_batch_append(m_, ids.data(), t.data(), ids.size()), model_.batch_append(ids, t), "batch_append");
}

void Run::op_free() {
  int64_t id;
  if (!pick(&id, 0)) return;
  note(fmt("free %" PRId64, id));
  expect(kvb_seq_free(m_, id), model_.free_seq(id), "free");
}

void Run::op_fork() {
  int64_t pid;
  if (!pick(&pid, 0)) return;
  int64_t cid = new_id();
  bool at = rng_.chance(0.6);
  const MSeq& p = *model_.find(pid);
  size_t pos = 0;
  if (at) pos = rng_.chance(0.85) ? rng_.range(1, std::max<size_t>(1, p.computed)) : rng_.below(p.tokens.size() + 2);
  note(at ? fmt("fork_at %" PRId64 " -> %" PRId64 " %zu", pid, cid, pos) : fmt("fork %" PRId64 " -> %" PRId64, pid, cid));
  kvb_status want = model_.fork(pid, cid, pos, at);
  kvb_status st = at ? kvb_seq_fork_at(m_, pid, cid, pos) : kvb_seq_fork(m_, pid, cid);
  expect(st, want, at ? "fork_at" : "fork");
}

void Run::op_rollback() {
  int64_t id;
  if (!pick(&id, 1)) return;
  size_t L = model_.find(id)->tokens.size();
  size_t n = rng_.chance(0.9) ? rng_.below(std::min<size_t>(L, 2 * cfg_.bs + 2)) : rng_.below(L + 2);
  note(fmt("rollback %" PRId64 " %zu", id, n));
  expect(kvb_seq_rollback(m_, id, n), model_.rollback(id, n), "rollback");
}

void Run::op_spec_decode() {  // append k speculative tokens, commit them, reject some
  int64_t id;
  if (!pick(&id, 1)) return;
  if (model_.find(id)->computed != model_.find(id)->tokens.size()) return;
  size_t k = rng_.range(1, 4);
  std::vector<int64_t> t = gen_tokens(k);
  note(fmt("spec append %" PRId64 " %s", id, vec_str(t).c_str()));
  kvb_status st = kvb_seq_append(m_, id, t.data(), k);
  expect(st, model_.append(id, t), "append");
  if (st != KVB_OK) return;
  drain_and_run_copies();
  std::vector<std::vector<int64_t>> sm(num_groups());
  for (uint32_t g = 0; g < num_groups(); ++g) sm[g] = batch_export({id}, 0, k, false, false, false, true, g);
  write_kv(sm, 0, t, 0, k);
  note(fmt("spec commit %" PRId64 " %zu", id, k));
  expect(kvb_seq_commit(m_, id, k), model_.commit(id, k), "commit");
  size_t r = rng_.below(k + 1);
  note(fmt("spec rollback %" PRId64 " %zu", id, r));
  expect(kvb_seq_rollback(m_, id, r), model_.rollback(id, r), "rollback");
}

void Run::op_window() {
  int64_t id;
  if (!pick(&id, 1)) return;
  uint32_t w = rng_.chance(0.15) ? 0 : static_cast<uint32_t>(rng_.range(1, 4 * cfg_.bs));
  // Sinks grow and shrink: blocks kept only by a larger earlier sink must be released by a smaller one.
  uint32_t sk = 0;
  if (w) sk = rng_.chance(0.5) ? static_cast<uint32_t>(rng_.below(2 * cfg_.bs + 1)) : 0;
  if (w == 0 && rng_.chance(0.3)) sk = 1 + static_cast<uint32_t>(rng_.below(3));  // sink without window: invalid
  note(fmt("set_window %" PRId64 " %u %u", id, w, sk));
  expect(kvb_seq_set_window(m_, id, w, sk), model_.set_window(id, w, sk), "set_window");
}

void Run::op_swap_out() {
  int64_t id;
  if (!pick(&id, 0)) return;
  note(fmt("swap_out %" PRId64, id));
  kvb_availability a = KVB_AVAIL_NEVER, wa = KVB_AVAIL_NEVER;
  kvb_status want = model_.can_swap_out(id, &wa);
  expect(kvb_seq_can_swap_out(m_, id, &a), want, "can_swap_out");
  if (want == KVB_OK && a != wa) fail(fmt("can_swap_out answered %d, model %d", a, wa));
  size_t need = 0;
  size_t cap = rng_.chance(0.1) ? rng_.below(3) : 4096;
  want = model_.check_swap_out(id, cap, &need);
  std::vector<int32_t> pairs(2 * std::max<size_t>(need, 1) + 2 * cap, -3);
  size_t np = 77777;
  kvb_status st = kvb_seq_swap_out(m_, id, pairs.data(), cap, &np);
  expect(st, want, "swap_out");
  if ((st == KVB_OK || st == KVB_ERR_BUFFER_TOO_SMALL) && np != need)
    fail(fmt("swap_out num_pairs %zu, model %zu", np, need));
  if (st != KVB_OK) return;
  std::string err = model_.apply_swap_out(id, pairs.data(), np);
  if (!err.empty()) fail(err);
  for (size_t k = 0; k < np; ++k) {  // run the pairs: device -> host
    int32_t b = pairs[2 * k], h = pairs[2 * k + 1];
    std::copy(&content_[static_cast<size_t>(b) * cfg_.bs], &content_[static_cast<size_t>(b + 1) * cfg_.bs],
              &host_content_[static_cast<size_t>(h) * cfg_.bs]);
  }
}

void Run::op_swap_in() {
  int64_t id;
  if (!pick(&id, rng_.chance(0.9) ? 2 : 0)) return;
  note(fmt("swap_in %" PRId64, id));
  kvb_availability a = KVB_AVAIL_NEVER, wa = KVB_AVAIL_NEVER;
  kvb_status want = model_.can_swap_in(id, &wa);
  expect(kvb_seq_can_swap_in(m_, id, &a), want, "can_swap_in");
  if (want == KVB_OK && a != wa) fail(fmt("can_swap_in answered %d, model %d", a, wa));
  if (want == KVB_OK && wa != KVB_AVAIL_OK && rng_.chance(0.7)) return;  // a scheduler would wait
  // The engine runs pending copies before the swap-in overwrites device blocks (a freed CoW source
  // may be among them).
  drain_and_run_copies();
  size_t cap = rng_.chance(0.1) ? rng_.below(3) : 4096, need = 0, np = 77777;
  std::vector<int32_t> want_pairs;
  want = model_.swap_in(id, cap, &need, &want_pairs);
  std::vector<int32_t> pairs(2 * std::max<size_t>(need, 1) + 2 * cap, -3);
  kvb_status st = kvb_seq_swap_in(m_, id, pairs.data(), cap, &np);
  expect(st, want, "swap_in");
  if ((st == KVB_OK || st == KVB_ERR_BUFFER_TOO_SMALL) && np != need)
    fail(fmt("swap_in num_pairs %zu, model %zu", np, need));
  if (st != KVB_OK) return;
  // Taking free blocks may have offloaded evicted ones: those run before the swap-in overwrites them.
  drain_and_run_host_transfers();
  for (size_t k = 0; k < 2 * np; ++k)
    if (pairs[k] != want_pairs[k]) fail(fmt("swap_in pairs %s, model %s", vec_str(std::vector<int32_t>(pairs.begin(), pairs.begin() + static_cast<long>(2 * np))).c_str(), vec_str(want_pairs).c_str()));
  for (size_t k = 0; k < np; ++k) {  // run the pairs: host -> device
    int32_t h = pairs[2 * k], b = pairs[2 * k + 1];
    std::copy(&host_content_[static_cast<size_t>(h) * cfg_.bs], &host_content_[static_cast<size_t>(h + 1) * cfg_.bs],
              &content_[static_cast<size_t>(b) * cfg_.bs]);
  }
}

void Run::op_drain() {
  if (rng_.chance(0.3) && !model_.pending.empty()) {  // too small: nothing is drained
    size_t np = 0;
    std::vector<int32_t> pairs(2 * model_.pending.size(), -5);
    note("drain_copies (too small)");
    expect(kvb_drain_copies(m_, pairs.data(), model_.pending.size() - 1, &np), KVB_ERR_BUFFER_TOO_SMALL,
           "drain_copies");
    if (np != model_.pending.size()) fail(fmt("drain_copies needed %zu, model %zu", np, model_.pending.size()));
    for (int32_t v : pairs) if (v != -5) fail("failed drain_copies wrote pairs");
    return;
  }
  note("drain_copies");
  drain_and_run_copies();
}

void Run::op_drain_host() {
  const size_t no = model_.offloads.size(), nl = model_.loads.size();
  if (rng_.chance(0.3) && no + nl > 0) {  // a capacity too small: both counts, nothing drained
    std::vector<int32_t> off(2 * no + 2, -5), ld(2 * nl + 2, -5);
    bool short_off = no > 0 && (nl == 0 || rng_.chance(0.5));
    size_t go = 0, gl = 0;
    note("drain_host_transfers (too small)");
    expect(kvb_drain_host_transfers(m_, off.data(), short_off ? no - 1 : no, &go, ld.data(), short_off ? nl : nl - 1,
                                    &gl),
           KVB_ERR_BUFFER_TOO_SMALL, "drain_host_transfers");
    if (go != no || gl != nl) fail(fmt("drain_host_transfers needed %zu, %zu; model %zu, %zu", go, gl, no, nl));
    for (int32_t v : off) if (v != -5) fail("failed drain_host_transfers wrote offload pairs");
    for (int32_t v : ld) if (v != -5) fail("failed drain_host_transfers wrote load pairs");
    return;
  }
  note("drain_host_transfers");
  drain_and_run_host_transfers();
}

void Run::op_batch() {
  std::vector<int64_t> ids;
  for (const auto& kv : model_.seqs)
    if (rng_.chance(0.4)) ids.push_back(kv.first);
  if (rng_.chance(0.05)) ids.insert(ids.begin() + static_cast<long>(rng_.below(ids.size() + 1)), unknown_id());
  // Any group's tables and slots; now and then a group index out of range (refused).
  uint32_t group = rng_.chance(0.05) ? num_groups() + static_cast<uint32_t>(rng_.below(2))
                                     : static_cast<uint32_t>(rng_.below(num_groups()));
  size_t slots = 0;
  uint32_t cols = 0;
  for (int64_t id : ids) {
    const MSeq* s = model_.find(id);
    if (!s) continue;
    slots += s->tokens.size() - s->computed;
    cols = std::max(cols, static_cast<uint32_t>(s->g[0].table.size()));
  }
  if (rng_.chance(0.2) && cols) cols -= static_cast<uint32_t>(rng_.range(1, cols));
  else cols += static_cast<uint32_t>(rng_.below(3));
  if (rng_.chance(0.2) && slots) slots -= rng_.range(1, slots);
  else slots += rng_.below(4);
  note(fmt("batch_export %s group=%u cols=%u slots=%zu", vec_str(ids).c_str(), group, cols, slots));
  batch_export(ids, cols, slots, rng_.chance(0.8), rng_.chance(0.8), rng_.chance(0.8), rng_.chance(0.8), group);
}

void Run::op_reset() {
  note("reset_prefix_cache");
  expect(kvb_reset_prefix_cache(m_), model_.reset_prefix_cache(), "reset_prefix_cache");
}

void Run::op_extra_key() {
  int64_t id;
  if (!pick(&id, 0)) return;
  const MSeq& s = *model_.find(id);
  uint32_t bi = static_cast<uint32_t>(rng_.below(model_.nblocks(s.tokens.size()) + 2));
  uint64_t key = rng_.below(5);
  note(fmt("set_extra_key %" PRId64 " block %u key %" PRIu64, id, bi, key));
  expect(kvb_seq_set_extra_key(m_, id, bi, key), model_.set_extra_key(id, bi, key), "set_extra_key");
}

void Run::op_invalid() {
  int64_t id = unknown_id(), known = 0;
  bool have = pick(&known, 0);
  int64_t tok = 1;
  size_t n = 0, cached = 0;
  int32_t buf[4];
  kvb_availability a;
  switch (rng_.below(14)) {
    case 0:
      note(fmt("commit unknown %" PRId64, id));
      expect(kvb_seq_commit(m_, id, 1), KVB_ERR_NO_SUCH_SEQUENCE, "commit(unknown)");
      break;
    case 1:
      note(fmt("append unknown %" PRId64, id));
      expect(kvb_seq_append(m_, id, &tok, 1), KVB_ERR_NO_SUCH_SEQUENCE, "append(unknown)");
      expect(kvb_seq_can_append(m_, id, 1), KVB_ERR_NO_SUCH_SEQUENCE, "can_append(unknown)");
      break;
    case 2:
      note(fmt("free/table/info/rollback/window/swap unknown %" PRId64, id));
      expect(kvb_seq_free(m_, id), KVB_ERR_NO_SUCH_SEQUENCE, "free(unknown)");
      expect(kvb_seq_block_table(m_, id, buf, 4, &n), KVB_ERR_NO_SUCH_SEQUENCE, "block_table(unknown)");
      expect(kvb_seq_rollback(m_, id, 1), KVB_ERR_NO_SUCH_SEQUENCE, "rollback(unknown)");
      expect(kvb_seq_set_window(m_, id, 4, 0), KVB_ERR_NO_SUCH_SEQUENCE, "set_window(unknown)");
      expect(kvb_seq_can_swap_out(m_, id, &a), KVB_ERR_NO_SUCH_SEQUENCE, "can_swap_out(unknown)");
      expect(kvb_seq_can_swap_in(m_, id, &a), KVB_ERR_NO_SUCH_SEQUENCE, "can_swap_in(unknown)");
      expect(kvb_seq_swap_out(m_, id, buf, 2, &n), KVB_ERR_NO_SUCH_SEQUENCE, "swap_out(unknown)");
      expect(kvb_seq_swap_in(m_, id, buf, 2, &n), KVB_ERR_NO_SUCH_SEQUENCE, "swap_in(unknown)");
      expect(kvb_seq_set_extra_key(m_, id, 0, 1), KVB_ERR_NO_SUCH_SEQUENCE, "set_extra_key(unknown)");
      {
        kvb_seq_info info;
        kvb_seq_info_init(&info);
        expect(kvb_seq_get_info(m_, id, &info), KVB_ERR_NO_SUCH_SEQUENCE, "get_info(unknown)");
      }
      break;
    case 3:
      note(fmt("fork unknown %" PRId64, id));
      expect(kvb_seq_fork(m_, id, new_id()), KVB_ERR_NO_SUCH_SEQUENCE, "fork(unknown)");
      expect(kvb_seq_fork_at(m_, id, new_id(), 1), KVB_ERR_NO_SUCH_SEQUENCE, "fork_at(unknown)");
      break;
    case 4:
      if (!have) break;
      note(fmt("allocate existing %" PRId64, known));
      expect(kvb_seq_allocate(m_, known, &tok, 1, &cached), KVB_ERR_SEQUENCE_EXISTS, "allocate(existing)");
      break;
    case 5:
      if (!have) break;
      note(fmt("commit too much %" PRId64, known));
      {
        const MSeq& s = *model_.find(known);
        size_t too = s.tokens.size() - s.computed + 1 + rng_.below(3);
        expect(kvb_seq_commit(m_, known, too), model_.commit(known, too), "commit(too much)");
      }
      break;
    case 6:
      note("allocate / can_allocate of 0 tokens, NULL tokens");
      expect(kvb_seq_allocate(m_, new_id(), &tok, 0, &cached), KVB_ERR_INVALID_ARGUMENT, "allocate(n=0)");
      expect(kvb_seq_can_allocate(m_, &tok, 0, &cached), KVB_ERR_INVALID_ARGUMENT, "can_allocate(n=0)");
      expect(kvb_seq_allocate(m_, new_id(), nullptr, 3, &cached), KVB_ERR_INVALID_ARGUMENT, "allocate(NULL)");
      expect(kvb_seq_can_allocate(m_, &tok, 1, nullptr), KVB_ERR_INVALID_ARGUMENT, "can_allocate(NULL out)");
      break;
    case 7: {
      note("allocate_ex with bad options");
      kvb_seq_options so;
      kvb_seq_options_init(&so);
      uint32_t blocks[2] = {1, 1};
      uint64_t keys[2] = {1, 2};
      so.extra_key_blocks = blocks;
      so.extra_keys = keys;
      so.num_extra_keys = 2;  // not strictly increasing
      std::vector<int64_t> t(3 * cfg_.bs, 1);
      expect(kvb_seq_allocate_ex(m_, new_id(), t.data(), t.size(), &so, &cached), KVB_ERR_INVALID_ARGUMENT,
             "allocate_ex(bad extra keys)");
      kvb_seq_options_init(&so);
      so.sink_tokens = 3;  // sink without a window
      expect(kvb_seq_allocate_ex(m_, new_id(), t.data(), t.size(), &so, &cached), KVB_ERR_INVALID_ARGUMENT,
             "allocate_ex(sink without window)");
      kvb_seq_options_init(&so);
      so.has_cache_salt = 2;
      expect(kvb_seq_allocate_ex(m_, new_id(), t.data(), t.size(), &so, &cached), KVB_ERR_INVALID_ARGUMENT,
             "allocate_ex(has_cache_salt=2)");
      kvb_seq_options_init(&so);
      so.struct_size = 4;
      expect(kvb_seq_allocate_ex(m_, new_id(), t.data(), t.size(), &so, &cached), KVB_ERR_INVALID_ARGUMENT,
             "allocate_ex(struct_size 4)");
      break;
    }
    case 8: {
      note("block_hash out of range");
      uint64_t h;
      expect(kvb_block_hash(m_, -1, &h), KVB_ERR_INVALID_ARGUMENT, "block_hash(-1)");
      expect(kvb_block_hash(m_, static_cast<int32_t>(cfg_.N), &h), KVB_ERR_INVALID_ARGUMENT, "block_hash(N)");
      expect(kvb_block_hash(m_, 0, nullptr), KVB_ERR_INVALID_ARGUMENT, "block_hash(NULL)");
      break;
    }
    case 9: {
      int64_t d;
      if (!pick(&d, 1)) break;
      const std::vector<int32_t>& table = model_.find(d)->g[0].table;
      note(fmt("block_table too small %" PRId64, d));
      std::vector<int32_t> small(table.size(), -4);
      n = 0;
      expect(kvb_seq_block_table(m_, d, small.data(), table.size() - 1, &n), KVB_ERR_BUFFER_TOO_SMALL,
             "block_table(too small)");
      if (n != table.size()) fail(fmt("block_table too small reported %zu, want %zu", n, table.size()));
      for (int32_t v : small) if (v != -4) fail("failed block_table wrote entries");
      break;
    }
    case 10: {
      if (!have) break;
      note(fmt("fork onto itself / existing %" PRId64, known));
      expect(kvb_seq_fork(m_, known, known), model_.fork(known, known, 0, false), "fork(self)");
      int64_t other;
      if (pick(&other, 0) && other != known)
        expect(kvb_seq_fork_at(m_, known, other, 1), model_.fork(known, other, 1, true), "fork_at(existing)");
      break;
    }
    case 11: {
      int64_t d;
      if (!pick(&d, 1)) break;
      note(fmt("swap_in of device seq / rollback everything %" PRId64, d));
      expect(kvb_seq_swap_in(m_, d, buf, 2, &n), KVB_ERR_BAD_STATE, "swap_in(on device)");
      expect(kvb_seq_can_swap_in(m_, d, &a), KVB_ERR_BAD_STATE, "can_swap_in(on device)");
      size_t L = model_.find(d)->tokens.size();
      expect(kvb_seq_rollback(m_, d, L), model_.find(d)->tree.empty() ? KVB_ERR_INVALID_ARGUMENT : KVB_ERR_BAD_STATE,
             "rollback(all)");
      break;
    }
    case 12: {
      int64_t s;
      if (!pick(&s, 2)) break;
      note(fmt("device ops on swapped seq %" PRId64, s));
      expect(kvb_seq_block_table(m_, s, buf, 4, &n), KVB_ERR_BAD_STATE, "block_table(swapped)");
      expect(kvb_seq_commit(m_, s, 0), KVB_ERR_BAD_STATE, "commit(swapped)");
      expect(kvb_seq_append(m_, s, &tok, 1), KVB_ERR_BAD_STATE, "append(swapped)");
      expect(kvb_seq_can_append(m_, s, 1), KVB_ERR_BAD_STATE, "can_append(swapped)");
      expect(kvb_seq_rollback(m_, s, 1), KVB_ERR_BAD_STATE, "rollback(swapped)");
      expect(kvb_seq_set_window(m_, s, 4, 0), KVB_ERR_BAD_STATE, "set_window(swapped)");
      expect(kvb_seq_fork(m_, s, new_id()), KVB_ERR_BAD_STATE, "fork(swapped)");
      expect(kvb_seq_can_swap_out(m_, s, &a), KVB_ERR_BAD_STATE, "can_swap_out(swapped)");
      expect(kvb_seq_swap_out(m_, s, buf, 2, &n), KVB_ERR_BAD_STATE, "swap_out(swapped)");
      break;
    }
    default: {
      note("NULL arguments");
      expect(kvb_num_free_blocks(m_, nullptr), KVB_ERR_INVALID_ARGUMENT, "num_free_blocks(NULL)");
      expect(kvb_num_free_blocks(nullptr, &n), KVB_ERR_INVALID_ARGUMENT, "num_free_blocks(NULL manager)");
      expect(kvb_drain_copies(m_, buf, 2, nullptr), KVB_ERR_INVALID_ARGUMENT, "drain_copies(NULL)");
      if (have) expect(kvb_seq_append(m_, known, nullptr, 2), KVB_ERR_INVALID_ARGUMENT, "append(NULL)");
      break;
    }
  }
}

// Refusals that KV cache groups add: a group index out of range, the plain event drain of a manager
// with several groups (an event without its group would be ambiguous).
void Run::op_invalid_groups() {
  int64_t id;
  const uint32_t bad = num_groups() + static_cast<uint32_t>(rng_.below(3));
  int32_t buf[4] = {-4, -4, -4, -4};
  size_t n = 77;
  if (pick(&id, 1)) {
    note(fmt("block_table_group %" PRId64 " group %u (out of range)", id, bad));
    expect(kvb_seq_block_table_group(m_, id, bad, buf, 4, &n), KVB_ERR_INVALID_ARGUMENT, "block_table_group(bad group)");
    if (n != 77 || buf[0] != -4) fail("failed block_table_group wrote its outputs");
  }
  if (num_groups() > 1 && (cfg_.flags & KVB_CONFIG_EVENTS)) {
    note("drain_events with several groups");
    kvb_event ev[2];
    int64_t toks[64];
    expect(kvb_drain_events(m_, ev, 2, toks, 64, &n, nullptr), KVB_ERR_BAD_STATE, "drain_events(groups)");
  }
}

void Run::one_step() {
  if (cfg_.store) store_step_behaviour();
  size_t r = rng_.below(100);
  if (model_.seqs.empty() || r < 16) op_allocate();
  else if (r < 36) engine_step();
  else if (r < 50) rng_.chance(0.2) ? op_batch_append() : op_append();
  else if (r < 56) op_free();
  else if (r < 62) op_fork();
  else if (r < 65) (host_cache() && rng_.chance(0.5)) ? op_drain_host() : op_drain();
  else if (r < 69) op_rollback();
  else if (r < 73) rng_.chance(0.5) ? op_spec_decode() : op_tree();
  else if (r < 76) op_window();
  else if (r < 80) op_swap_out();
  else if (r < 84) op_swap_in();
  else if (r < 87) op_batch();
  else if (r < 89) op_reset();
  else if (r < 91) op_extra_key();
  else if (cfg_.groups && rng_.chance(0.3)) op_invalid_groups();
  else op_invalid();
  // Keep the population bounded so that tiny pools keep cycling.
  if (model_.seqs.size() > 12) op_free();
  if (cfg_.store && rng_.chance(0.15)) store_poll();  // write-through puts between allocations too
}


}  // namespace
