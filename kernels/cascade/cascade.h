// Shared-prefix ("cascade") attention: the validated form of kvb_prefix_groups and the CPU entry point
// that serves both decode and prefill / extend (kernels/cascade/cascade_cpu.cpp, kernels/cascade/cascade_capi.cpp).
#pragma once
#include <cstdint>

#include "../../abi/kvblock.h"
#include "../decode/decode.h"
#include "../prefill/prefill.h"
#include "../common/types.h"
#include "cascade_cost.h"

namespace kvb {
namespace kern {

struct PrefixGroups {
  int64_t num_groups = 0;
  const int32_t* group_start = nullptr;    // [num_groups + 1]
  const int32_t* members = nullptr;        // [group_start[num_groups]]
  const int32_t* shared_blocks = nullptr;  // [num_groups]
};

// One view of a decode or prefill call: sequence s owns query rows [row0(s), row0(s) + q_len(s)), row j
// at position seq_lens[s] - q_len(s) + j. Decode: query_start NULL, row s is sequence s's one token.
struct CascadeCall : AttnCall {
  const int32_t* query_start = nullptr;
  const uint64_t* tree_mask = nullptr;  // prefill only, and never with groups (kvb_prefill_args.tree_mask)
  bool skip_single_rows = false;        // sequences of q_len 1 are left to the caller (the decode kernel)
  const char* kernel = "";  // for messages

  int64_t row0(int64_t s) const { return query_start ? query_start[s] : s; }
  int64_t q_len(int64_t s) const { return query_start ? int64_t(query_start[s + 1]) - query_start[s] : 1; }
};

// A decode call (query_start NULL, "paged attention") or a prefill call ("prefill attention").
CascadeCall cascade_of(const AttnCall& a, const int32_t* query_start, const char* kernel);
// The description to use: NULL (plain kernel) when `pg` is NULL or has no groups, or when the cache is a
// CUDA or FP8 cache (no shared-prefix kernel there yet: the plain kernel gives the same results); else pg.
// pg's struct_size is checked in every case.
const kvb_prefix_groups* prefix_groups_to_use(const Cache& c, const kvb_prefix_groups* pg);

// The description for the CUDA shared-prefix decode and prefill / extend: pg when the cache is a CUDA
// cache that is not FP8 and pg has groups (struct_size checked); else NULL (FP8 caches: the plain kernels).
const kvb_prefix_groups* cuda_prefix_groups(const Cache& c, const kvb_prefix_groups* pg);

// What the CUDA launches give the cost model: the batch with every length at its bound,
// max_blocks_per_seq * block_size (seq_lens and query_start are device memory, never read on the host).
BatchShape bound_shape(const Cache& c, const AttnCall& a);

// CPU: checks `call` and `pg` (from prefix_groups_to_use) as the shared-prefix kernel does, keeps the
// groups the cost model expects to be faster (cascade_cost.h) and runs cpu::cascade_attention on them;
// false, having computed nothing, when it keeps none (the caller runs the plain kernel).
bool cpu_cascade(const Cache& c, const CascadeCall& call, const kvb_prefix_groups& pg);

namespace cuda {
// Workspace bytes the CUDA shared-prefix decode needs for this description (0: it would not run, the
// description being too large for its launch parameters; the plain kernel then runs). Checks the
// description's host arrays against the batch (invalid_argument naming the bad value).
size_t cascade_workspace(const Cache& c, const Attention& a, const kvb_prefix_groups& g);
// Runs the shared-prefix decode (kernels/cascade/cascade.cu) and returns true, or returns false having
// launched nothing when it does not apply (description too large, workspace smaller than
// cascade_workspace, a device without the shared memory): the caller then runs the plain kernel.
bool cascade_decode(const Cache& c, const Attention& a, const kvb_prefix_groups& g, void* workspace,
                    size_t workspace_size, void* stream);
// The same for prefill / extend (kernels/cascade/cascade_prefill.cu; fp16 / bf16 caches, head_dim 64 / 128
// / 256: 0 / false for any other cache, whose plain kernel then runs).
size_t cascade_prefill_workspace(const Cache& c, const Prefill& a, const kvb_prefix_groups& g);
bool cascade_prefill(const Cache& c, const Prefill& a, const kvb_prefix_groups& g, void* workspace,
                     size_t workspace_size, void* stream);
}  // namespace cuda

namespace cpu {
// Checks the inputs (as the plain kernels do) and the description against the batch, then computes
// every row: each group's shared prefix once for all its members' rows, each sequence's own keys, and
// the log-sum-exp merge. Throws invalid_argument naming the bad value.
void cascade_attention(const Cache& c, const CascadeCall& a, const kvb_prefix_groups& g);
// The same loops without groups: every sequence's rows against its own keys (the CPU prefill / extend
// kernel, kernels/prefill/prefill_cpu.cpp). The caller has checked the batch.
void rows_attention(const Cache& c, const CascadeCall& a);
// The code the last cascade_attention / rows_attention call (any thread) ran on: the simd::Isa value of
// its vector loops, and whether its row blocks of kAmxMinRows rows or more ran on AMX tiles; isa -1
// before the first call.
struct RowsPath {
  int isa;
  bool amx;
};
RowsPath last_rows_path();
// The checks of cascade_attention alone (the batch, then the description against it).
void check_prefix_groups(const Cache& c, const CascadeCall& a, const kvb_prefix_groups& g);
}  // namespace cpu

}  // namespace kern
}  // namespace kvb
