// C boundary, kvblock.h section 6 "Fork, copy-on-write, rollback, sliding window".
#include "capi_manager.h"
#include "capi_pairs.h"

using kvb::require_pairs;
using kvb::with_manager;

extern "C" {

kvb_status kvb_seq_fork(kvb_manager* m, int64_t parent_id, int64_t child_id) {
  return with_manager(m, [&](kvb::Manager& mg) {
    mg.fork(parent_id, child_id, static_cast<size_t>(mg.sequence(parent_id).num_tokens));
  });
}

kvb_status kvb_seq_fork_at(kvb_manager* m, int64_t parent_id, int64_t child_id, size_t num_tokens) {
  return with_manager(m, [&](kvb::Manager& mg) { mg.fork(parent_id, child_id, num_tokens); });
}

kvb_status kvb_drain_copies(kvb_manager* m, int32_t* pairs, size_t capacity_pairs, size_t* num_pairs) {
  return with_manager(m, [&](kvb::Manager& mg) {
    const auto& pending = mg.pending_copies();
    require_pairs(pairs, capacity_pairs, num_pairs, pending.size(), "draining copies");
    for (size_t i = 0; i < pending.size(); ++i) {
      pairs[2 * i] = pending[i].first;
      pairs[2 * i + 1] = pending[i].second;
    }
    mg.release_pending_copies();
  });
}

kvb_status kvb_seq_rollback(kvb_manager* m, int64_t seq_id, size_t num_tokens) {
  return with_manager(m, [&](kvb::Manager& mg) { mg.rollback(seq_id, num_tokens); });
}

kvb_status kvb_seq_set_window(kvb_manager* m, int64_t seq_id, uint32_t window_tokens, uint32_t sink_tokens) {
  return with_manager(m, [&](kvb::Manager& mg) { mg.set_window(seq_id, window_tokens, sink_tokens); });
}

}  // extern "C"
