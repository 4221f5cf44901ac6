// Differential test of the block manager, the model (model.h): token trees as kvblock.h ("Token trees")
// defines them. A tree is appended as kvb_seq_append of its tokens; its commit moves the accepted path
// down (slot pairs group after group, path order), holds the blocks past the path that hold a source,
// then drops the rest as kvb_seq_rollback and commits the path as kvb_seq_commit: spelled here with
// the model's own rollback and commit, so the library's tree code is checked against the plain calls.
#pragma once

#include "model.h"

namespace {

std::vector<uint64_t> Model::tree_masks(const std::vector<int32_t>& parents) {
  std::vector<uint64_t> m(parents.size());
  for (size_t i = 0; i < parents.size(); ++i) {
    // Bit j: node j is node i or an ancestor, found by walking up (the library builds it top-down).
    for (int32_t a = static_cast<int32_t>(i); a >= 0; a = parents[static_cast<size_t>(a)]) m[i] |= uint64_t{1} << a;
  }
  return m;
}

std::vector<uint64_t> Model::mask_rows(const MSeq& s) const {
  const size_t q = s.tokens.size() - s.computed;
  if (!s.tree.empty()) return tree_masks(s.tree);
  std::vector<uint64_t> m(q, 0);
  if (q <= 64)
    for (size_t i = 0; i < q; ++i)
      for (size_t j = 0; j <= i; ++j) m[i] |= uint64_t{1} << j;
  return m;
}

kvb_status Model::append_tree(int64_t id, const std::vector<int64_t>& t, const std::vector<int32_t>& parents,
                              std::vector<int32_t>* depths) {
  MSeq* s = find(id);
  if (!s) return KVB_ERR_NO_SUCH_SEQUENCE;
  if (s->swapped || s->filling || !s->tree.empty() || s->computed != s->tokens.size()) return KVB_ERR_BAD_STATE;
  if (t.empty()) return KVB_OK;
  if (t.size() > 64) return KVB_ERR_INVALID_ARGUMENT;
  depths->assign(t.size(), 0);
  for (size_t i = 0; i < t.size(); ++i) {
    if (parents[i] < -1 || parents[i] >= static_cast<int32_t>(i)) return KVB_ERR_INVALID_ARGUMENT;
    (*depths)[i] = parents[i] < 0 ? 0 : (*depths)[static_cast<size_t>(parents[i])] + 1;
  }
  if (kvb_status st = append(id, t)) return st;
  find(id)->tree = parents;
  return KVB_OK;
}

kvb_status Model::commit_tree(int64_t id, const std::vector<int32_t>& path) {
  MSeq* s = find(id);
  if (!s) return KVB_ERR_NO_SUCH_SEQUENCE;
  if (s->swapped || s->filling || s->tree.empty()) return KVB_ERR_BAD_STATE;
  const size_t n = s->tree.size(), k = path.size();
  if (k > n) return KVB_ERR_INVALID_ARGUMENT;
  for (size_t j = 0; j < k; ++j) {
    if (path[j] < 0 || path[j] >= static_cast<int32_t>(n)) return KVB_ERR_INVALID_ARGUMENT;
    if (s->tree[static_cast<size_t>(path[j])] != (j == 0 ? -1 : path[j - 1])) return KVB_ERR_INVALID_ARGUMENT;
  }
  const size_t base = s->computed, nb = nblocks(base + k);
  std::vector<size_t> src_blocks;  // blocks of the sources that move
  for (size_t j = 0; j < k; ++j) {
    if (path[j] == static_cast<int32_t>(j)) continue;
    const size_t src = base + static_cast<size_t>(path[j]), dst = base + j;
    src_blocks.push_back(src / bs);
    s->tokens[dst] = s->tokens[src];  // in path order: no source is a position written before
  }
  for (const MTable& t : s->g)
    for (size_t j = 0; j < k; ++j) {
      if (path[j] == static_cast<int32_t>(j)) continue;
      const size_t src = base + static_cast<size_t>(path[j]), dst = base + j;
      slot_pending.emplace_back(static_cast<int64_t>(t.table[src / bs]) * bs + static_cast<int64_t>(src % bs),
                                static_cast<int64_t>(t.table[dst / bs]) * bs + static_cast<int64_t>(dst % bs));
    }
  for (size_t g = s->g.size(); g-- > 0;) {
    const MTable& t = s->g[g];
    for (size_t b = t.table.size(); b-- > nb;)
      if (std::find(src_blocks.begin(), src_blocks.end(), b) != src_blocks.end()) {
        ++blk[t.table[b]].ref;
        slot_held.push_back(t.table[b]);
      }
  }
  s->tree.clear();
  // Not refused where a widened window already lacks blocks (as the tree's append was not): the tree
  // must always be committable.
  if (kvb_status st = rollback(id, n - k, false)) throw Divergence(fmt("model: a tree's rollback failed (%s)", sname(st)));
  if (kvb_status st = commit(id, k)) throw Divergence(fmt("model: a tree's commit failed (%s)", sname(st)));
  return KVB_OK;
}

void Model::release_slot_copies() {
  slot_pending.clear();
  for (int32_t b : slot_held) release(b);
  slot_held.clear();
}

}  // namespace
