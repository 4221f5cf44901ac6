// Prefix-cache events (KVB_CONFIG_EVENTS): one record per public hash entering or leaving a medium's
// index (see kvblock.h, "Events describe..."). Each tier decides when (Tier::enter / leave, with its
// HashCounts) and builds the record of its blocks here: a STORED record's parent is the one the tier
// kept in its parents when the block entered.
#include "manager.h"

namespace kvb {

void Tier::emit(kvb_event_type type, int32_t b, kvb_medium as) const {
  if (!events) return;
  Event e;
  e.type = type;
  e.block = b;
  e.medium = as;
  e.group = group_of(b);
  const BlockMeta& m = pool.meta(b);
  e.hash = m.hash;
  const bool stored = type == KVB_EVENT_BLOCK_STORED;
  if (stored) {
    e.parent_kind = parents[b].kind;
    e.parent_hash = parents[b].hash;
    e.has_extra = m.has_extra;
    e.extra = m.extra;
    e.num_tokens = pool.block_size();
  }
  events->push(e, stored ? pool.tokens(b) : nullptr);
}

void Manager::emit_cleared() {
  if (!events_.enabled()) return;
  Event e;
  e.type = KVB_EVENT_ALL_CLEARED;
  events_.push(e, nullptr);
}

}  // namespace kvb
