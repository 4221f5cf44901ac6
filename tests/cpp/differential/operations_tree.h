// Differential test of the block manager: the token-tree operations (kvblock.h, "Token trees"). A random
// tree (chains, bushes, single nodes, now and then an invalid parent or too many nodes) is appended,
// its nodes' K/V written at the exported slots, its mask rows checked in a batch with other sequences,
// and then (at once, or steps later, the sequence refusing the plain calls meanwhile) a random accepted
// path, now and then not a path, is committed; the drained slot pairs are checked against the model's
// and run on the simulated KV store, so the comparison after the step reads every accepted token back
// through the block table at its new position.
#pragma once

#include <algorithm>
#include <cinttypes>
#include <vector>

#include "run.h"

namespace {

void Run::check_tree_masks(const std::vector<int64_t>& ids) {
  std::vector<uint64_t> want;
  for (int64_t id : ids) {
    std::vector<uint64_t> rows = model_.mask_rows(*model_.find(id));
    want.insert(want.end(), rows.begin(), rows.end());
  }
  const size_t cap = want.size() + rng_.below(3);
  std::vector<uint64_t> mask(cap + 1, 0xdeadULL);
  kvb_batch b;
  kvb_batch_init(&b);
  b.tree_mask = mask.data();
  b.slot_capacity = cap;
  expect(kvb_batch_export(m_, ids.data(), ids.size(), &b), KVB_OK, "batch_export (tree mask)");
  for (size_t r = 0; r < cap; ++r) {
    const uint64_t w = r < want.size() ? want[r] : 0;
    if (mask[r] != w) fail(fmt("tree_mask[%zu] = %#" PRIx64 ", model %#" PRIx64, r, mask[r], w));
  }
  if (mask[cap] != 0xdeadULL) fail("batch_export wrote past the tree mask's capacity");
}

void Run::drain_and_run_slot_copies() {
  const size_t want = model_.slot_pending.size();
  std::vector<int64_t> pairs(2 * want + 2, -7);
  size_t np = 99;
  if (want > 0 && rng_.chance(0.2)) {  // too small: nothing drained, the size reported
    expect(kvb_drain_slot_copies(m_, pairs.data(), want - 1, &np), KVB_ERR_BUFFER_TOO_SMALL, "drain_slot_copies");
    if (np != want) fail(fmt("drain_slot_copies reported %zu pairs, model %zu", np, want));
  }
  expect(kvb_drain_slot_copies(m_, pairs.data(), want + 1, &np), KVB_OK, "drain_slot_copies");
  if (np != want) fail(fmt("drain_slot_copies gave %zu pairs, model %zu", np, want));
  for (size_t i = 0; i < np; ++i) {
    const auto& p = model_.slot_pending[i];
    if (pairs[2 * i] != p.first || pairs[2 * i + 1] != p.second)
      fail(fmt("slot pair %zu is (%" PRId64 ",%" PRId64 "), model (%" PRId64 ",%" PRId64 ")", i, pairs[2 * i],
               pairs[2 * i + 1], p.first, p.second));
    content_[static_cast<size_t>(p.second)] = content_[static_cast<size_t>(p.first)];  // in list order
  }
  if (pairs[2 * np] != -7) fail("drain_slot_copies wrote past the pairs it reported");
  g_act.slot_pairs += np;
  model_.release_slot_copies();
}

void Run::commit_tree(int64_t id) {
  const std::vector<int32_t> parents = model_.find(id)->tree;
  const int32_t n = static_cast<int32_t>(parents.size());
  std::vector<int32_t> path;
  if (!rng_.chance(0.1)) {  // k = 0 otherwise: the whole tree dropped
    std::vector<int32_t> roots;
    for (int32_t i = 0; i < n; ++i)
      if (parents[static_cast<size_t>(i)] < 0) roots.push_back(i);
    path.push_back(roots[rng_.below(roots.size())]);
    while (rng_.chance(0.8)) {
      std::vector<int32_t> kids;
      for (int32_t i = path.back() + 1; i < n; ++i)
        if (parents[static_cast<size_t>(i)] == path.back()) kids.push_back(i);
      if (kids.empty()) break;
      path.push_back(kids[rng_.below(kids.size())]);
    }
  }
  if (rng_.chance(0.08)) {  // not a path: a wrong node somewhere (the model says whether it still is one)
    const size_t at = rng_.below(path.size() + 1);
    const int32_t bad = static_cast<int32_t>(rng_.below(static_cast<uint64_t>(n) + 2)) - 1;
    if (at == path.size()) path.push_back(bad);
    else path[at] = bad;
  }
  note(fmt("commit_tree %" PRId64 " path %s", id, vec_str(path).c_str()));
  const kvb_status st = kvb_seq_commit_tree(m_, id, path.empty() ? nullptr : path.data(), path.size());
  expect(st, model_.commit_tree(id, path), "commit_tree");
  if (st == KVB_OK) drain_and_run_slot_copies();  // right after the commit, as kvblock.h says
}

void Run::op_tree() {
  int64_t id;
  if (!pick(&id, 1)) return;
  if (!model_.find(id)->tree.empty()) {
    commit_tree(id);
    return;
  }
  const size_t n = rng_.chance(0.03) ? 65 : rng_.range(1, 12);
  std::vector<int32_t> parents(n);
  const double chain = rng_.chance(0.3) ? 0.9 : 0.3;
  for (size_t i = 0; i < n; ++i) {
    if (i == 0 || rng_.chance(0.2)) parents[i] = -1;
    else if (rng_.chance(chain)) parents[i] = static_cast<int32_t>(i - 1);
    else parents[i] = static_cast<int32_t>(rng_.below(i));
  }
  if (rng_.chance(0.04)) {  // itself, a later node (a cycle could follow) or below -1
    const size_t i = rng_.below(n);
    const uint64_t kind = rng_.below(3);
    parents[i] = kind == 0 ? static_cast<int32_t>(i) : kind == 1 ? static_cast<int32_t>(i + 1) : -2;
  }
  std::vector<int64_t> t = gen_tokens(n);
  std::vector<int32_t> depths(n, -5), want_depths;
  note(fmt("append_tree %" PRId64 " %s parents %s", id, vec_str(t).c_str(), vec_str(parents).c_str()));
  const kvb_status st = kvb_seq_append_tree(m_, id, t.data(), parents.data(), n, depths.data());
  expect(st, model_.append_tree(id, t, parents, &want_depths), "append_tree");
  if (st != KVB_OK) return;
  if (depths != want_depths) fail(fmt("append_tree depths %s, model %s", vec_str(depths).c_str(), vec_str(want_depths).c_str()));
  drain_and_run_copies();  // a copy-on-write of the shared last block runs before the nodes' K/V
  std::vector<std::vector<int64_t>> sm(num_groups());
  for (uint32_t g = 0; g < num_groups(); ++g) sm[g] = batch_export({id}, 0, n, false, false, false, true, g);
  write_kv(sm, 0, t, 0, n);
  std::vector<int64_t> ids{id};
  for (const auto& kv : model_.seqs)
    if (kv.first != id && !kv.second.swapped && rng_.chance(0.3)) ids.push_back(kv.first);
  for (size_t i = ids.size(); i > 1; --i) std::swap(ids[i - 1], ids[rng_.below(i)]);
  check_tree_masks(ids);
  if (rng_.chance(0.7)) commit_tree(id);  // else it stays pending: the plain calls refuse it meanwhile
}

}  // namespace
