// C boundary of paged decode attention: its argument initialiser, workspace query and entry point.
#include <algorithm>
#include <cstddef>
#include <cstring>

#include "../../libkvblock/capi_guard.h"
#include "decode.h"
#include "../common/cache.h"
#include "../cascade/cascade.h"
#include "../common/validate.h"
#include "../common/amx_cpu.h"
#include "../common/simd_cpu.h"

using namespace kvb;
using namespace kvb::kern;

namespace {
bool has_prefix_groups(const kvb_attention_args* args) {
  return args->struct_size >= offsetof(kvb_attention_args, prefix_groups) + sizeof(void*);
}
// The size of the KVB_0.1 layout: the offset of the first field added after it.
constexpr size_t kAttentionArgsSize01 = offsetof(kvb_attention_args, q_dtype);
static_assert(kAttentionArgsSize01 == 112, "kvb_attention_args of KVB_0.1 is 112 bytes");
}  // namespace

extern "C" {

KVB_API const char* kvb_cpu_isa(void) {
  static const char* const with_amx[cpu::simd::kNumIsas] = {"baseline+amx", "avx2+amx", "avx512+amx", "avx512bf16+amx"};
  const cpu::simd::Isa isa = cpu::simd::isa();
  return cpu::amx::active() ? with_amx[int(isa)] : cpu::simd::isa_name(isa);
}

KVB_API void kvb_attention_args_init(kvb_attention_args* args) {
  if (!args) return;
  std::memset(args, 0, sizeof *args);
  args->struct_size = sizeof *args;
}

// The KVB_0.1 _init (abi/ABI.md, "Symbol versions"): kvb_attention_args grew q_dtype with fp8 caches, and
// a binary linked against KVB_0.1 binds this, which writes only the 0.1 layout. (A name outside kvb_*,
// so that only its versioned alias is exported.)
KVB_API void kvbv01_attention_args_init(kvb_attention_args* args) {
  if (!args) return;
  std::memset(args, 0, kAttentionArgsSize01);
  args->struct_size = uint32_t(kAttentionArgsSize01);
}
__asm__(".symver kvbv01_attention_args_init, kvb_attention_args_init@KVB_0.1");

KVB_API kvb_status kvb_paged_attention_workspace_size(const kvb_cache_desc* cache, const kvb_attention_args* args,
                                                      size_t* bytes) {
  return guarded([&] {
    KVB_REQUIRE_ARG(bytes != nullptr, "bytes is NULL");
    Cache c = read_cache(cache, "cache");
    Attention a = read_attention(c, args, false);
    *bytes = a.plan.workspace_bytes;
    // CUDA shared-prefix decode: its workspace when the description is set (the larger of the two).
    const kvb_prefix_groups* cg = has_prefix_groups(args) ? cuda_prefix_groups(c, args->prefix_groups) : nullptr;
    if (cg) {
      const KeptGroups kept(*cg, cuda_group_cost(), bound_shape(c, a));
      if (kept.get()) *bytes = std::max(*bytes, cuda::cascade_workspace(c, a, *kept.get()));
    }
  });
}

KVB_API kvb_status kvb_paged_attention(const kvb_cache_desc* cache, const kvb_attention_args* args, void* stream) {
  return guarded([&] {
    Cache c = read_cache(cache, "cache");
    Attention a = read_attention(c, args, true);
    require_backend(c, "cache");
    if (a.num_seqs == 0) return;
    // Shared-prefix attention (kvb_prefix_groups) where prefix_groups_to_use says it applies.
    const kvb_prefix_groups* pg = has_prefix_groups(args) ? prefix_groups_to_use(c, args->prefix_groups) : nullptr;
    if (pg && cpu_cascade(c, cascade_of(a, nullptr, "paged attention"), *pg)) return;
    const kvb_prefix_groups* cg = has_prefix_groups(args) ? cuda_prefix_groups(c, args->prefix_groups) : nullptr;
    if (cg) {
      const KeptGroups kept(*cg, cuda_group_cost(), bound_shape(c, a));
      if (kept.get() && cuda::cascade_decode(c, a, *kept.get(), args->workspace, args->workspace_size, stream)) return;
    }
    if (c.cuda)
      cuda::paged_attention(c, a, stream);
    else
      cpu::paged_attention(c, a);
  });
}

}  // extern "C"
