// C boundary of paged prefill / extend attention and its workspace query.
#include <algorithm>
#include <cstddef>
#include <cstring>

#include "../../libkvblock/capi_guard.h"
#include "../common/cache.h"
#include "../cascade/cascade.h"
#include "prefill.h"
#include "../common/validate.h"

using namespace kvb;
using namespace kvb::kern;

namespace {
bool has_prefix_groups(const kvb_prefill_args* args) {
  return args->struct_size >= offsetof(kvb_prefill_args, prefix_groups) + sizeof(void*);
}
}  // namespace

extern "C" {

KVB_API void kvb_prefill_args_init(kvb_prefill_args* args) {
  if (!args) return;
  std::memset(args, 0, sizeof *args);
  args->struct_size = sizeof *args;
}

// kvb_prefill_args grew allow_tf32 / reserved2 after KVB_0.1 (abi/ABI.md, "Symbol versions"): a binary
// linked against KVB_0.1 binds this _init, which writes only the 0.1 layout (128 bytes); read_prefill
// accepts that struct_size and gives such a caller exact fp32. (A name outside kvb_*, so that only its
// versioned alias is exported.)
static_assert(offsetof(kvb_prefill_args, allow_tf32) == 128, "kvb_prefill_args of KVB_0.1 is 128 bytes");
KVB_API void kvbv01_prefill_args_init(kvb_prefill_args* args) {
  if (!args) return;
  std::memset(args, 0, offsetof(kvb_prefill_args, allow_tf32));
  args->struct_size = uint32_t(offsetof(kvb_prefill_args, allow_tf32));
}
__asm__(".symver kvbv01_prefill_args_init, kvb_prefill_args_init@KVB_0.1");

KVB_API kvb_status kvb_prefill_attention_workspace_size(const kvb_cache_desc* cache, const kvb_prefill_args* args,
                                                        size_t* bytes) {
  return guarded([&] {
    KVB_REQUIRE_ARG(bytes != nullptr, "bytes is NULL");
    Cache c = read_cache(cache, "cache");
    Prefill a = read_prefill(c, args, false);
    *bytes = a.plan.workspace_bytes;
    // CUDA shared-prefix prefill: its workspace when the description is set (the larger of the two).
    const kvb_prefix_groups* cg = has_prefix_groups(args) ? cuda_prefix_groups(c, args->prefix_groups) : nullptr;
    if (cg) {
      const KeptGroups kept(*cg, cuda_group_cost(), bound_shape(c, a));
      if (kept.get()) *bytes = std::max(*bytes, cuda::cascade_prefill_workspace(c, a, *kept.get()));
    }
  });
}

KVB_API kvb_status kvb_prefill_attention(const kvb_cache_desc* cache, const kvb_prefill_args* args, void* stream) {
  return guarded([&] {
    Cache c = read_cache(cache, "cache");
    Prefill a = read_prefill(c, args, true);
    require_backend(c, "cache");
    if (a.num_seqs == 0) return;
    const kvb_prefix_groups* given = has_prefix_groups(args) ? args->prefix_groups : nullptr;
    if (a.tree_mask && given && given->num_groups > 0)
      fail(Code::unsupported, "args: tree_mask with prefix_groups (%u groups) is not supported; pass one or the other",
           given->num_groups);
    // Shared-prefix attention (kvb_prefix_groups) where prefix_groups_to_use says it applies.
    const kvb_prefix_groups* pg = has_prefix_groups(args) ? prefix_groups_to_use(c, args->prefix_groups) : nullptr;
    if (pg && cpu_cascade(c, cascade_of(a, a.query_start, "prefill attention"), *pg)) return;
    const kvb_prefix_groups* cg = has_prefix_groups(args) ? cuda_prefix_groups(c, args->prefix_groups) : nullptr;
    if (cg) {
      const KeptGroups kept(*cg, cuda_group_cost(), bound_shape(c, a));
      if (kept.get() && cuda::cascade_prefill(c, a, *kept.get(), args->workspace, args->workspace_size, stream)) return;
    }
    if (c.cuda)
      cuda::prefill_attention(c, a, stream);
    else
      cpu::prefill_attention(c, a);
  });
}

}  // extern "C"
