// kvb_prefix_groups at the C boundary of the batch export (capi_batch.cpp).
#pragma once
#include "../abi/kvblock.h"
#include "manager.h"

namespace kvb {
// Checks the caller's struct and buffers, copies them into `out` (sizes start as the caller's, so a
// call that fails before sizing leaves them unchanged) and returns &out.
PrefixGroupsOut* read_prefix_groups_out(const kvb_prefix_groups* pg, PrefixGroupsOut& out);
}  // namespace kvb
