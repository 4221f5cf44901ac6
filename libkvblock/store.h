// The store tier's state inside a manager (docs in abi/kvblock.h, "Store tier"): the caller's callback
// table, the key namespace, and the gets in flight. Behaviour lives in manager_store.cpp.
#pragma once
#include <cstdint>
#include <vector>

#include "../abi/kvblock.h"
#include "hash.h"

namespace kvb {

// The store key of an index key under a namespace key (kvblock.h, "Keys").
Key128 store_namespace_key(uint32_t dtype, uint32_t block_size, uint32_t num_layers, uint32_t num_kv_heads,
                           uint32_t head_dim, uint64_t model_id);
Key128 fold_store_key(const Key128& index_key, const Key128& ns);

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
  uint64_t recomputed_tokens = 0;
  size_t staged = 0;  // host blocks with staging != 0
};

}  // namespace kvb
