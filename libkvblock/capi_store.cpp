// The C boundary of the store tier (kvblock.h, "Store tier"): argument checks and struct versioning.
#include <cinttypes>
#include <cstring>

#include "capi_manager.h"
#include "capi_struct.h"

using kvb::Code;
using kvb::fail;
using kvb::with_manager;

namespace {

uint64_t dtype_bytes(uint32_t dtype) {
  switch (dtype) {
    case KVB_DTYPE_FP16:
    case KVB_DTYPE_BF16: return 2;
    case KVB_DTYPE_FP32: return 4;
    case KVB_DTYPE_FP8_E4M3:
    case KVB_DTYPE_FP8_E5M2: return 1;
  }
  fail(Code::invalid_argument, "kvb_store_namespace.dtype %u is not a kvb_dtype", dtype);
}

kvb::Key128 namespace_key(const kvb_store_namespace* ns) {
  kvb::require_struct(ns, offsetof(kvb_store_namespace, model_id) + sizeof(uint64_t), "kvb_store_namespace");
  dtype_bytes(ns->dtype);
  return kvb::store_namespace_key(ns->dtype, ns->block_size, ns->num_layers, ns->num_kv_heads, ns->head_dim,
                                  ns->model_id);
}

}  // namespace

extern "C" {

void kvb_store_init(kvb_store* store) {
  if (!store) return;
  std::memset(store, 0, sizeof *store);
  store->struct_size = sizeof *store;
}

void kvb_store_namespace_init(kvb_store_namespace* ns) {
  if (!ns) return;
  std::memset(ns, 0, sizeof *ns);
  ns->struct_size = sizeof *ns;
}

kvb_status kvb_store_key_fold(const kvb_store_namespace* ns, uint64_t index_key_lo, uint64_t index_key_hi,
                              kvb_store_key* out) {
  return kvb::guarded([&] {
    if (!out) fail(Code::invalid_argument, "out is NULL");
    kvb::Key128 k = kvb::fold_store_key(kvb::Key128{index_key_lo, index_key_hi}, namespace_key(ns));
    out->lo = k.lo;
    out->hi = k.hi;
  });
}

kvb_status kvb_manager_set_store(kvb_manager* m, const kvb_store* store, const kvb_store_namespace* ns) {
  return with_manager(m, [&](kvb::Manager& mg) {
    if (!store) {
      mg.set_store(nullptr, kvb::Key128{}, 0);
      return;
    }
    kvb::require_struct(store, offsetof(kvb_store, poll) + sizeof(store->poll), "kvb_store");
    if (store->flags & ~static_cast<uint32_t>(KVB_STORE_WRITE_THROUGH))
      fail(Code::invalid_argument, "kvb_store.flags 0x%x has unknown bits", store->flags);
    if (!store->lookup || !store->put || !store->get || !store->poll)
      fail(Code::invalid_argument, "kvb_store: lookup, put, get and poll are all required (%s is NULL)",
           !store->lookup ? "lookup" : !store->put ? "put" : !store->get ? "get" : "poll");
    const kvb::Key128 nsk = namespace_key(ns);
    const kvb::ManagerConfig& cfg = mg.config();
    if (ns->block_size != cfg.block_size)
      fail(Code::invalid_argument, "kvb_store_namespace.block_size %u differs from the manager's %u", ns->block_size,
           cfg.block_size);
    if (ns->num_layers == 0 || ns->num_kv_heads == 0 || ns->head_dim == 0)
      fail(Code::invalid_argument, "kvb_store_namespace: num_layers %u, num_kv_heads %u, head_dim %u must all be > 0",
           ns->num_layers, ns->num_kv_heads, ns->head_dim);
    if (!cfg.host_cache)
      fail(Code::bad_state, "a store needs KVB_CONFIG_HOST_CACHE: host blocks are its staging buffers");
    if (!cfg.groups.empty()) fail(Code::unsupported, "a store with KV cache groups is not supported yet");
    if (cfg.keyed_index && cfg.index_seed == 0)
      fail(Code::bad_state, "the manager's keyed index has a random seed: its keys match no other manager's; "
           "set kvb_config.index_seed (shared by the engines) to use a store");
    const uint64_t block_bytes = 2ull * dtype_bytes(ns->dtype) * ns->block_size * ns->num_layers * ns->num_kv_heads *
                                 ns->head_dim;
    kvb_store copy;
    kvb_store_init(&copy);
    std::memcpy(static_cast<void*>(&copy), store, std::min<size_t>(store->struct_size, sizeof copy));
    copy.struct_size = sizeof copy;
    mg.set_store(&copy, nsk, block_bytes);
  });
}

kvb_status kvb_store_poll(kvb_manager* m, size_t* num_filling) {
  return with_manager(m, [&](kvb::Manager& mg) {
    size_t n = mg.store_poll();
    if (num_filling) *num_filling = n;
  });
}

kvb_status kvb_seq_store_state(kvb_manager* m, int64_t seq_id, size_t* num_computed_tokens, size_t* num_filling) {
  return with_manager(m, [&](kvb::Manager& mg) {
    if (!num_computed_tokens || !num_filling) fail(Code::invalid_argument, "num_computed_tokens or num_filling is NULL");
    mg.seq_store_state(seq_id, num_computed_tokens, num_filling);
  });
}

}  // extern "C"
