// C boundary, kvblock.h section 3 "Hashing": the public block hash of any tokens, and of a manager's block.
#include "capi_manager.h"

using kvb::Code;
using kvb::fail;
using kvb::with_manager;

extern "C" {

uint64_t kvb_hash_tokens(const uint64_t* parent_hash, const int64_t* tokens, size_t n) {
  if (!tokens && n > 0) {  // no status to return: 0 and a message, documented in the header
    kvb::set_last_error("kvb_hash_tokens: tokens is NULL but n is nonzero; returned 0");
    return 0;
  }
  kvb::ChainLink link;
  if (parent_hash) {
    link.kind = kvb::ChainLink::parent;
    link.hash = *parent_hash;
  }
  static const int64_t kNoTokens[1] = {0};
  return kvb::public_block_hash(link, tokens ? tokens : kNoTokens, n, kvb::ExtraKey{});
}

kvb_status kvb_block_hash(kvb_manager* m, int32_t block_id, uint64_t* hash) {
  return with_manager(m, [&](kvb::Manager& mg) {
    if (!hash) fail(Code::invalid_argument, "hash is NULL");
    *hash = mg.block_hash(block_id);
  });
}

}  // extern "C"
