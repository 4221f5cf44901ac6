// Token trees (kvblock.h, "Token trees"): the pending draft tree of a sequence and the slot copies that
// compact an accepted path. A tree is pending between kvb_seq_append_tree and kvb_seq_commit_tree; its
// nodes are then exactly the sequence's uncomputed tokens, node i at position num_computed + i.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

namespace kvb {

constexpr uint32_t kMaxTreeNodes = 64;  // KVB_MAX_TREE_NODES: one mask word per node

// One pending tree's shape, kept per pooled sequence slot (Sequence::tree_nodes says how many are valid).
struct TreeNodes {
  int8_t parent[kMaxTreeNodes];  // -1: a root (child of the last committed token), else an earlier node
};

using SlotPair = std::pair<int64_t, int64_t>;  // (src slot, dst slot): block * block_size + offset

struct TreeState {
  std::vector<TreeNodes> by_slot;  // indexed by the sequence's slot in the manager's sequence pool
  // Compaction copies not yet drained, in the order they must run (a later pair may overwrite an earlier
  // pair's source, never the reverse).
  std::vector<SlotPair> copies;
  // Blocks past an accepted path's end that hold a pending copy's source: one reference each until the
  // copies are drained (then released in this order), so that no other sequence can reuse them first.
  std::vector<int32_t> held;
};

// Ancestor-or-self bits of every node: mask[i] has bit j set iff node j is node i or one of its ancestors.
inline void tree_masks(const TreeNodes& t, uint32_t n, uint64_t* mask) {
  for (uint32_t i = 0; i < n; ++i) mask[i] = (t.parent[i] < 0 ? 0 : mask[t.parent[i]]) | (uint64_t{1} << i);
}

// Causal rows of a chain of q tokens (q <= 64): row i sees rows 0..i.
inline uint64_t causal_mask(uint32_t row) { return row >= 63 ? ~uint64_t{0} : (uint64_t{2} << row) - 1; }

}  // namespace kvb
