// Prefix-cache events (KVB_CONFIG_EVENTS): one record per public hash entering or leaving a medium's
// index (see kvblock.h, "Events describe..."). The manager decides when (HashCounts); these build them.
#include "manager.h"

namespace kvb {

void Manager::emit(uint32_t type, int32_t b, const ChainLink* parent) {
  if (!events_.enabled()) return;
  Event e;
  e.type = type;
  e.block = b;
  const int64_t* toks = nullptr;
  if (b >= 0) {
    const BlockMeta& m = pool_.meta(b);
    e.hash = m.hash;
    e.group = block_group(b);
    if (parent) {
      e.parent_kind = parent->kind;
      e.parent_hash = parent->hash;
      e.has_extra = m.has_extra;
      e.extra = m.extra;
      e.num_tokens = bs_;
      toks = pool_.tokens(b);
    }
  }
  events_.push(e, toks);
}

void Manager::emit_host(uint32_t type, int32_t h, bool stored) {
  Event e;
  e.type = type;
  e.block = h;
  e.medium = 1;
  e.group = host_group(h);
  const BlockMeta& m = host_pool_.meta(h);
  e.hash = m.hash;
  if (stored) {
    e.parent_kind = host_parents_[h].kind;
    e.parent_hash = host_parents_[h].hash;
    e.has_extra = m.has_extra;
    e.extra = m.extra;
    e.num_tokens = bs_;
  }
  events_.push(e, stored ? host_pool_.tokens(h) : nullptr);
}

}  // namespace kvb
