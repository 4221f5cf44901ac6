// C boundary, kvblock.h section 10 "Statistics, events, prefix-cache control".
#include <cstring>

#include "capi_manager.h"
#include "capi_struct.h"

using kvb::Code;
using kvb::fail;
using kvb::with_manager;

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

extern "C" {

void kvb_stats_init(kvb_stats* stats) {
  kvb::init_struct(stats);
}

// kvb_stats grew the store-tier counters after KVB_0.1 (abi/ABI.md, "Symbol versions"): a binary linked
// against KVB_0.1 binds this one, which writes only the 0.1 layout (up to cached_host_blocks). (A name
// outside kvb_*, so that only its versioned alias is exported.)
static constexpr size_t kStatsSize01 = offsetof(kvb_stats, store_hit_tokens);
KVB_API void kvbv01_stats_init(kvb_stats* stats) {
  kvb::init_struct(stats, kStatsSize01);
}
__asm__(".symver kvbv01_stats_init, kvb_stats_init@KVB_0.1");

kvb_status kvb_get_stats(kvb_manager* m, kvb_stats* stats) {
  return with_manager(m, [&](kvb::Manager& mg) {
    kvb::require_struct(stats, offsetof(kvb_stats, events_dropped) + sizeof(uint64_t), "kvb_stats");
    kvb_stats r;
    kvb_stats_init(&r);
    mg.stats(r);
    kvb::write_versioned(stats, r);
  });
}

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
