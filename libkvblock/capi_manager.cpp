// C boundary, kvblock.h section 2 "Manager": kvb_config and its KV cache groups read into a
// ManagerConfig, create and destroy.
#include <cstring>
#include <new>

#include "capi_manager.h"
#include "capi_struct.h"

using kvb::Code;
using kvb::fail;
using kvb::guarded;

extern "C" {

void kvb_config_init(kvb_config* cfg) {
  if (!kvb::init_struct(cfg)) return;
  cfg->block_size = 16;
  cfg->event_capacity = 65536;
  cfg->host_cache_twin_percent = 1;
}

void kvb_group_spec_init(kvb_group_spec* spec) {
  kvb::init_struct(spec);
}

namespace {

// The caller's group array, walked by its elements' struct_size (see the header's conventions).
void read_groups(const kvb_config* cfg, kvb::ManagerConfig& c) {
  if (cfg->num_groups == 0) return;
  if (cfg->num_groups > kvb::kMaxKvCacheGroups)
    fail(Code::invalid_argument, "num_groups %zu exceeds %u", cfg->num_groups, kvb::kMaxKvCacheGroups);
  if (!cfg->groups) fail(Code::invalid_argument, "num_groups is %zu but groups is NULL", cfg->num_groups);
  const uint32_t elem = cfg->groups[0].struct_size;
  kvb::require_struct(&cfg->groups[0], offsetof(kvb_group_spec, sink_tokens) + sizeof(uint32_t), "groups[0]");
  const char* base = reinterpret_cast<const char*>(cfg->groups);
  for (size_t g = 0; g < cfg->num_groups; ++g) {
    const kvb_group_spec* gs = reinterpret_cast<const kvb_group_spec*>(base + g * elem);
    if (gs->struct_size != elem)
      fail(Code::invalid_argument, "groups[%zu].struct_size %u differs from groups[0].struct_size %u", g,
           gs->struct_size, elem);
    if (gs->kind != KVB_GROUP_FULL && gs->kind != KVB_GROUP_WINDOW)
      fail(Code::invalid_argument, "groups[%zu].kind %u is not a kvb_group_kind", g, gs->kind);
    kvb::GroupSpec spec;
    spec.window = gs->kind == KVB_GROUP_WINDOW;
    spec.window_tokens = gs->window_tokens;
    spec.sink_tokens = gs->sink_tokens;
    c.groups.push_back(spec);
  }
}

}  // namespace

kvb_status kvb_manager_create(const kvb_config* cfg, kvb_manager** out) {
  return guarded([&] {
    if (!out) fail(Code::invalid_argument, "out is NULL");
    *out = nullptr;
    kvb::require_struct(cfg, offsetof(kvb_config, num_non_cacheable_tokens) + sizeof(size_t), "kvb_config");
    kvb::ManagerConfig c;
    c.block_size = cfg->block_size;
    c.num_blocks = cfg->num_blocks;
    c.num_host_blocks = cfg->num_host_blocks;
    c.watermark = cfg->watermark;
    if (cfg->num_non_cacheable_tokens) {
      // Vocabularies have well under 2^24 ids; a larger count is a caller bug (and ptr + n could wrap).
      constexpr size_t kMaxNonCacheable = size_t{1} << 24;
      if (cfg->num_non_cacheable_tokens > kMaxNonCacheable)
        fail(Code::invalid_argument, "num_non_cacheable_tokens %zu exceeds %zu", cfg->num_non_cacheable_tokens,
             kMaxNonCacheable);
      if (!cfg->non_cacheable_tokens)
        fail(Code::invalid_argument, "num_non_cacheable_tokens is %zu but non_cacheable_tokens is NULL",
             cfg->num_non_cacheable_tokens);
      try {
        c.non_cacheable.assign(cfg->non_cacheable_tokens, cfg->non_cacheable_tokens + cfg->num_non_cacheable_tokens);
      } catch (const std::bad_alloc&) {
        kvb::fail_alloc("the non-cacheable token list", cfg->num_non_cacheable_tokens * sizeof(int64_t),
                        "%zu token ids", cfg->num_non_cacheable_tokens);
      }
    }
    if (KVB_COVERS(cfg, kvb_config, flags)) {
      if (cfg->flags & ~uint32_t{KVB_CONFIG_KEYED_INDEX | KVB_CONFIG_EVENTS | KVB_CONFIG_HOST_CACHE})
        fail(Code::invalid_argument, "unknown config flags 0x%x", cfg->flags);
      c.keyed_index = cfg->flags & KVB_CONFIG_KEYED_INDEX;
      c.events = cfg->flags & KVB_CONFIG_EVENTS;
      c.host_cache = cfg->flags & KVB_CONFIG_HOST_CACHE;
    }
    if (KVB_COVERS(cfg, kvb_config, event_capacity)) c.event_capacity = cfg->event_capacity;
    if (KVB_COVERS(cfg, kvb_config, index_seed)) c.index_seed = cfg->index_seed;
    if (KVB_COVERS(cfg, kvb_config, host_cache_twin_percent)) c.host_twin_percent = cfg->host_cache_twin_percent;
    if (KVB_COVERS(cfg, kvb_config, num_groups)) read_groups(cfg, c);
    kvb::validate_config(c);
    *out = new kvb_manager(c);
  });
}

void kvb_manager_destroy(kvb_manager* m) { delete m; }

}  // extern "C"
