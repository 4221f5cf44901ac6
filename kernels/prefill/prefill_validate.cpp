// Argument checking and work plan of kvb_prefill_attention (host-side only: the arrays query_start,
// seq_lens and block_tables are checked by the back ends, the CPU before it writes, CUDA on the device).
// Strides and extents go through validate.h's overflow-checked helpers, as every kernel argument does.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "../../libkvblock/capi_guard.h"
#include "../../libkvblock/capi_struct.h"
#include "prefill.h"
#include "../common/validate.h"

namespace kvb {
namespace kern {

PrefillPlan plan_prefill(const Cache& c, int64_t num_seqs, int64_t num_q_heads, int64_t max_blocks, int64_t total_q) {
  PrefillPlan p;
  const int64_t group = num_q_heads / c.num_kv_heads;
  p.num_tiles = total_q * group / kPrefillTileRows + num_seqs;
  const int64_t max_ctx = max_blocks * c.block_size;
  const int64_t bn = prefill_key_tile(c.head_dim);
  p.split_tokens = (max_ctx + bn - 1) / bn * bn;
  // The CPU threads over query tiles and kv heads, one pass per item; CUDA fp32 (CUDA cores, one warp
  // per query row and head) does not split either.
  if (!c.cuda || c.dtype == Dtype::f32) return p;
  // Split the keys while the grid has fewer than 1024 CTAs and every partition keeps >= 1024 tokens:
  // few query rows over a long cache (decode-heavy batches) then still fill the GPU. Shapes only, so
  // the workspace query and the launch agree.
  const int64_t ctas = p.num_tiles * c.num_kv_heads;
  while (p.num_splits < 32 && ctas * p.num_splits < 1024 && max_ctx >= p.num_splits * 2 * 1024) p.num_splits *= 2;
  if (p.num_splits == 1) return p;
  const int64_t per = (max_ctx + p.num_splits - 1) / p.num_splits;
  p.split_tokens = (per + bn - 1) / bn * bn;
  p.num_splits = (max_ctx + p.split_tokens - 1) / p.split_tokens;
  if (p.num_splits > 1) {
    uint64_t bytes = 4 * uint64_t(c.head_dim + 2);
    for (int64_t f : {total_q, num_q_heads, p.num_splits})
      if (__builtin_mul_overflow(bytes, uint64_t(f), &bytes) || bytes > uint64_t(SIZE_MAX))
        fail(Code::invalid_argument, "args: the prefill workspace for %lld query rows x %lld heads x %lld key splits "
             "does not fit size_t", (long long)total_q, (long long)num_q_heads, (long long)p.num_splits);
    p.workspace_bytes = size_t(bytes);
  }
  return p;
}

Prefill read_prefill(const Cache& c, const kvb_prefill_args* args, bool need_pointers) {
  // The first layout ends at allow_tf32; a caller built against it gets the defaults of the later fields.
  const kvb_prefill_args a = read_versioned(args, offsetof(kvb_prefill_args, allow_tf32), kvb_prefill_args_init,
                                            "args", "kvb_prefill_args_init");
  Prefill t;
  static_cast<AttnCall&>(t) = read_heads(c, head_args(a), "prefill attention");
  KVB_REQUIRE_ARG(a.total_q_tokens <= 0x7fffffffu, "args: total_q_tokens %u exceeds 2^31-1 (query_start is int32)",
                  a.total_q_tokens);
  KVB_REQUIRE_ARG(a.num_seqs > 0 || a.total_q_tokens == 0, "args: total_q_tokens %u with num_seqs 0",
                  a.total_q_tokens);
  t.total_q = a.total_q_tokens;
  t.allow_tf32 = a.allow_tf32 != 0;
  read_q_out(c, t, t.total_q, "token", need_pointers ? a.q : nullptr, a.q_token_stride, a.q_head_stride,
             need_pointers ? a.out : nullptr, a.out_token_stride, a.out_head_stride);
  t.plan = plan_prefill(c, t.num_seqs, t.num_q_heads, t.max_blocks, t.total_q);
  if (!need_pointers || t.num_seqs == 0) return t;
  KVB_REQUIRE_ARG(a.query_start != nullptr, "args: query_start is NULL");
  read_io_pointers(t, a, t.total_q > 0, t.plan.workspace_bytes, "kvb_prefill_attention_workspace_size");
  t.query_start = a.query_start;
  t.tree_mask = t.total_q > 0 ? a.tree_mask : nullptr;
  return t;
}

}  // namespace kern
}  // namespace kvb
