// C boundary of paged decode attention and its workspace query.
#include <cstddef>

#include "../libkvblock/capi_guard.h"
#include "backends.h"
#include "cascade.h"
#include "validate.h"

using namespace kvb;
using namespace kvb::kern;

extern "C" {

KVB_API kvb_status kvb_paged_attention_workspace_size(const kvb_cache_desc* cache, const kvb_attention_args* args,
                                                      size_t* bytes) {
  return guarded([&] {
    KVB_REQUIRE_ARG(bytes != nullptr, "bytes is NULL");
    Cache c = read_cache(cache, "cache");
    Attention a = read_attention(c, args, false);
    *bytes = a.plan.workspace_bytes;
  });
}

KVB_API kvb_status kvb_paged_attention(const kvb_cache_desc* cache, const kvb_attention_args* args, void* stream) {
  return guarded([&] {
    Cache c = read_cache(cache, "cache");
    Attention a = read_attention(c, args, true);
    require_backend(c, "cache");
    if (a.num_seqs == 0) return;
    // Shared-prefix attention (kvb_prefix_groups) where prefix_groups_to_use says it applies.
    const kvb_prefix_groups* pg = args->struct_size >= offsetof(kvb_attention_args, prefix_groups) + sizeof(void*)
                                      ? prefix_groups_to_use(c, args->prefix_groups)
                                      : nullptr;
    if (pg) return cpu::cascade_attention(c, cascade_of(a), *pg);
    if (c.cuda)
      cuda::paged_attention(c, a, stream);
    else
      cpu::paged_attention(c, a);
  });
}

}  // extern "C"
