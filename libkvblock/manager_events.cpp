// Prefix-cache events (KVB_CONFIG_EVENTS): one record per public hash entering or leaving a medium's
// index (see kvblock.h, "Events describe..."). The manager decides when (HashCounts); these build them.
// Device and host blocks are one type (Tier), so one function builds the record of either: a STORED
// record's parent is the one index_block / offload kept in the tier's parents.
#include "manager.h"

namespace kvb {

void Manager::emit_block(const Tier& t, uint32_t medium, uint32_t type, int32_t b, bool stored) {
  if (!events_.enabled()) return;
  Event e;
  e.type = type;
  e.block = b;
  e.medium = medium;
  e.group = t.group_of(b);
  const BlockMeta& m = t.pool.meta(b);
  e.hash = m.hash;
  if (stored) {
    e.parent_kind = t.parents[b].kind;
    e.parent_hash = t.parents[b].hash;
    e.has_extra = m.has_extra;
    e.extra = m.extra;
    e.num_tokens = bs_;
  }
  events_.push(e, stored ? t.pool.tokens(b) : nullptr);
}

void Manager::emit_cleared() {
  if (!events_.enabled()) return;
  Event e;
  e.type = 3;  // KVB_EVENT_ALL_CLEARED
  events_.push(e, nullptr);
}

}  // namespace kvb
