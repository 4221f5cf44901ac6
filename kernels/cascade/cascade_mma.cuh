// The tensor-core shared-prefix kernel (cascade_mma.cu) as its two callers see it: the CUDA decode with
// groups (cascade.cu: the shared part here, each member's own keys and the merge in cascade_own) and the
// CUDA prefill / extend with groups (cascade_prefill.cu: shared and own parts here, then a merge kernel).
#pragma once
#include <cstdint>

#include "../common/types.h"
#include "../prefill/prefill.cuh"

namespace kvb {
namespace kern {
namespace cuda {

constexpr int kCascadeMaxMembers = 512, kCascadeMaxGroups = 32;

// Grid (x: shared tiles then own tiles, y: kv head, z: key split). Every CTA writes, per row of its tile
// and head, one part (max in log2 units, sum, unnormalised acc) to b.ws_m / ws_l / ws_o at
// ctiles::part_index(ws row, head, ..., parts, part): parts [0, shared_splits) are the shared splits,
// [shared_splits, parts) the own splits.
struct CascadeMmaParams {
  PrefillParams b;  // b.query_start NULL: decode (row s is sequence s's one token); b.num_splits unused
  int num_groups, num_members;
  int shared_tiles;  // CTAs x < shared_tiles take shared tiles (an upper bound: surplus ones return)
  int own_tiles;     // then own tiles (prefill / extend; 0 at decode, where cascade_own does them)
  int shared_splits, own_splits, parts;
  int shared_split_tokens, own_split_tokens;  // multiples of the key tile
  int by_member;  // workspace row: 1 = the member's index in the description (decode), 0 = its query row
  int kernel;     // KVB_KERNEL_* of recorded faults
  int32_t shared_tokens[kCascadeMaxGroups];
  int16_t group_start[kCascadeMaxGroups + 1];
  int16_t group_lead[kCascadeMaxGroups];  // the member whose table the shared tiles read
  int16_t members[kCascadeMaxMembers];    // batch rows, group after group
};
static_assert(sizeof(CascadeMmaParams) <= 4096, "launch parameters are limited to 4 KB");

// Whether the tensor-core kernel takes this cache: fp16 / bf16, head_dim 64 / 128 / 256.
bool cascade_mma_supported(const Cache& c);
// The description's host arrays into p (num_groups .. members); the caller checked them
// (check_prefix_groups) and their limits.
void cascade_mma_describe(CascadeMmaParams& p, const kvb_prefix_groups& g, int64_t block_size);
// Key splits for `ctas` CTAs per split over at most max_tokens keys: enough splits for about two waves
// of an H100 (at most max_splits, none shorter than 512 keys), and the tokens per split (a multiple of
// the key tile).
void cascade_mma_splits(int64_t ctas, int64_t max_tokens, int64_t head_dim, int64_t max_splits, int* splits,
                        int* split_tokens);
// Launches the kernel on grid (shared_tiles + own_tiles, kv heads, max(shared_splits, own_splits));
// false, having launched nothing, when the device lacks the shared memory (the caller runs the plain kernel).
bool launch_cascade_mma(const CascadeMmaParams& p, const Cache& c, bool soft_cap, cudaStream_t stream);

// The checks of a description's host arrays against a batch of num_seqs rows (invalid_argument naming
// the bad value; `kernel` starts the message).
void check_prefix_groups(int64_t num_seqs, int64_t max_blocks, const kvb_prefix_groups& g, const char* kernel);

}  // namespace cuda
}  // namespace kern
}  // namespace kvb
