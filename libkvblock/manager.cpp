// Construction of a manager: the configuration's validation, then the pools, indexes and the per-block
// arrays the configuration uses.
#include <algorithm>
#include <cmath>
#include <new>

#include "error.h"
#include "manager.h"

namespace kvb {

static constexpr uint32_t kMaxBlockSize = 1u << 16;

Manager::Manager(const ManagerConfig& cfg)
    : cfg_((validate_config(cfg), cfg)),
      bs_(cfg.block_size),
      watermark_blocks_(static_cast<uint32_t>(std::floor(static_cast<double>(cfg.watermark) * cfg.num_blocks))),
      keys_(cfg.keyed_index ? (cfg.index_seed ? cfg.index_seed : os_random_u64()) : 0),
      device_(cfg.num_blocks, cfg.block_size, 8, "the device block pool", "the device prefix index", KVB_MEDIUM_DEVICE),
      host_(cfg.num_host_blocks, cfg.block_size, 2, "the host block pool", "the host prefix index", KVB_MEDIUM_HOST),
      groups_(cfg.groups.size()) {
  plain_ = !cfg.host_cache && !grouped() && !cfg.events;
  keys_.non_cacheable = cfg.non_cacheable;
  std::sort(keys_.non_cacheable.begin(), keys_.non_cacheable.end());
  keys_.non_cacheable.erase(std::unique(keys_.non_cacheable.begin(), keys_.non_cacheable.end()), keys_.non_cacheable.end());
  if (cfg.events) {
    events_.enable(cfg.event_capacity, bs_);
    device_.hashes.reset(new HashCounts(cfg.num_blocks, "the device event hash counts"));
    device_.events = &events_;
    if (cfg.host_cache) {
      host_.hashes.reset(new HashCounts(cfg.num_host_blocks, "the host event hash counts"));
      host_.events = &events_;
    }
  }
  try {
    allocate_block_arrays();
  } catch (const std::bad_alloc&) {
    const bool many = groups_.count > 1, host = cfg.host_cache, ev = cfg.events;
    const unsigned long long device = (ev ? sizeof(ParentRef) : 0) + (host ? sizeof(BlockPair) : 0) + many +
                                      (grouped() ? sizeof(int64_t) : 0);
    const unsigned long long host_each = 2 * sizeof(int32_t) + (host ? sizeof(BlockPair) : 0) + (many && host) +
                                         (ev && host ? sizeof(ParentRef) : 0);
    fail_alloc("the manager's per-block arrays", device * cfg.num_blocks + host_each * cfg.num_host_blocks,
               "%llu bytes for each of %u device blocks and %llu for each of %u host blocks", device, cfg.num_blocks,
               host_each, cfg.num_host_blocks);
  }
}

// Per-block arrays beside the pools: only those the configuration uses.
void Manager::allocate_block_arrays() {
  const ManagerConfig& cfg = cfg_;
  if (groups_.count > 1) device_.group.assign(cfg.num_blocks, 0);
  if (groups_.count > 1 && cfg.host_cache) host_.group.assign(cfg.num_host_blocks, 0);
  if (grouped()) {
    groups_.parked_for.assign(cfg.num_blocks, 0);
    groups_.cached.assign(groups_.count, 0);
    device_.group_cached = host_.group_cached = groups_.cached.data();
  }
  // Host blocks start empty (a stack: block 0 is taken first), not in the host pool's queue.
  host_blocks_.empty.reserve(cfg.num_host_blocks);
  while (host_.pool.num_free() > 0) host_blocks_.empty.push_back(host_.pool.pop_head());
  std::reverse(host_blocks_.empty.begin(), host_blocks_.empty.end());
  host_blocks_.twin.assign(cfg.num_host_blocks, -1);
  host_blocks_.twin_budget = static_cast<uint32_t>(static_cast<uint64_t>(cfg.num_host_blocks) * cfg.host_twin_percent / 100);
  if (cfg.host_cache) {  // pending transfers have unique destinations: these bounds are never passed
    pending_.offloads.reserve(cfg.num_host_blocks);
    pending_.loads.reserve(cfg.num_blocks);
  }
  if (cfg.events) {
    device_.parents.resize(cfg.num_blocks);
    if (cfg.host_cache) host_.parents.resize(cfg.num_host_blocks);
  }
}

// Validation of a configuration happens before any memory is reserved (see capi).
void validate_config(const ManagerConfig& cfg) {
  if (cfg.block_size == 0 || cfg.block_size > kMaxBlockSize)
    fail(Code::invalid_argument, "block_size %u is out of range [1, %u]", cfg.block_size, kMaxBlockSize);
  if (cfg.num_blocks == 0 || cfg.num_blocks > kMaxBlocks)
    fail(Code::invalid_argument, "num_blocks %u is out of range [1, %u]", cfg.num_blocks, kMaxBlocks);
  if (cfg.num_host_blocks > kMaxBlocks)
    fail(Code::invalid_argument, "num_host_blocks %u exceeds %u", cfg.num_host_blocks, kMaxBlocks);
  if (!(cfg.watermark >= 0.0f && cfg.watermark < 1.0f))
    fail(Code::invalid_argument, "watermark %g is not in [0, 1)", static_cast<double>(cfg.watermark));
  if (cfg.host_twin_percent > 100)
    fail(Code::invalid_argument, "host_cache_twin_percent %u exceeds 100", cfg.host_twin_percent);
  if (cfg.host_cache && cfg.num_host_blocks == 0)
    fail(Code::invalid_argument, "KVB_CONFIG_HOST_CACHE needs num_host_blocks > 0");
  if (cfg.events && cfg.event_capacity == 0)
    fail(Code::invalid_argument, "event_capacity must be > 0 when events are enabled");
  if (cfg.groups.size() > kMaxKvCacheGroups)
    fail(Code::invalid_argument, "num_groups %zu exceeds %u", cfg.groups.size(), kMaxKvCacheGroups);
  for (size_t g = 0; g < cfg.groups.size(); ++g) {
    const GroupSpec& gs = cfg.groups[g];
    if (gs.window && gs.window_tokens == 0)
      fail(Code::invalid_argument, "groups[%zu]: a window group needs window_tokens > 0", g);
    if (!gs.window && (gs.window_tokens || gs.sink_tokens))
      fail(Code::invalid_argument, "groups[%zu]: a full-attention group takes no window_tokens (%u) or sink_tokens (%u)",
           g, gs.window_tokens, gs.sink_tokens);
  }
}

}  // namespace kvb
