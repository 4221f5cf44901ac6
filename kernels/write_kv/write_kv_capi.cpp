// C boundary of kvb_write_kv: its argument initialiser; the entry point validates, then dispatches to the
// CPU or CUDA back end.
#include <cstring>

#include "../../libkvblock/capi_guard.h"
#include "../common/cache.h"
#include "../common/validate.h"
#include "write_kv.h"

using namespace kvb;
using namespace kvb::kern;

extern "C" KVB_API void kvb_write_kv_args_init(kvb_write_kv_args* args) {
  if (!args) return;
  std::memset(args, 0, sizeof *args);
  args->struct_size = sizeof *args;
}

extern "C" KVB_API kvb_status kvb_write_kv(const kvb_cache_desc* cache, const kvb_write_kv_args* args, void* stream) {
  return guarded([&] {
    Cache c = read_cache(cache, "cache");
    WriteKv w = read_write_kv(c, args);
    require_backend(c, "cache");
    if (w.num_tokens == 0) return;
    if (c.cuda)
      cuda::write_kv(c, w, stream);
    else
      cpu::write_kv(c, w);
  });
}
