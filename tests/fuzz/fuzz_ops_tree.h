// The fuzz target's token-tree step (kvblock.h, "Token trees"), included only by fuzz_capi.cpp: a tree
// decoded from the input (any parents, any size, NULL arrays) is appended, its depths and mask rows
// checked, plain calls on the sequence are refused while it is pending (changing nothing), and a decoded
// path (or a corrupted one, refused without a change, then the whole tree dropped) is committed; the
// drained slot pairs must be exactly the moves of the path through the tables read before the commit, and
// kvb_copy_slots running them must leave the path's K/V in place (fuzz_copy_slots.h).
// The model then holds the accepted tokens, committed, as an append, a rollback and a commit would.
#pragma once
#include "fuzz_copy_slots.h"
#include "fuzz_model.h"
#include "kvbt_state.h"

namespace kvbfuzz {

// A refused call must change nothing (the driver's own snapshot spans the whole step).
inline void expect_refused(kvb_manager* m, const Model& md, kvb_status got, kvb_status want, const char* what,
                           const kvbt_state& before) {
  REQUIRE(got == want, "%s: %s, model %s", what, kvb_status_string(got), kvb_status_string(want));
  if (got == KVB_OK) return;
  std::vector<int64_t> ids;
  for (const auto& e : md.seqs) ids.push_back(e.first);
  kvbt_state after{};
  kvbt_state_take(m, ids.data(), ids.size(), 0, &after);
  REQUIRE(kvbt_state_diff(&before, &after) < 0, "refused %s changed the manager", what);
  kvbt_state_free(&after);
}

inline void Step::tree() {
  const int64_t id = pick_id(r);
  uint8_t b = r.u8();
  const size_t n = b >= 250 ? 65 + (b & 1) : b % 17;
  make_tokens(r, toks, n);
  std::vector<int32_t> parents(n);
  bool parents_ok = true;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t p = r.u8();
    // Mostly valid (-1 .. i - 1); now and then the node itself, a later node or below -1.
    parents[i] = p >= 248 ? (p & 1 ? static_cast<int32_t>(i + (p & 2 ? 1 : 0)) : -2) : static_cast<int32_t>(p % (i + 1)) - 1;
    parents_ok = parents_ok && parents[i] >= -1 && parents[i] < static_cast<int32_t>(i);
  }
  const uint8_t f = r.u8();
  const bool null_tokens = n > 0 && f == 0xff, null_parents = n > 0 && f == 0xfe;
  auto it = md.seqs.find(id);
  const bool live = it != md.seqs.end();
  const kvb_status ca = kvb_seq_can_append(m, id, n);
  std::vector<int32_t> depths(n + 1, -9);
  if (trace) std::fprintf(stderr, "  append_tree id %" PRId64 " n %zu parents ok %d\n", id, n, parents_ok);
  s = kvb_seq_append_tree(m, id, null_tokens ? nullptr : toks.data(), null_parents ? nullptr : parents.data(), n,
                          f & 0x10 ? nullptr : depths.data());
  predicted = true;
  kvb_status want = KVB_OK;
  if (null_tokens || null_parents) want = KVB_ERR_INVALID_ARGUMENT;
  else if (!live) want = KVB_ERR_NO_SUCH_SEQUENCE;
  else if (it->second.swapped || it->second.computed != it->second.toks.size()) want = KVB_ERR_BAD_STATE;
  else if (n > 0 && (n > KVB_MAX_TREE_NODES || !parents_ok)) want = KVB_ERR_INVALID_ARGUMENT;
  else if (ca != KVB_OK) want = KVB_ERR_OUT_OF_BLOCKS;
  REQUIRE(s == want, "append_tree: %s, model %s", kvb_status_string(s), kvb_status_string(want));
  if (s != KVB_OK || n == 0) return;
  MSeq& q = it->second;
  const uint64_t c = q.computed;
  md.appended(q, tables_of(m, md, id));
  q.toks.insert(q.toks.end(), toks.begin(), toks.end());
  // The blocks the tree took may have been evicted to the host level: those offloads run before the forward
  // step writes the nodes' K/V (the commit below stands for that step).
  drain_host_all(m, md);
  // Depths, and the mask rows as the export gives them.
  std::vector<uint64_t> mask(n + 1, 0xabc);
  for (size_t i = 0; i < n; ++i) {
    const int32_t p = parents[i];
    mask[i] = (p < 0 ? 0 : mask[static_cast<size_t>(p)]) | (uint64_t{1} << i);
    if (!(f & 0x10))
      REQUIRE(depths[i] == (p < 0 ? 0 : depths[static_cast<size_t>(p)] + 1), "append_tree: depth of node %zu", i);
  }
  {
    std::vector<uint64_t> got(n + 1, 0xdef);
    kvb_batch bt;
    kvb_batch_init(&bt);
    bt.tree_mask = got.data();
    bt.slot_capacity = n;
    REQUIRE(kvb_batch_export(m, &id, 1, &bt) == KVB_OK && bt.num_slots == n, "export of a tree: %s", kvb_last_error());
    for (size_t i = 0; i < n; ++i) REQUIRE(got[i] == mask[i], "tree_mask[%zu]", i);
    REQUIRE(got[n] == 0xdef, "export wrote past the tree mask");
  }
  // While pending, the plain calls are refused and change nothing.
  std::vector<int64_t> ids;
  for (const auto& e : md.seqs) ids.push_back(e.first);
  kvbt_state before{};
  kvbt_state_take(m, ids.data(), ids.size(), 0, &before);
  const int64_t one = 3;
  int32_t pairs32[64];
  size_t np = 0;
  switch (f & 7) {
    case 0: expect_refused(m, md, kvb_seq_commit(m, id, 1), KVB_ERR_BAD_STATE, "commit(tree)", before); break;
    case 1: expect_refused(m, md, kvb_seq_append(m, id, &one, 1), KVB_ERR_BAD_STATE, "append(tree)", before); break;
    case 2: expect_refused(m, md, kvb_seq_rollback(m, id, 1), KVB_ERR_BAD_STATE, "rollback(tree)", before); break;
    case 3: expect_refused(m, md, kvb_seq_fork(m, id, 77), KVB_ERR_BAD_STATE, "fork(tree)", before); break;
    case 4: expect_refused(m, md, kvb_seq_swap_out(m, id, pairs32, 32, &np), KVB_ERR_BAD_STATE, "swap_out(tree)", before); break;
    case 5: expect_refused(m, md, kvb_seq_append_tree(m, id, toks.data(), parents.data(), 1, nullptr), KVB_ERR_BAD_STATE,
                           "append_tree(tree)", before); break;
    default: break;
  }
  // A path: from a decoded root down decoded children; maybe corrupted.
  std::vector<int32_t> path;
  const uint8_t k_byte = r.u8();
  if (k_byte % 8) {
    std::vector<int32_t> next;
    for (int32_t i = 0; i < static_cast<int32_t>(n); ++i)
      if (parents[static_cast<size_t>(i)] < 0) next.push_back(i);
    while (!next.empty() && path.size() < k_byte % 8 * 2) {
      path.push_back(next[r.u8() % next.size()]);
      next.clear();
      for (int32_t i = path.back() + 1; i < static_cast<int32_t>(n); ++i)
        if (parents[static_cast<size_t>(i)] == path.back()) next.push_back(i);
    }
  }
  bool path_ok = true;
  if (k_byte >= 0xe0 && !path.empty()) {
    path[r.u8() % path.size()] = static_cast<int32_t>(r.u8() % (n + 2)) - 1;
    for (size_t j = 0; j < path.size(); ++j)
      path_ok = path_ok && path[j] >= 0 && path[j] < static_cast<int32_t>(n) &&
                parents[static_cast<size_t>(path[j])] == (j ? path[j - 1] : -1);
  }
  const std::vector<std::vector<int32_t>> tables = tables_of(m, md, id);
  if (trace) std::fprintf(stderr, "  commit_tree id %" PRId64 " k %zu path ok %d\n", id, path.size(), path_ok);
  if (!path_ok) {
    kvbt_state_take(m, ids.data(), ids.size(), 0, &before);
    expect_refused(m, md, kvb_seq_commit_tree(m, id, path.data(), path.size()), KVB_ERR_INVALID_ARGUMENT,
                   "commit_tree(not a path)", before);
    path.clear();  // then the whole tree is dropped
  }
  kvbt_state_free(&before);
  s = kvb_seq_commit_tree(m, id, path.data(), path.size());
  REQUIRE(s == KVB_OK, "commit_tree: %s", kvb_status_string(s));
  // The slot pairs: every group's moves in path order, through the tables before the commit.
  std::vector<int64_t> want_pairs;
  for (const std::vector<int32_t>& t : tables)
    for (size_t j = 0; j < path.size(); ++j) {
      if (path[j] == static_cast<int32_t>(j)) continue;
      for (uint64_t pos : {c + static_cast<uint64_t>(path[j]), c + j})
        want_pairs.push_back(static_cast<int64_t>(t[pos / bs]) * bs + static_cast<int64_t>(pos % bs));
    }
  std::vector<int64_t> pairs(want_pairs.size() + 2, -3);
  REQUIRE(kvb_drain_slot_copies(m, pairs.data(), want_pairs.size() / 2, &np) == KVB_OK, "drain_slot_copies: %s",
          kvb_last_error());
  REQUIRE(np * 2 == want_pairs.size(), "drain_slot_copies: %zu pairs, model %zu", np, want_pairs.size() / 2);
  for (size_t i = 0; i < want_pairs.size(); ++i) REQUIRE(pairs[i] == want_pairs[i], "slot pair entry %zu", i);
  check_slot_copies(md.nblocks, bs, tables, c, toks, path, pairs, np, (k_byte >> 3) & 3u, trace);
  for (size_t j = 0; j < path.size(); ++j) q.toks[c + j] = q.toks[c + static_cast<uint64_t>(path[j])];
  q.toks.resize(c + path.size());
  const uint32_t nb = static_cast<uint32_t>((q.toks.size() + bs - 1) / bs);
  for (auto& rel : q.released) rel.erase(rel.lower_bound(nb), rel.end());
  md.commit(q, tables, q.toks.size());
}

}  // namespace kvbfuzz
