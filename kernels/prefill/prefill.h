// Paged prefill / extend attention: the validated internal form of kvb_prefill_args, the work plan
// shared by the workspace query and the launch, and the two back ends.
#pragma once
#include <cstddef>
#include <cstdint>

#include "../../abi/kvblock.h"
#include "../common/types.h"

namespace kvb {
namespace kern {

// Packed query rows (token, query head of the GQA group) per CUDA tile, and the CUDA key tile (tokens:
// 32 from D 128 up, where two m-tiles of O per warp leave no registers for a 64-key S).
constexpr int64_t kPrefillTileRows = 128;
// Longest q_len whose rows follow the tree mask (one 64-bit word per row); longer ones are causal.
constexpr int64_t kTreeMaxTokens = 64;
inline int64_t prefill_key_tile(int64_t head_dim) { return head_dim >= 128 ? 32 : 64; }

// Key-range split (CUDA only): num_splits partitions of split_tokens tokens each; 1 = single pass.
struct PrefillPlan {
  int64_t num_tiles = 0;     // query tiles per kv head: floor(total_q * group / kPrefillTileRows) + num_seqs
  int64_t num_splits = 1;
  int64_t split_tokens = 0;  // a multiple of the key tile
  size_t workspace_bytes = 0;  // total_q * num_q_heads * num_splits * (head_dim + 2) floats when split
};

// q / out rows are query tokens; seq_lens include the new tokens.
struct Prefill : AttnCall {
  int64_t total_q = 0;
  const int32_t* query_start = nullptr;  // [num_seqs + 1]
  const uint64_t* tree_mask = nullptr;    // [total_q] or NULL (kvb_prefill_args.tree_mask)
  bool allow_tf32 = false;  // fp32 caches on CUDA: TF32 tensor cores allowed
  PrefillPlan plan;
};

// Workspace layout when split: m[row][head][split], l[...], acc[row][head][split][head_dim], where row
// is the query row (0..total_q); m in log2 units, acc normalised by l (as the decode workspace).
PrefillPlan plan_prefill(const Cache& c, int64_t num_seqs, int64_t num_q_heads, int64_t max_blocks, int64_t total_q);

// Checks args against the cache (throws invalid_argument / buffer_too_small naming the bad field).
// need_pointers false: shapes only (workspace query).
Prefill read_prefill(const Cache& c, const kvb_prefill_args* args, bool need_pointers);

namespace cpu {
void prefill_attention(const Cache& c, const Prefill& a);
}
namespace cuda {
void prefill_attention(const Cache& c, const Prefill& a, void* stream);  // unsupported without nvcc
}

}  // namespace kern
}  // namespace kvb
