// Shared-prefix attention at the C boundary: kvb_prefix_groups_init lives with the batch export
// (libkvblock/capi_batch.cpp); here the kernels' view of a decode or prefill call.
#include <cstddef>

#include "../../libkvblock/capi_guard.h"
#include "../../libkvblock/capi_struct.h"
#include "cascade.h"
#include "cascade_cost.h"

namespace kvb {
namespace kern {

CascadeCall cascade_of(const AttnCall& a, const int32_t* query_start, const char* kernel) {
  CascadeCall k;
  static_cast<AttnCall&>(k) = a;
  k.query_start = query_start;
  k.kernel = kernel;
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

BatchShape bound_shape(const Cache& c, const AttnCall& a) {
  BatchShape b;
  b.num_seqs = a.num_seqs;
  b.block_size = c.block_size;
  b.max_len = a.max_blocks * c.block_size;
  return b;
}

bool cpu_cascade(const Cache& c, const CascadeCall& call, const kvb_prefix_groups& pg) {
  cpu::check_prefix_groups(c, call, pg);
  BatchShape b;
  b.num_seqs = call.num_seqs;
  b.block_size = c.block_size;
  b.max_len = call.max_blocks * c.block_size;
  b.seq_lens = call.seq_lens;
  b.query_start = call.query_start;
  const KeptGroups kept(pg, cpu_group_cost(), b);
  if (!kept.get()) return false;
  cpu::cascade_attention(c, call, *kept.get());
  return true;
}

}  // namespace kern
}  // namespace kvb
