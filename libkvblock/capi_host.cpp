// C boundary, kvblock.h sections 7 "Host tier and swapping" and 8 "Host cache": swap availability,
// swap out / in, and the drain of host-cache transfers.
#include "capi_manager.h"
#include "capi_pairs.h"

using kvb::Code;
using kvb::fail;
using kvb::require_pairs;
using kvb::with_manager;

namespace {

kvb_status report_availability(kvb::Availability a, kvb_availability* answer) {
  *answer = static_cast<kvb_availability>(a);
  return KVB_OK;
}

}  // namespace

extern "C" {

kvb_status kvb_seq_can_swap_out(kvb_manager* m, int64_t seq_id, kvb_availability* answer) {
  return with_manager(m, [&](kvb::Manager& mg) {
    if (!answer) fail(Code::invalid_argument, "answer is NULL");
    report_availability(mg.can_swap_out(seq_id), answer);
  });
}

kvb_status kvb_seq_can_swap_in(kvb_manager* m, int64_t seq_id, kvb_availability* answer) {
  return with_manager(m, [&](kvb::Manager& mg) {
    if (!answer) fail(Code::invalid_argument, "answer is NULL");
    report_availability(mg.can_swap_in(seq_id), answer);
  });
}

kvb_status kvb_seq_swap_out(kvb_manager* m, int64_t seq_id, int32_t* pairs, size_t capacity_pairs, size_t* num_pairs) {
  return with_manager(m, [&](kvb::Manager& mg) {
    require_pairs(pairs, capacity_pairs, num_pairs, mg.swap_out_size(seq_id), "swap out");
    mg.swap_out(seq_id, pairs);
  });
}

kvb_status kvb_seq_swap_in(kvb_manager* m, int64_t seq_id, int32_t* pairs, size_t capacity_pairs, size_t* num_pairs) {
  return with_manager(m, [&](kvb::Manager& mg) {
    require_pairs(pairs, capacity_pairs, num_pairs, mg.swap_in_size(seq_id), "swap in");
    mg.swap_in(seq_id, pairs);
  });
}

kvb_status kvb_drain_host_transfers(kvb_manager* m, int32_t* offload_pairs, size_t offload_capacity,
                                    size_t* num_offloads, int32_t* load_pairs, size_t load_capacity, size_t* num_loads) {
  return with_manager(m, [&](kvb::Manager& mg) {
    if (!num_offloads || !num_loads) fail(Code::invalid_argument, "num_offloads or num_loads is NULL");
    const auto& off = mg.pending_offloads();
    const auto& load = mg.pending_loads();
    *num_offloads = off.size();
    *num_loads = load.size();
    if (offload_capacity < off.size() || load_capacity < load.size())
      fail(Code::buffer_too_small, "host transfers: %zu offload%s (capacity %zu), %zu load%s (capacity %zu)",
           off.size(), kvb::plural_s(off.size()), offload_capacity, load.size(), kvb::plural_s(load.size()),
           load_capacity);
    if ((!offload_pairs && !off.empty()) || (!load_pairs && !load.empty()))
      fail(Code::invalid_argument, "offload_pairs or load_pairs is NULL");
    for (size_t i = 0; i < off.size(); ++i) {
      offload_pairs[2 * i] = off[i].first;
      offload_pairs[2 * i + 1] = off[i].second;
    }
    for (size_t i = 0; i < load.size(); ++i) {
      load_pairs[2 * i] = load[i].first;
      load_pairs[2 * i + 1] = load[i].second;
    }
    mg.release_host_transfers();
  });
}

}  // extern "C"
