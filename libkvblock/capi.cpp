// The C boundary of the manager: argument checks, the per-manager lock, struct versioning, and the
// translation of C++ errors into kvb_status. Behaviour lives in Manager.
#include <cinttypes>
#include <cstring>

#include "capi_manager.h"
#include "capi_struct.h"

using kvb::Code;
using kvb::fail;
using kvb::guarded;
using kvb::with_manager;

namespace {

void require_tokens(const int64_t* tokens, size_t n) {
  if (!tokens && n > 0) fail(Code::invalid_argument, "tokens is NULL but n is %zu", n);
}

kvb::SeqOptions read_options(const kvb_seq_options* o) {
  kvb::SeqOptions opts;
  if (!o) return opts;
  kvb::require_struct(o, offsetof(kvb_seq_options, sink_tokens) + sizeof(uint32_t), "kvb_seq_options");
  if (o->has_cache_salt > 1) fail(Code::invalid_argument, "has_cache_salt must be 0 or 1, got %u", o->has_cache_salt);
  opts.has_salt = o->has_cache_salt != 0;
  opts.salt = o->cache_salt;
  opts.extra_key_blocks = o->extra_key_blocks;
  opts.extra_keys = o->extra_keys;
  opts.num_extra_keys = o->num_extra_keys;
  opts.window = o->window_tokens;
  opts.sink = o->sink_tokens;
  return opts;
}

}  // namespace

