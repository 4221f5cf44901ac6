// Token trees (kvblock.h, "Token trees"): a draft tree appended after the committed tokens (node i at
// position num_computed + i), and the commit of one accepted root-to-leaf path, which moves the path's
// tokens to consecutive positions (slot copies the engine drains), drops the other nodes like a rollback
// and commits the path like kvb_seq_commit. Rejected nodes are never hashed, so the prefix index, the
// events and the store only ever see accepted tokens.
#include <algorithm>
#include <cinttypes>

#include "error.h"
#include "manager.h"

namespace kvb {

void Manager::refuse_pending_tree(const Sequence& s, const char* what) const {
  fail(Code::bad_state, "seq %" PRId64 " has a pending token tree of %u node%s: %s is refused until "
       "kvb_seq_commit_tree (k = 0 drops the whole tree)", s.id, s.tree_nodes, plural_s(s.tree_nodes), what);
}

void Manager::append_tree(int64_t id, const int64_t* tokens, const int32_t* parents, size_t n, int32_t* depths) {
  Sequence& s = device_seq(id);
  if (s.tree_nodes) refuse_pending_tree(s, "another kvb_seq_append_tree");
  if (s.num_computed != s.num_tokens)
    fail(Code::bad_state, "seq %" PRId64 ": %" PRIu64 " uncomputed token%s; a tree follows committed tokens only "
         "(commit or roll them back first)", id, s.num_tokens - s.num_computed, plural_s(s.num_tokens - s.num_computed));
  if (n == 0) return;
  if (n > kMaxTreeNodes)
    fail(Code::invalid_argument, "seq %" PRId64 ": a tree of %zu nodes; at most KVB_MAX_TREE_NODES (%u)", id, n,
         kMaxTreeNodes);
  int32_t depth[kMaxTreeNodes];
  for (size_t i = 0; i < n; ++i) {
    const int32_t p = parents[i];
    // Parents earlier than their child: no cycle is possible, and node order is a topological order.
    if (p < -1 || p >= static_cast<int32_t>(i))
      fail(Code::invalid_argument, "seq %" PRId64 ": parents[%zu] = %" PRId32 " is neither -1 (a root) nor an "
           "earlier node (0 .. %zu)", id, i, p, i == 0 ? size_t{0} : i - 1);
    depth[i] = p < 0 ? 0 : depth[p] + 1;
  }
  const size_t slot = static_cast<size_t>(&s - seqs_.pool.data());
  if (trees_.by_slot.size() <= slot) trees_.by_slot.resize(seqs_.pool.capacity());  // before any change
  append(id, tokens, n);  // blocks, copy-on-write and refusals exactly as an append of n tokens
  TreeNodes& t = trees_.by_slot[slot];
  for (size_t i = 0; i < n; ++i) t.parent[i] = static_cast<int8_t>(parents[i]);
  s.tree_nodes = static_cast<uint8_t>(n);
  if (depths) std::copy(depth, depth + n, depths);
}

void Manager::commit_tree(int64_t id, const int32_t* path, size_t k) {
  Sequence& s = device_seq(id);
  const uint32_t n = s.tree_nodes;
  if (n == 0) fail(Code::bad_state, "seq %" PRId64 " has no pending token tree (kvb_seq_append_tree)", id);
  if (k > n) fail(Code::invalid_argument, "seq %" PRId64 ": a path of %zu nodes in a tree of %u", id, k, n);
  const TreeNodes& t = trees_.by_slot[static_cast<size_t>(&s - seqs_.pool.data())];
  for (size_t j = 0; j < k; ++j) {
    if (path[j] < 0 || path[j] >= static_cast<int32_t>(n))
      fail(Code::invalid_argument, "seq %" PRId64 ": path[%zu] = %" PRId32 " is not a node of the tree (0 .. %u)", id, j,
           path[j], n - 1);
    const int32_t want = j == 0 ? -1 : path[j - 1];
    if (t.parent[path[j]] != want) {
      if (j == 0)
        fail(Code::invalid_argument, "seq %" PRId64 ": path[0] = %" PRId32 " is not a root (its parent is node %d)", id,
             path[0], t.parent[path[0]]);
      fail(Code::invalid_argument, "seq %" PRId64 ": path[%zu] = %" PRId32 " is not a child of path[%zu] = %" PRId32
           " (its parent is %d)", id, j, path[j], j - 1, path[j - 1], t.parent[path[j]]);
    }
  }
  const uint64_t base = s.num_computed, len = base + k;
  const uint32_t nb = blocks_for(len, bs_);
  // Nodes before the first one out of place stay where they are (a chain needs no copy at all).
  size_t moved = 0;
  while (moved < k && path[moved] == static_cast<int32_t>(moved)) ++moved;
  // Reserve everything the changes below may grow (the window's link too), so that nothing fails half-way.
  const size_t copies = (k - moved) * groups_.count;
  const size_t held = static_cast<size_t>(s.num_blocks() - nb) * groups_.count;
  if (trees_.copies.size() + copies > trees_.copies.capacity())
    trees_.copies.reserve(std::max<size_t>(64, 2 * (trees_.copies.size() + copies)));
  if (trees_.held.size() + held > trees_.held.capacity())
    trees_.held.reserve(std::max<size_t>(16, 2 * (trees_.held.size() + held)));
  for (GroupTable& g : s.groups) reserve_window_link(g, g.window);

  // The path's tokens move down in path order: node path[j] >= j, and no later move reads a position an
  // earlier one wrote (pairs may be run in list order).
  for (GroupTable& g : s.groups)
    for (size_t j = moved; j < k; ++j) {
      const uint64_t src = base + static_cast<uint64_t>(path[j]), dst = base + j;
      const int32_t sb = g.table[src / bs_], db = g.table[dst / bs_];
      device_.pool.tokens(db)[dst % bs_] = device_.pool.tokens(sb)[src % bs_];
      trees_.copies.emplace_back(static_cast<int64_t>(sb) * bs_ + static_cast<int64_t>(src % bs_),
                                 static_cast<int64_t>(db) * bs_ + static_cast<int64_t>(dst % bs_));
    }
  // Then the tree's tail goes as a rollback would take it (groups last to first, last block first); a
  // block past the new end that holds a source is kept until the copies are drained.
  for (uint32_t gi = groups_.count; gi-- > 0;) {
    GroupTable& g = s.groups[gi];
    for (uint32_t b = s.num_blocks(); b-- > nb;) {
      bool source = false;
      for (size_t j = moved; j < k && !source; ++j) source = (base + static_cast<uint64_t>(path[j])) / bs_ == b;
      if (!source) continue;
      ++device_.pool.meta(g.table[b]).ref;  // held by the table too: never in the free queue
      trees_.held.push_back(g.table[b]);
    }
    rollback_apply(s, g, len, nb, g.num_hashed, g.chain);
  }
  s.num_tokens = len;
  s.tree_nodes = 0;
  commit_apply(s, k);
}

void Manager::release_slot_copies() {
  trees_.copies.clear();
  for (int32_t b : trees_.held) release_block(b);
  trees_.held.clear();
}

void Manager::write_tree_mask(const Sequence& s, uint64_t* out) const {
  const uint64_t q = s.num_tokens - s.num_computed;
  if (s.tree_nodes) {
    tree_masks(trees_.by_slot[static_cast<size_t>(&s - seqs_.pool.data())], s.tree_nodes, out);
  } else if (q <= kMaxTreeNodes) {
    for (uint32_t i = 0; i < q; ++i) out[i] = causal_mask(i);
  } else {
    std::fill(out, out + q, uint64_t{0});  // longer than a mask word: the kernels treat it as causal
  }
}

void Manager::check_tree_invariants(std::vector<int32_t>& refs) const {
#define KVB_TREE_INVARIANT(cond, ...) \
  do {                                \
    if (!(cond)) fail(Code::internal, "invariant violated: " __VA_ARGS__); \
  } while (0)
  for (const Sequence& s : seqs_.pool) {
    if (!s.live || !s.tree_nodes) continue;
    const size_t slot = static_cast<size_t>(&s - seqs_.pool.data());
    KVB_TREE_INVARIANT(s.tree_nodes <= kMaxTreeNodes && slot < trees_.by_slot.size(),
                       "seq %" PRId64 ": a tree of %u nodes without its shape", s.id, s.tree_nodes);
    KVB_TREE_INVARIANT(!s.swapped && s.num_tokens - s.num_computed == s.tree_nodes,
                       "seq %" PRId64 ": a tree of %u nodes but %" PRIu64 " uncomputed tokens%s", s.id, s.tree_nodes,
                       s.num_tokens - s.num_computed, s.swapped ? " (swapped out)" : "");
    const TreeNodes& t = trees_.by_slot[slot];
    for (uint32_t i = 0; i < s.tree_nodes; ++i)
      KVB_TREE_INVARIANT(t.parent[i] >= -1 && t.parent[i] < static_cast<int32_t>(i),
                         "seq %" PRId64 ": tree node %u has parent %d", s.id, i, t.parent[i]);
  }
  const uint32_t N = device_.pool.num_blocks();
  for (int32_t b : trees_.held) {
    KVB_TREE_INVARIANT(b >= 0 && static_cast<uint32_t>(b) < N, "a slot copy holds block id %d", b);
    ++refs[b];
  }
  const int64_t slots = static_cast<int64_t>(N) * bs_;
  for (const SlotPair& p : trees_.copies)
    KVB_TREE_INVARIANT(p.first >= 0 && p.first < slots && p.second >= 0 && p.second < slots && p.first != p.second,
                       "pending slot copy (%" PRId64 ", %" PRId64 ") out of range or in place", p.first, p.second);
  KVB_TREE_INVARIANT(!trees_.copies.empty() || trees_.held.empty(), "%zu blocks held without a pending slot copy",
                     trees_.held.size());
#undef KVB_TREE_INVARIANT
}

}  // namespace kvb
