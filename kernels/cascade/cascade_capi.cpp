// Shared-prefix attention at the C boundary: kvb_prefix_groups_init lives with the batch export
// (libkvblock/capi_batch.cpp); here the kernels' view of a decode or prefill call.
#include <cstddef>

#include "../../libkvblock/capi_guard.h"
#include "../../libkvblock/capi_struct.h"
#include "cascade.h"

namespace kvb {
namespace kern {

CascadeCall cascade_of(const Attention& a) {
  CascadeCall k;
  k.num_seqs = a.num_seqs;
  k.num_q_heads = a.num_q_heads;
  k.max_blocks = a.max_blocks;
  k.q = a.q;
  k.q_row_stride = a.q_seq_stride;
  k.q_head_stride = a.q_head_stride;
  k.out = a.out;
  k.out_row_stride = a.out_seq_stride;
  k.out_head_stride = a.out_head_stride;
  k.seq_lens = a.seq_lens;
  k.block_tables = a.block_tables;
  k.scale = a.scale;
  k.soft_cap = a.soft_cap;
  k.window = a.window;
  k.sink = a.sink;
  k.kernel = "paged attention";
  return k;
}

CascadeCall cascade_of(const Prefill& a) {
  CascadeCall k;
  k.num_seqs = a.num_seqs;
  k.num_q_heads = a.num_q_heads;
  k.max_blocks = a.max_blocks;
  k.q = a.q;
  k.q_row_stride = a.q_token_stride;
  k.q_head_stride = a.q_head_stride;
  k.out = a.out;
  k.out_row_stride = a.out_token_stride;
  k.out_head_stride = a.out_head_stride;
  k.query_start = a.query_start;
  k.seq_lens = a.seq_lens;
  k.block_tables = a.block_tables;
  k.scale = a.scale;
  k.soft_cap = a.soft_cap;
  k.window = a.window;
  k.sink = a.sink;
  k.kernel = "prefill attention";
  return k;
}

const kvb_prefix_groups* prefix_groups_to_use(const Cache& c, const kvb_prefix_groups* pg) {
  if (!pg) return nullptr;
  require_struct(pg, offsetof(kvb_prefix_groups, num_members) + sizeof(uint32_t), "prefix_groups",
                 "kvb_prefix_groups_init");
  return pg->num_groups > 0 && !c.cuda && !c.fp8() ? pg : nullptr;
}

const kvb_prefix_groups* cuda_prefix_groups(const Cache& c, const kvb_prefix_groups* pg) {
  if (!pg || !c.cuda || c.fp8()) return nullptr;
  KVB_REQUIRE_ARG(pg->struct_size >= offsetof(kvb_prefix_groups, num_members) + sizeof(uint32_t),
                  "prefix_groups: struct_size %u is smaller than its first version (call kvb_prefix_groups_init)",
                  pg->struct_size);
  return pg->num_groups > 0 ? pg : nullptr;
}

}  // namespace kern
}  // namespace kvb
