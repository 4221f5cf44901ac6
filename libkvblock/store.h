// The store tier's state inside a manager (docs in abi/kvblock.h, "Store tier"): the caller's callback
// table, the key namespace, and the gets in flight. Behaviour lives in manager_store.cpp.
#pragma once
#include <cstdint>
#include <vector>

#include "../abi/kvblock.h"
#include "hash.h"

namespace kvb {

// What makes blocks' bytes compatible (kvb_store_namespace, checked by the C boundary).
struct StoreNamespace {
  uint32_t dtype = 0, block_size = 0, num_layers = 0, num_kv_heads = 0, head_dim = 0;
  uint64_t model_id = 0;
  std::vector<float> scales;  // fp8 dtypes: every (layer, K then V, kv head) scale; empty otherwise (unread)
};

// The namespace key, and the store key of an index key under it (kvblock.h, "Keys").
Key128 store_namespace_key(const StoreNamespace& ns);
Key128 fold_store_key(const Key128& index_key, const Key128& ns);

// One store, one manager (kvblock.h, "One store, one host cache, one manager"): a process-wide table of
// which manager holds which store, a store named by its (user, put) pair. claim_store registers ops for
// owner in place of owner's previous store, or fails (bad_state, naming the holder) if another owner holds
// it; release_store forgets owner's store.
void claim_store(const void* owner, const kvb_store& ops);
void release_store(const void* owner);

// A get in flight: host block `host` is being filled for block `index` of the sequence allocated with
// `serial` (a freed id may be reused: the serial tells the old sequence from a new one), whose device
// block there is `device`.
struct StoreGet {
  uint64_t ticket;
  uint64_t serial;
  int64_t seq_id;
  uint32_t index;
  int32_t host;
  int32_t device;
};

struct StoreTier {
  bool on = false;
  kvb_store ops{};          // copied at registration (the caller's table may go)
  Key128 ns;                // namespace key
  uint64_t block_bytes = 0; // K and V of every layer of one block
  uint64_t next_ticket = 1;
  uint64_t next_serial = 1;
  std::vector<StoreGet> gets;           // in flight
  std::vector<uint8_t> staging;         // per host block: 0, 1 = a get fills it, 2 = filled, its load pending
  // KVB_STORE_WRITE_THROUGH: host blocks whose offloads were handed out, to put at the next poll (an entry
  // counts while through_pending is set; take_host_block clears it), and the blocks already put.
  bool write_through = false;
  std::vector<int32_t> through;
  std::vector<uint8_t> through_pending, written;
  std::vector<kvb_store_key> keys;      // scratch: the folded keys a lookup asked about
  std::vector<kvb_store_completion> done;  // scratch for poll
  uint64_t hit_tokens = 0, put_blocks = 0, put_failures = 0, get_blocks = 0, get_failures = 0;
  uint64_t recomputed_tokens = 0, abandoned_gets = 0;
  size_t staged = 0;  // host blocks with staging != 0
};

}  // namespace kvb
