// C boundary of the calls beyond the core flow: fork, copy-on-write drain, host transfers, rollback,
// window, swapping, batch export, events and prefix-cache reset.
#include <cinttypes>
#include <cstring>

#include "capi_manager.h"
#include "capi_prefix_groups.h"
#include "capi_struct.h"

using kvb::Code;
using kvb::fail;
using kvb::with_manager;

namespace {

void require_pairs(int32_t* pairs, size_t capacity_pairs, size_t* num_pairs, size_t needed, const char* what) {
  if (!num_pairs) fail(Code::invalid_argument, "num_pairs is NULL");
  *num_pairs = needed;
  if (capacity_pairs < needed)
    fail(Code::buffer_too_small, "%s produces %zu block pair%s, capacity_pairs is %zu", what, needed, kvb::plural_s(needed),
         capacity_pairs);
  if (!pairs && needed > 0) fail(Code::invalid_argument, "pairs is NULL");
}

kvb_status report_availability(kvb::Availability a, kvb_availability* answer) {
  *answer = static_cast<kvb_availability>(a);
  return KVB_OK;
}

}  // namespace

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

kvb_status kvb_seq_rollback(kvb_manager* m, int64_t seq_id, size_t num_tokens) {
  return with_manager(m, [&](kvb::Manager& mg) { mg.rollback(seq_id, num_tokens); });
}

kvb_status kvb_seq_set_window(kvb_manager* m, int64_t seq_id, uint32_t window_tokens, uint32_t sink_tokens) {
  return with_manager(m, [&](kvb::Manager& mg) { mg.set_window(seq_id, window_tokens, sink_tokens); });
}

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

void kvb_batch_init(kvb_batch* batch) {
  if (!batch) return;
  std::memset(static_cast<void*>(batch), 0, sizeof *batch);
  batch->struct_size = sizeof *batch;
}

kvb_status kvb_batch_export(kvb_manager* m, const int64_t* seq_ids, size_t num_seqs, kvb_batch* batch) {
  return with_manager(m, [&](kvb::Manager& mg) {
    kvb::require_struct(batch, offsetof(kvb_batch, max_blocks_needed) + sizeof(uint32_t), "kvb_batch");
    if (!seq_ids && num_seqs > 0) fail(Code::invalid_argument, "seq_ids is NULL but num_seqs is %zu", num_seqs);
    kvb::BatchOut out;
    out.max_blocks_per_seq = batch->max_blocks_per_seq;
    out.block_tables = batch->block_tables;
    out.seq_lens = batch->seq_lens;
    out.query_start = batch->query_start;
    out.slot_mapping = batch->slot_mapping;
    out.slot_capacity = batch->slot_capacity;
    out.num_slots = batch->num_slots;  // unchanged unless sizes were computed (success or too small)
    out.max_blocks_needed = batch->max_blocks_needed;
    if (KVB_COVERS(batch, kvb_batch, group)) out.group = batch->group;
    kvb::PrefixGroupsOut groups;
    kvb_prefix_groups* pg = KVB_COVERS(batch, kvb_batch, prefix_groups) ? batch->prefix_groups : nullptr;
    if (pg) out.prefix_groups = kvb::read_prefix_groups_out(pg, groups);
    struct Report {  // sizes are reported also when the call fails for a buffer that is too small
      kvb_batch* b;
      kvb::BatchOut& o;
      kvb_prefix_groups* pg;
      ~Report() {
        b->num_slots = o.num_slots;
        b->max_blocks_needed = o.max_blocks_needed;
        if (pg) {
          pg->num_groups = o.prefix_groups->num_groups;
          pg->num_members = o.prefix_groups->num_members;
        }
      }
    } report{batch, out, pg};
    mg.batch_export(seq_ids, num_seqs, out);
  });
}

namespace {

void drain_events(kvb::Manager& mg, kvb_event* events, uint32_t* groups, size_t capacity, int64_t* tokens,
                  size_t token_capacity, size_t* num_events, uint64_t* dropped) {
    if (!num_events) fail(Code::invalid_argument, "num_events is NULL");
    if (!events && capacity > 0) fail(Code::invalid_argument, "events is NULL but capacity is %zu", capacity);
    if (!tokens && token_capacity > 0)
      fail(Code::invalid_argument, "tokens is NULL but token_capacity is %zu", token_capacity);
    kvb::EventQueue& q = mg.events();
    if (!q.enabled()) fail(Code::bad_state, "events are off: create the manager with KVB_CONFIG_EVENTS");
    size_t n = 0, used_tokens = 0;
    while (n < capacity && n < q.size()) {
      const kvb::Event& e = q.front(n);
      if (used_tokens + e.num_tokens > token_capacity) break;
      kvb_event& o = events[n];
      std::memset(&o, 0, sizeof o);
      o.type = e.type;
      o.parent_kind = e.parent_kind;
      o.block_hash = e.hash;
      o.parent_hash = e.parent_hash;
      o.extra_key = e.extra;
      o.has_extra_key = e.has_extra;
      o.num_tokens = e.num_tokens;
      o.token_offset = used_tokens;
      o.block_id = e.block;
      o.medium = e.medium;
      if (groups) groups[n] = e.group;
      if (e.num_tokens) std::memcpy(tokens + used_tokens, q.front_tokens(n), e.num_tokens * sizeof(int64_t));
      used_tokens += e.num_tokens;
      ++n;
    }
    if (n == 0 && q.size() > 0)
      fail(Code::buffer_too_small, "the next event needs capacity >= 1 and token_capacity >= %u",
           q.front(0).num_tokens);
    q.pop(n);
    *num_events = n;
    uint64_t d = q.take_dropped();
    if (dropped) *dropped = d;
}

}  // namespace

kvb_status kvb_drain_events(kvb_manager* m, kvb_event* events, size_t capacity, int64_t* tokens,
                            size_t token_capacity, size_t* num_events, uint64_t* dropped) {
  return with_manager(m, [&](kvb::Manager& mg) {
    if (mg.num_groups() > 1)
      fail(Code::bad_state, "the manager has %u KV cache groups: drain with kvb_drain_events_group, which reports "
           "each event's group", mg.num_groups());
    drain_events(mg, events, nullptr, capacity, tokens, token_capacity, num_events, dropped);
  });
}

kvb_status kvb_drain_events_group(kvb_manager* m, kvb_event* events, uint32_t* groups, size_t capacity,
                                  int64_t* tokens, size_t token_capacity, size_t* num_events, uint64_t* dropped) {
  return with_manager(m, [&](kvb::Manager& mg) {
    drain_events(mg, events, groups, capacity, tokens, token_capacity, num_events, dropped);
  });
}

kvb_status kvb_reset_prefix_cache(kvb_manager* m) {
  return with_manager(m, [&](kvb::Manager& mg) { mg.reset_prefix_cache(); });
}

}  // extern "C"
