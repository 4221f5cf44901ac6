// Differential test of the block manager: the pool configurations every seed runs against, and the
// activity counters printed with each configuration's result line.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kvblock.h"
#include "model.h"

namespace {

struct Config {
  const char* name;
  uint32_t bs, N, host;
  bool nc;        // non-cacheable token configured (and used in prompts)
  float wm;       // watermark
  uint32_t flags; // kvb_config_flags
  int vocab;
  int steps;
  int seed_weight;  // seeds per configuration = weight * base seeds / 4
  uint32_t twin_pct = 1;  // host_cache_twin_percent (with KVB_CONFIG_HOST_CACHE)
  const char* groups = nullptr;  // KV cache groups, "full,window:W[:sinks],..." (nullptr: none)
  uint32_t store = 0;  // an in-memory store as the third level: 0 none, 1 write-back, 2 + write-through
};

constexpr uint32_t kHostCache = KVB_CONFIG_HOST_CACHE | KVB_CONFIG_EVENTS;

const Config kConfigs[] = {
    {"bs1_tiny", 1, 6, 4, false, 0.0f, 0, 3, 200, 12},
    {"bs1_small_nc", 1, 40, 16, true, 0.0f, 0, 4, 200, 4},
    {"bs1_large_wm", 1, 2000, 300, false, 0.05f, 0, 3, 250, 1},
    {"bs2_tiny", 2, 4, 3, false, 0.0f, 0, 3, 200, 12},
    {"bs2_small_wm_nc", 2, 24, 12, true, 0.1f, 0, 3, 200, 4},
    {"bs2_medium_keyed", 2, 200, 64, false, 0.0f, KVB_CONFIG_KEYED_INDEX, 4, 250, 2},
    {"bs4_tiny", 4, 5, 2, false, 0.0f, 0, 3, 200, 12},
    {"bs4_tiny_nc", 4, 8, 8, true, 0.0f, 0, 3, 200, 12},
    {"bs4_small", 4, 32, 16, false, 0.0f, 0, 3, 250, 4},
    {"bs4_small_wm", 4, 48, 0, true, 0.1f, 0, 4, 250, 4},
    {"bs4_large", 4, 3000, 500, true, 0.02f, 0, 3, 250, 1},
    {"bs16_tiny", 16, 6, 4, false, 0.0f, 0, 2, 200, 12},
    {"bs16_small_nc", 16, 24, 16, true, 0.0f, 0, 2, 200, 4},
    {"bs16_medium_wm", 16, 128, 64, false, 0.05f, KVB_CONFIG_KEYED_INDEX, 3, 250, 2},
    {"bs32_tiny", 32, 4, 4, false, 0.0f, 0, 2, 200, 12},
    {"bs32_small_nc_wm", 32, 20, 10, true, 0.1f, 0, 2, 200, 4},
    {"bs32_large", 32, 1024, 256, false, 0.0f, 0, 2, 250, 1},
    // Host blocks as a second prefix-cache level (with events, so that the medium is checked too).
    {"host_bs1_tiny", 1, 12, 8, false, 0.0f, kHostCache, 3, 200, 8, 0},
    {"host_bs2_tiny_twins", 2, 10, 8, false, 0.0f, kHostCache, 3, 200, 8, 50},
    {"host_bs2_small_nc_wm", 2, 16, 10, true, 0.1f, kHostCache, 3, 200, 4, 1},
    {"host_bs4_tiny_all_twins", 4, 10, 6, false, 0.0f, kHostCache, 2, 200, 8, 100},
    {"host_bs4_small_keyed", 4, 24, 40, false, 0.0f, kHostCache | KVB_CONFIG_KEYED_INDEX, 3, 250, 4, 10},
    {"host_bs16_tiny", 16, 5, 8, true, 0.0f, kHostCache, 2, 200, 8, 25},
    {"host_bs4_medium", 4, 64, 48, false, 0.02f, kHostCache, 4, 250, 1, 1},
    // KV cache groups over one pool: the hit valid for every group (window groups take only the blocks
    // the first uncached token's window and sinks need), per-group tables, events with their group.
    {"grp_bs4_full_window", 4, 18, 0, false, 0.0f, KVB_CONFIG_EVENTS, 3, 200, 3, 1, "full,window:6"},
    {"grp_bs4_window_sinks_nc", 4, 24, 0, true, 0.0f, KVB_CONFIG_EVENTS, 3, 200, 4, 1, "full,window:5:3"},
    {"grp_bs4_window_lt_block", 4, 16, 0, false, 0.0f, KVB_CONFIG_EVENTS | KVB_CONFIG_KEYED_INDEX, 3, 200, 3, 1,
     "window:3,full"},
    {"grp_bs2_two_windows_wm", 2, 30, 0, false, 0.1f, KVB_CONFIG_EVENTS, 3, 200, 6, 1, "window:3:1,full,window:8"},
    {"grp_bs1_window1", 1, 14, 0, false, 0.0f, KVB_CONFIG_EVENTS, 3, 200, 4, 1, "full,window:1"},
    {"grp_bs8_window_eq_block", 8, 16, 0, true, 0.0f, 0, 2, 200, 2, 1, "full,window:8:8"},
    {"grp_bs4_window_alone", 4, 10, 0, false, 0.0f, KVB_CONFIG_EVENTS, 3, 200, 6, 1, "window:7:2"},
    // ... with host blocks: swapping moves every group at once; the host cache level keeps each group's
    // blocks apart and feeds the hit rule (a block is cached on the device or the host).
    {"grp_swap_bs2_window_full", 2, 24, 16, false, 0.0f, KVB_CONFIG_EVENTS, 3, 200, 3, 1, "window:5:1,full"},
    {"grp_host_bs4_full_window", 4, 16, 12, false, 0.0f, kHostCache, 3, 200, 3, 0, "full,window:6"},
    {"grp_host_bs2_sinks_twins_nc", 2, 20, 16, true, 0.0f, kHostCache | KVB_CONFIG_KEYED_INDEX, 3, 200, 4, 50,
     "full,window:5:3,window:2"},
    // A store below the host cache (store_mem.h): lookups past the host, gets with injected failures,
    // puts at host eviction (and write-through), STORED events on the store medium.
    {"store_bs1_tiny", 1, 10, 4, false, 0.0f, kHostCache, 3, 200, 6, 0, nullptr, 1},
    {"store_bs2_tiny_through", 2, 10, 5, false, 0.0f, kHostCache, 3, 200, 6, 50, nullptr, 2},
    {"store_bs4_small_nc_wm", 4, 20, 8, true, 0.1f, kHostCache, 3, 200, 4, 1, nullptr, 1},
    {"store_bs4_keyed_through", 4, 16, 6, false, 0.0f, kHostCache | KVB_CONFIG_KEYED_INDEX, 3, 200, 4, 25, nullptr,
     2},
    {"store_bs16_tiny", 16, 6, 3, false, 0.0f, kHostCache, 2, 200, 4, 0, nullptr, 1},
    {"store_bs2_small_host2", 2, 24, 2, false, 0.0f, kHostCache, 3, 250, 4, 0, nullptr, 2},
};

// "full,window:6:2" -> a full group and a window group of 6 tokens with 2 sink tokens.
std::vector<MGroupSpec> parse_groups(const char* text) {
  std::vector<MGroupSpec> out;
  for (const char* p = text; p && *p;) {
    MGroupSpec g;
    if (!strncmp(p, "window:", 7)) {
      char* end = nullptr;
      g.window = true;
      g.window_tokens = static_cast<uint32_t>(strtoul(p + 7, &end, 10));
      if (*end == ':') g.sink_tokens = static_cast<uint32_t>(strtoul(end + 1, &end, 10));
      p = end;
    } else {
      p += strlen("full");
    }
    out.push_back(g);
    if (*p == ',') ++p;
  }
  return out;
}

constexpr int64_t kNC = 1000;  // the non-cacheable (image placeholder) token

// Activity over a configuration's runs (printed with its result line, so a reader sees what was exercised).
struct Activity {
  uint64_t seeds = 0, steps = 0, allocs = 0, alloc_oob = 0, hit_tokens = 0, commits = 0, appends = 0, forks = 0,
           cow = 0, rollbacks = 0, released = 0, swaps_out = 0, swaps_in = 0, evictions = 0, errors = 0,
           host_hit_tokens = 0, offloads = 0, loads = 0, host_evictions = 0, events = 0, window_skipped = 0,
           window_cut = 0, store_hit_tokens = 0, store_puts = 0, store_gets = 0, store_failed_gets = 0;
  uint64_t trees = 0, tree_commits = 0, slot_pairs = 0;
};
Activity g_act;


}  // namespace
