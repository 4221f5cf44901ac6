#include "prefix_index.h"

namespace kvb {

long PrefixIndex::locate(const Key128& key) const {
  const uint32_t fp = fingerprint_of(key);
  return table_.find(fp, [&](const IndexSlot& s) {
    return s.fingerprint == fp && pool_.meta(s.block).key == key;
  });
}

bool PrefixIndex::erase_if_points_to(const Key128& key, int32_t b) {
  // b's slot, if any, lies on key's probe path: look for the block id itself, which needs no block's
  // metadata (the eviction path compared the stored key of every slot with a matching fingerprint).
  long pos = table_.find(fingerprint_of(key), [&](const IndexSlot& s) { return s.block == b; });
  if (pos < 0) return false;
  table_.erase(static_cast<size_t>(pos));
  return true;
}

}  // namespace kvb
