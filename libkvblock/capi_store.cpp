// The C boundary of the store tier (kvblock.h, "Store tier"): argument checks and struct versioning.
#include <cinttypes>
#include <cmath>
#include <cstring>

#include "capi_manager.h"
#include "capi_struct.h"

using kvb::Code;
using kvb::fail;
using kvb::with_manager;

namespace {

constexpr size_t kNamespaceSize1 = offsetof(kvb_store_namespace, model_id) + sizeof(uint64_t);
constexpr size_t kStoreSize1 = offsetof(kvb_store, poll) + sizeof(kvb_store::poll);

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

void check_scale(float s, const char* what, size_t i) {
  if (!(std::isfinite(s) && s > 0.f))
    fail(Code::invalid_argument, "kvb_store_namespace.%s[%zu] is %g: an fp8 scale must be finite and > 0", what, i,
         static_cast<double>(s));
}

// fp8 bytes are x / scale: every (layer, K then V, kv head) scale, from layer_scales or k_scale / v_scale.
std::vector<float> fp8_scales(const kvb_store_namespace& ns) {
  const size_t heads = ns.num_kv_heads, per_kv = static_cast<size_t>(ns.num_layers) * heads;
  std::vector<float> out;
  out.reserve(2 * per_kv);
  if (!ns.layer_scales) {
    check_scale(ns.k_scale, "k_scale", 0);
    check_scale(ns.v_scale, "v_scale", 0);
    for (uint32_t l = 0; l < ns.num_layers; ++l) {
      out.insert(out.end(), heads, ns.k_scale);
      out.insert(out.end(), heads, ns.v_scale);
    }
    return out;
  }
  const uint32_t per = ns.scales_per_layer;
  if (per != 1 && per != ns.num_kv_heads)
    fail(Code::invalid_argument, "kvb_store_namespace.scales_per_layer %u must be 1 or num_kv_heads (%u)", per,
         ns.num_kv_heads);
  const size_t n = static_cast<size_t>(ns.num_layers) * 2 * per;
  for (size_t i = 0; i < n; ++i) check_scale(ns.layer_scales[i], "layer_scales", i);
  for (size_t i = 0; i < 2 * static_cast<size_t>(ns.num_layers); ++i)  // (layer, K / V) in order
    for (size_t h = 0; h < heads; ++h) out.push_back(ns.layer_scales[i * per + (per == 1 ? 0 : h)]);
  return out;
}

kvb::StoreNamespace read_namespace(const kvb_store_namespace* in) {
  const kvb_store_namespace ns =
      kvb::read_versioned(in, kNamespaceSize1, kvb_store_namespace_init, "kvb_store_namespace", nullptr);
  dtype_bytes(ns.dtype);
  kvb::StoreNamespace out;
  out.dtype = ns.dtype;
  out.block_size = ns.block_size;
  out.num_layers = ns.num_layers;
  out.num_kv_heads = ns.num_kv_heads;
  out.head_dim = ns.head_dim;
  out.model_id = ns.model_id;
  if (ns.dtype == KVB_DTYPE_FP8_E4M3 || ns.dtype == KVB_DTYPE_FP8_E5M2) out.scales = fp8_scales(ns);
  return out;
}

}  // namespace

extern "C" {

void kvb_store_init(kvb_store* store) {
  kvb::init_struct(store);
}

void kvb_store_namespace_init(kvb_store_namespace* ns) {
  if (!kvb::init_struct(ns)) return;
  ns->k_scale = ns->v_scale = 1.f;
}

kvb_status kvb_store_key_fold(const kvb_store_namespace* ns, uint64_t index_key_lo, uint64_t index_key_hi,
                              kvb_store_key* out) {
  return kvb::guarded([&] {
    if (!out) fail(Code::invalid_argument, "out is NULL");
    const kvb::Key128 nsk = kvb::store_namespace_key(read_namespace(ns));
    kvb::Key128 k = kvb::fold_store_key(kvb::Key128{index_key_lo, index_key_hi}, nsk);
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
    const kvb_store st = kvb::read_versioned(store, kStoreSize1, kvb_store_init, "kvb_store", nullptr);
    if (st.flags & ~static_cast<uint32_t>(KVB_STORE_WRITE_THROUGH))
      fail(Code::invalid_argument, "kvb_store.flags 0x%x has unknown bits", st.flags);
    if (!st.lookup || !st.put || !st.get || !st.poll)
      fail(Code::invalid_argument, "kvb_store: lookup, put, get and poll are all required (%s is NULL)",
           !st.lookup ? "lookup" : !st.put ? "put" : !st.get ? "get" : "poll");
    const kvb::StoreNamespace space = read_namespace(ns);
    const kvb::ManagerConfig& cfg = mg.config();
    if (space.block_size != cfg.block_size)
      fail(Code::invalid_argument, "kvb_store_namespace.block_size %u differs from the manager's %u", space.block_size,
           cfg.block_size);
    if (space.num_layers == 0 || space.num_kv_heads == 0 || space.head_dim == 0)
      fail(Code::invalid_argument, "kvb_store_namespace: num_layers %u, num_kv_heads %u, head_dim %u must all be > 0",
           space.num_layers, space.num_kv_heads, space.head_dim);
    if (!cfg.host_cache)
      fail(Code::bad_state, "a store needs KVB_CONFIG_HOST_CACHE: host blocks are its staging buffers");
    if (cfg.keyed_index && cfg.index_seed == 0)
      fail(Code::bad_state, "the manager's keyed index has a random seed: its keys match no other manager's; "
           "set kvb_config.index_seed (shared by the engines) to use a store");
    const uint64_t block_bytes = 2ull * dtype_bytes(space.dtype) * space.block_size * space.num_layers *
                                 space.num_kv_heads * space.head_dim;
    // A store that states its memory must move this manager's host blocks (not the device cache's, nor
    // another host cache's): otherwise its puts write other blocks' bytes under valid checksums.
    if (st.num_host_blocks != 0 && st.num_host_blocks != cfg.num_host_blocks)
      fail(Code::invalid_argument,
           "kvb_store.num_host_blocks %u differs from the manager's num_host_blocks %u%s: the store must read and "
           "write this manager's host cache",
           st.num_host_blocks, cfg.num_host_blocks,
           st.num_host_blocks == cfg.num_blocks ? " (it is the device block count: a store over the device cache?)"
                                                : "");
    if (st.block_bytes != 0 && st.block_bytes != block_bytes)
      fail(Code::invalid_argument,
           "kvb_store.block_bytes %" PRIu64 " differs from the namespace's %" PRIu64
           " (dtype %u, block_size %u, num_layers %u, num_kv_heads %u, head_dim %u): the store's memory has "
           "another layout",
           st.block_bytes, block_bytes, space.dtype, space.block_size, space.num_layers, space.num_kv_heads,
           space.head_dim);
    mg.set_store(&st, kvb::store_namespace_key(space), block_bytes);
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
