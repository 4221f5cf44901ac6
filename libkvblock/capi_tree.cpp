// C boundary, kvblock.h section "Token trees": argument checks only; the behaviour is
// Manager::append_tree / commit_tree (manager_tree.cpp).
#include "capi_manager.h"

using kvb::Code;
using kvb::fail;
using kvb::with_manager;

extern "C" {

kvb_status kvb_seq_append_tree(kvb_manager* m, int64_t seq_id, const int64_t* tokens, const int32_t* parents, size_t n,
                               int32_t* depths) {
  return with_manager(m, [&](kvb::Manager& mg) {
    if (!tokens && n > 0) fail(Code::invalid_argument, "tokens is NULL but n is %zu", n);
    if (!parents && n > 0) fail(Code::invalid_argument, "parents is NULL but n is %zu", n);
    mg.append_tree(seq_id, tokens, parents, n, depths);
  });
}

kvb_status kvb_seq_commit_tree(kvb_manager* m, int64_t seq_id, const int32_t* path, size_t k) {
  return with_manager(m, [&](kvb::Manager& mg) {
    if (!path && k > 0) fail(Code::invalid_argument, "path is NULL but k is %zu", k);
    mg.commit_tree(seq_id, path, k);
  });
}

kvb_status kvb_drain_slot_copies(kvb_manager* m, int64_t* pairs, size_t capacity_pairs, size_t* num_pairs) {
  return with_manager(m, [&](kvb::Manager& mg) {
    const auto& pending = mg.pending_slot_copies();
    if (!num_pairs) fail(Code::invalid_argument, "num_pairs is NULL");
    *num_pairs = pending.size();
    if (capacity_pairs < pending.size())
      fail(Code::buffer_too_small, "draining slot copies produces %zu slot pair%s, capacity_pairs is %zu",
           pending.size(), kvb::plural_s(pending.size()), capacity_pairs);
    if (!pairs && !pending.empty()) fail(Code::invalid_argument, "pairs is NULL");
    for (size_t i = 0; i < pending.size(); ++i) {
      pairs[2 * i] = pending[i].first;
      pairs[2 * i + 1] = pending[i].second;
    }
    mg.release_slot_copies();
  });
}

}  // extern "C"
