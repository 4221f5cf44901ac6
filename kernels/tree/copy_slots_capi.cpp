// C boundary of kvb_copy_slots: the layers as kvb_copy_blocks reads them, the pairs checked and grouped
// (copy_slots_plan.cpp), then the back end.
#include "../../libkvblock/capi_guard.h"
#include "../common/cache.h"
#include "../copy/copy.h"
#include "copy_slots.h"

using namespace kvb;
using namespace kvb::kern;

extern "C" {

KVB_API kvb_status kvb_copy_slots(const kvb_cache_desc* layers, size_t num_layers, const int64_t* pairs,
                                  size_t num_pairs, void* stream) {
  return guarded([&] {
    KVB_REQUIRE_ARG(num_layers <= kMaxCopyLayers, "num_layers %zu exceeds %zu", num_layers, kMaxCopyLayers);
    KVB_REQUIRE_ARG(num_pairs <= (size_t(1) << 31), "num_pairs %zu exceeds 2^31", num_pairs);
    if (num_pairs) KVB_REQUIRE_ARG(pairs != nullptr, "pairs is NULL");
    if (num_layers == 0 && num_pairs == 0) return;
    std::vector<Cache> c = read_layers(layers, num_layers, "layers");
    if (num_layers == 0 || num_pairs == 0) return;
    SlotCopy s = plan_slot_copy(pairs, num_pairs, c[0].num_blocks * c[0].block_size);
    require_backend(c[0], "layers[0]");
    s.layers = c.data();
    s.num_layers = int64_t(num_layers);
    if (c[0].cuda)
      cuda::copy_slots(s, stream);
    else
      cpu::copy_slots(s);
  });
}

}  // extern "C"
