// Paged decode attention: the validated form of kvb_attention_args, the split-K plan shared by the
// workspace query and the launch, and the two back ends (kernels/decode/decode_capi.cpp is the C boundary).
#pragma once
#include <cstddef>
#include <cstdint>

#include "../../abi/kvblock.h"
#include "../common/types.h"

namespace kvb {
namespace kern {

// Split-K plan: partitions of partition_size tokens; num_partitions == 1 means a single pass.
struct AttnPlan {
  int64_t partition_size = 0;
  int64_t num_partitions = 1;
  size_t workspace_bytes = 0;  // num_seqs*num_q_heads*num_partitions*(head_dim+2) floats when split
};

struct Attention : AttnCall {
  AttnPlan plan;
  // The decode rows of a prefill call (cpu::prefill_attention): sequence s's query and output row is
  // q_rows[s] (NULL: s).
  const int32_t* q_rows = nullptr;
  int64_t q_row(int64_t s) const { return q_rows ? q_rows[s] : s; }
};

// Workspace layout when split: m[seq][head][part], l[seq][head][part], acc[seq][head][part][head_dim].
// m is the running max in log2 units (logit * log2(e)), l the sum of exp2(s - m), acc = sum(p*v)/l.
// Throws invalid_argument when the workspace size would not fit size_t.
AttnPlan plan_attention(int64_t num_seqs, int64_t num_q_heads, int64_t num_kv_heads, int64_t head_dim,
                        int64_t block_size, int64_t max_blocks);

// Checks args against the cache (validate.cpp; throws invalid_argument / buffer_too_small naming the
// bad field). need_pointers false: shapes only (workspace query).
Attention read_attention(const Cache& c, const kvb_attention_args* args, bool need_pointers);

namespace cpu {
void paged_attention(const Cache& c, const Attention& a);
// The code the last CPU paged_attention call (any thread) ran its items on: the simd::Isa value, and
// whether they took the bf16 pair dot products (decode_pairs_cpu.inc); isa -1 before the first call.
struct DecodePath {
  int isa;
  bool pairs;
};
DecodePath last_decode_path();
}
namespace cuda {
void paged_attention(const Cache& c, const Attention& a, void* stream);  // unsupported without nvcc
}

}  // namespace kern
}  // namespace kvb
