// The fuzz target's manager configuration (tests/fuzz/fuzz_capi.cpp), decoded from the input's first
// bytes: bytes 0-3 the pool, flags, host tier and an invalid configuration tried first (sometimes), byte 4
// and two bytes per group the KV cache groups. Included only by fuzz_capi.cpp.
#pragma once
#include <cstdint>
#include <cstdio>
#include <vector>

#include "fuzz_harness.h"
#include "fuzz_model.h"
#include "fuzz_store.h"
#include "kvblock.h"
#include "kvbt_state.h"

namespace kvbfuzz {

constexpr uint32_t kBlockSizes[] = {1, 2, 4, 8, 16};

// Byte 4's top bit: 1-3 groups, each full attention or a window smaller than, equal to or larger than a
// block, with or without sinks (two bytes per group).
inline std::vector<Window> decode_groups(Reader& r, uint8_t c4, uint32_t bs) {
  std::vector<Window> groups;
  if (!(c4 & 0x80)) return groups;
  const uint32_t n = 1 + (c4 & 3) % 3;
  for (uint32_t g = 0; g < n; ++g) {
    const uint8_t kind = r.u8(), v = r.u8();
    Window w;
    w.on = kind & 1;
    if (w.on) {
      switch ((kind >> 1) & 3) {
        case 0: w.tokens = bs > 1 ? 1 + v % (bs - 1) : 1; break;  // smaller than a block (block size 1: equal)
        case 1: w.tokens = bs; break;
        default: w.tokens = bs + 1 + v % (3 * bs); break;
      }
      if (kind & 8) w.sinks = 1 + (v >> 4) % (2 * bs);
    }
    groups.push_back(w);
  }
  return groups;
}

// Creates the manager the input describes and starts the model with its configuration.
inline kvb_manager* make_manager(Reader& r, Model& md, bool trace) {
  static const int64_t kNonCacheable[] = {7};
  const uint8_t c0 = r.u8(), c1 = r.u8(), c2 = r.u8(), c3 = r.u8(), c4 = r.u8();
  const std::vector<Window> groups = decode_groups(r, c4, kBlockSizes[c0 % 5]);
  kvb_config cfg;
  kvb_config_init(&cfg);
  static const float kWatermarks[] = {0.0f, 0.0f, 0.1f, 0.3f};
  cfg.block_size = kBlockSizes[c0 % 5];
  cfg.num_blocks = 1 + c1 % 40;
  cfg.num_host_blocks = (c2 & 3) ? c2 % 24 : 0;
  cfg.watermark = kWatermarks[(c0 >> 3) & 3];
  cfg.flags = (c3 & 1 ? KVB_CONFIG_KEYED_INDEX : 0) | (c3 & 2 ? KVB_CONFIG_EVENTS : 0);
  cfg.event_capacity = 1 + ((c3 >> 2) & 15);
  if (cfg.num_host_blocks > 0 && (c2 & 0x40)) {  // host blocks as a second prefix-cache level
    static const uint32_t kTwinPercents[] = {0, 1, 50, 100};
    cfg.flags |= KVB_CONFIG_HOST_CACHE;
    cfg.host_cache_twin_percent = kTwinPercents[c1 >> 6];
  }
  cfg.index_seed = 0x1234;
  if (c0 & 0x80) {
    cfg.non_cacheable_tokens = kNonCacheable;
    cfg.num_non_cacheable_tokens = 1;
  }
  if ((c2 & 0xf0) == 0xf0) {  // an invalid configuration must be refused cleanly
    kvb_config bad = cfg;
    kvb_manager* bm = reinterpret_cast<kvb_manager*>(&bad);  // must be overwritten with NULL
    const kvb_config* pass = &bad;
    switch (c3 >> 6) {
      case 0: bad.block_size = (c1 & 1) ? 0 : (1u << 17); break;
      case 1: bad.num_blocks = 0; bad.watermark = (c1 & 1) ? 1.0f : -0.5f; break;
      case 2:
        if (c1 & 2) {  // a host cache without host blocks, or a twin share over 100%
          bad.flags = KVB_CONFIG_HOST_CACHE;
          if (c1 & 4) bad.num_host_blocks = 0;
          else bad.host_cache_twin_percent = 101;
          break;
        }
        bad.flags = 0x80;
        bad.struct_size = (c1 & 1) ? 4 : bad.struct_size;
        break;
      default:
        if (c1 & 2) {  // KV cache groups that cannot run: a window of 0 or an unknown kind, sinks on a full group, NULL
          static kvb_group_spec specs[2];
          kvb_group_spec_init(&specs[0]);
          kvb_group_spec_init(&specs[1]);
          specs[1].kind = (c1 & 4) ? KVB_GROUP_WINDOW : 9;
          specs[0].sink_tokens = (c1 & 8) ? 3 : 0;
          bad.groups = (c1 & 16) ? nullptr : specs;
          bad.num_groups = 2;
        } else if (c1 & 1) {
          pass = nullptr;
        } else {
          bad.non_cacheable_tokens = nullptr;
          bad.num_non_cacheable_tokens = 3;
        }
        break;
    }
    prime_last_error();
    kvb_status s = kvb_manager_create(pass, &bm);
    check_failure(s, "manager_create(invalid)");
    REQUIRE(bm == nullptr, "failed manager_create left *out non-NULL");
  }
  std::vector<kvb_group_spec> specs(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    kvb_group_spec_init(&specs[g]);
    specs[g].kind = groups[g].on ? KVB_GROUP_WINDOW : KVB_GROUP_FULL;
    specs[g].window_tokens = groups[g].tokens;
    specs[g].sink_tokens = groups[g].sinks;
  }
  cfg.groups = specs.data();
  cfg.num_groups = specs.size();
  kvb_manager* m = nullptr;
  kvb_status cs = kvb_manager_create(&cfg, &m);
  REQUIRE(cs == KVB_OK && m, "manager_create: %s", kvb_status_string(cs));
  md.bs = cfg.block_size;
  md.nblocks = cfg.num_blocks;
  md.nhost = cfg.num_host_blocks;
  md.noncache7 = cfg.num_non_cacheable_tokens > 0;
  md.content.assign(md.nblocks, 0);
  md.host_cache = (cfg.flags & KVB_CONFIG_HOST_CACHE) != 0;
  md.kv.assign(md.nblocks, 0);
  md.host_kv.assign(md.nhost, 0);
  if (trace)
    std::fprintf(stderr, "config: block_size %u, %u blocks, %u host, watermark %g, flags %u, non-cacheable %d, twins %u%%\n",
                 cfg.block_size, cfg.num_blocks, cfg.num_host_blocks, static_cast<double>(cfg.watermark), cfg.flags,
                 md.noncache7, cfg.host_cache_twin_percent);
  md.groups = groups;
  for (size_t g = 0; trace && g < groups.size(); ++g)
    std::fprintf(stderr, groups[g].on ? "  group %zu: window %u tokens, %u sinks\n" : "  group %zu: full\n", g,
                 groups[g].tokens, groups[g].sinks);
  // A store tier below the host cache (no groups: refused with them), write-through or not: byte 1's bit 5.
  g_store = FuzzStore();
  if (md.host_cache && groups.empty() && (c1 & 0x20)) store_register(m, md, static_cast<uint8_t>(c3 >> 6 | c0 << 2));
  if (trace && g_store.on) std::fprintf(stderr, "  store tier on\n");
  // Block hashes in the before/after snapshots cost one failing call per unhashed block: small pools only.
  kvbt_state_hashes = md.nblocks <= 8 || (c2 & 0x08);
  kvbt_state_groups = md.num_tables();
  return m;
}

}  // namespace kvbfuzz