extern "C" {

const char* kvb_status_string(kvb_status s) {
  switch (s) {
    case KVB_OK: return "KVB_OK";
    case KVB_ERR_INVALID_ARGUMENT: return "KVB_ERR_INVALID_ARGUMENT";
    case KVB_ERR_OUT_OF_BLOCKS: return "KVB_ERR_OUT_OF_BLOCKS";
    case KVB_ERR_NO_SUCH_SEQUENCE: return "KVB_ERR_NO_SUCH_SEQUENCE";
    case KVB_ERR_SEQUENCE_EXISTS: return "KVB_ERR_SEQUENCE_EXISTS";
    case KVB_ERR_BAD_STATE: return "KVB_ERR_BAD_STATE";
    case KVB_ERR_OUT_OF_MEMORY: return "KVB_ERR_OUT_OF_MEMORY";
    case KVB_ERR_DEVICE: return "KVB_ERR_DEVICE";
    case KVB_ERR_UNSUPPORTED: return "KVB_ERR_UNSUPPORTED";
    case KVB_ERR_BUFFER_TOO_SMALL: return "KVB_ERR_BUFFER_TOO_SMALL";
    case KVB_ERR_INTERNAL: return "KVB_ERR_INTERNAL";
  }
  return "KVB_UNKNOWN_STATUS";
}

const char* kvb_last_error(void) { return kvb::last_error(); }

uint32_t kvb_version(void) { return KVB_VERSION_MAJOR * 10000 + KVB_VERSION_MINOR * 100 + KVB_VERSION_PATCH; }

#define KVB_STR2(x) #x
#define KVB_STR(x) KVB_STR2(x)
const char* kvb_version_string(void) {
  return KVB_STR(KVB_VERSION_MAJOR) "." KVB_STR(KVB_VERSION_MINOR) "." KVB_STR(KVB_VERSION_PATCH);
}

void kvb_config_init(kvb_config* cfg) {
  if (!cfg) return;
  std::memset(static_cast<void*>(cfg), 0, sizeof *cfg);
  cfg->struct_size = sizeof *cfg;
  cfg->block_size = 16;
  cfg->event_capacity = 65536;
  cfg->host_cache_twin_percent = 1;
}

void kvb_group_spec_init(kvb_group_spec* spec) {
  if (!spec) return;
  std::memset(static_cast<void*>(spec), 0, sizeof *spec);
  spec->struct_size = sizeof *spec;
}

namespace {

// The caller's group array, walked by its elements' struct_size (see the header's conventions).
void read_groups(const kvb_config* cfg, kvb::ManagerConfig& c) {
  if (cfg->num_groups == 0) return;
  constexpr size_t kMaxGroups = kvb::kMaxForkGroups;
  if (cfg->num_groups > kMaxGroups) fail(Code::invalid_argument, "num_groups %zu exceeds %zu", cfg->num_groups, kMaxGroups);
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

kvb_status kvb_seq_can_allocate_ex(kvb_manager* m, const int64_t* tokens, size_t n, const kvb_seq_options* opts,
                                   size_t* num_cached_tokens) {
  return with_manager(m, [&](kvb::Manager& mg) {
    if (!num_cached_tokens) fail(Code::invalid_argument, "num_cached_tokens is NULL");
    require_tokens(tokens, n);
    kvb::SeqOptions o = read_options(opts);
    size_t cached = 0;
    bool ok = mg.can_allocate(tokens, n, o, &cached);
    *num_cached_tokens = cached;
    if (!ok)
      fail(Code::out_of_blocks, "not enough free blocks for a prompt of %zu token%s (%zu cached)", n, kvb::plural_s(n),
           cached);
  });
}

kvb_status kvb_seq_can_allocate(kvb_manager* m, const int64_t* tokens, size_t n, size_t* num_cached_tokens) {
  return kvb_seq_can_allocate_ex(m, tokens, n, nullptr, num_cached_tokens);
}

kvb_status kvb_seq_allocate_ex(kvb_manager* m, int64_t seq_id, const int64_t* tokens, size_t n,
                               const kvb_seq_options* opts, size_t* num_cached_tokens) {
  return with_manager(m, [&](kvb::Manager& mg) {
    require_tokens(tokens, n);
    kvb::SeqOptions o = read_options(opts);
    size_t cached = mg.allocate(seq_id, tokens, n, o);
    if (num_cached_tokens) *num_cached_tokens = cached;
  });
}

kvb_status kvb_seq_allocate(kvb_manager* m, int64_t seq_id, const int64_t* tokens, size_t n, size_t* num_cached_tokens) {
  return kvb_seq_allocate_ex(m, seq_id, tokens, n, nullptr, num_cached_tokens);
}

kvb_status kvb_seq_commit(kvb_manager* m, int64_t seq_id, size_t num_tokens) {
  return with_manager(m, [&](kvb::Manager& mg) { mg.commit(seq_id, num_tokens); });
}

kvb_status kvb_seq_can_append(kvb_manager* m, int64_t seq_id, size_t num_tokens) {
  return with_manager(m, [&](kvb::Manager& mg) {
    if (!mg.can_append(seq_id, num_tokens))
      fail(Code::out_of_blocks, "seq %" PRId64 ": not enough free blocks to append %zu token%s", seq_id, num_tokens,
           kvb::plural_s(num_tokens));
  });
}

kvb_status kvb_seq_append(kvb_manager* m, int64_t seq_id, const int64_t* tokens, size_t n) {
  return with_manager(m, [&](kvb::Manager& mg) {
    require_tokens(tokens, n);
    mg.append(seq_id, tokens, n);
  });
}

kvb_status kvb_seq_free(kvb_manager* m, int64_t seq_id) {
  return with_manager(m, [&](kvb::Manager& mg) { mg.free_seq(seq_id); });
}

kvb_status kvb_seq_block_table(kvb_manager* m, int64_t seq_id, int32_t* out, size_t capacity, size_t* len) {
  return kvb_seq_block_table_group(m, seq_id, 0, out, capacity, len);
}

kvb_status kvb_seq_block_table_group(kvb_manager* m, int64_t seq_id, uint32_t group, int32_t* out, size_t capacity,
                                     size_t* len) {
  return with_manager(m, [&](kvb::Manager& mg) {
    if (!len) fail(Code::invalid_argument, "len is NULL");
    const std::vector<int32_t>& t = mg.block_table(seq_id, group);
    *len = t.size();
    if (capacity < t.size())
      fail(Code::buffer_too_small, "seq %" PRId64 ": block table has %zu entr%s, capacity is %zu", seq_id, t.size(),
           t.size() == 1 ? "y" : "ies",
           capacity);
    if (!out) fail(Code::invalid_argument, "out is NULL");
    std::memcpy(out, t.data(), t.size() * sizeof(int32_t));
  });
}

kvb_status kvb_num_free_blocks(kvb_manager* m, size_t* n) {
  return with_manager(m, [&](kvb::Manager& mg) {
    if (!n) fail(Code::invalid_argument, "n is NULL");
    *n = mg.num_free();
  });
}

kvb_status kvb_check_invariants(kvb_manager* m) {
  return with_manager(m, [&](kvb::Manager& mg) { mg.check_invariants(); });
}

void kvb_seq_options_init(kvb_seq_options* opts) {
  if (!opts) return;
  std::memset(static_cast<void*>(opts), 0, sizeof *opts);
  opts->struct_size = sizeof *opts;
}

kvb_status kvb_seq_set_extra_key(kvb_manager* m, int64_t seq_id, uint32_t block_index, uint64_t key) {
  return with_manager(m, [&](kvb::Manager& mg) { mg.set_extra_key(seq_id, block_index, key); });
}

void kvb_seq_info_init(kvb_seq_info* info) {
  if (!info) return;
  std::memset(static_cast<void*>(info), 0, sizeof *info);
  info->struct_size = sizeof *info;
}

kvb_status kvb_seq_get_info(kvb_manager* m, int64_t seq_id, kvb_seq_info* info) {
  return with_manager(m, [&](kvb::Manager& mg) {
    kvb::require_struct(info, offsetof(kvb_seq_info, sink_tokens) + sizeof(uint32_t), "kvb_seq_info");
    const kvb::Sequence& s = mg.sequence(seq_id);
    kvb_seq_info r;
    kvb_seq_info_init(&r);
    r.location = s.swapped ? KVB_SEQ_SWAPPED_OUT : KVB_SEQ_ON_DEVICE;
    r.num_tokens = s.num_tokens;
    r.num_computed = s.num_computed;
    r.num_cached = s.num_cached;
    r.num_blocks = s.table.size();
    uint64_t held = 0;
    for (int32_t b : s.swapped ? s.host_table : s.table) held += b >= 0;
    for (const kvb::Sequence& g : s.more)  // the other KV cache groups (swapped with group 0)
      if (g.live)
        for (int32_t b : g.swapped ? g.host_table : g.table) held += b >= 0;
    r.num_held_blocks = held;
    r.window_tokens = s.window;
    r.sink_tokens = s.sink;
    kvb::write_versioned(info, r);
  });
}

void kvb_stats_init(kvb_stats* stats) {
  if (!stats) return;
  std::memset(static_cast<void*>(stats), 0, sizeof *stats);
  stats->struct_size = sizeof *stats;
}

// kvb_stats grew the store-tier counters after KVB_0.1 (abi/ABI.md, "Symbol versions"): a binary linked
// against KVB_0.1 binds this one, which writes only the 0.1 layout (up to cached_host_blocks). (A name
// outside kvb_*, so that only its versioned alias is exported.)
static constexpr size_t kStatsSize01 = offsetof(kvb_stats, store_hit_tokens);
KVB_API void kvbv01_stats_init(kvb_stats* stats) {
  if (!stats) return;
  std::memset(static_cast<void*>(stats), 0, kStatsSize01);
  stats->struct_size = uint32_t(kStatsSize01);
}
__asm__(".symver kvbv01_stats_init, kvb_stats_init@KVB_0.1");

kvb_status kvb_get_stats(kvb_manager* m, kvb_stats* stats) {
  return with_manager(m, [&](kvb::Manager& mg) {
    kvb::require_struct(stats, offsetof(kvb_stats, events_dropped) + sizeof(uint64_t), "kvb_stats");
    kvb::Stats s = mg.stats();
    kvb_stats r;
    kvb_stats_init(&r);
    r.block_size = mg.config().block_size;
    r.num_blocks = mg.config().num_blocks;
    r.free_blocks = s.free_blocks;
    r.used_blocks = s.used_blocks;
    r.cached_free_blocks = s.cached_free_blocks;
    r.num_seqs = s.num_seqs;
    r.query_tokens = s.query_tokens;
    r.hit_tokens = s.hit_tokens;
    r.computed_tokens = s.computed_tokens;
    r.evictions = s.evictions;
    r.cow_copies = s.cow_copies;
    r.swapped_out_blocks = s.swapped_out_blocks;
    r.swapped_in_blocks = s.swapped_in_blocks;
    r.num_host_blocks = mg.config().num_host_blocks;
    r.free_host_blocks = s.free_host_blocks;
    r.events_dropped = s.events_dropped;
    r.device_hit_tokens = s.device_hit_tokens;
    r.host_hit_tokens = s.host_hit_tokens;
    r.offloaded_blocks = s.offloaded_blocks;
    r.loaded_blocks = s.loaded_blocks;
    r.host_evictions = s.host_evictions;
    r.cached_host_blocks = s.cached_host_blocks;
    r.store_hit_tokens = s.store_hit_tokens;
    r.store_put_blocks = s.store_put_blocks;
    r.store_put_bytes = s.store_put_bytes;
    r.store_put_failures = s.store_put_failures;
    r.store_get_blocks = s.store_get_blocks;
    r.store_get_bytes = s.store_get_bytes;
    r.store_get_failures = s.store_get_failures;
    r.store_recomputed_tokens = s.store_recomputed_tokens;
    r.store_filling_blocks = s.store_filling_blocks;
    kvb::write_versioned(stats, r);
  });
}

}  // extern "C"
