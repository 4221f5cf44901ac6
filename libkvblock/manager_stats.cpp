// The counters and gauges of kvb_get_stats, read from the pools, the sequence table and the tiers.
#include "manager.h"

namespace kvb {

Stats Manager::stats() const {
  Stats st{};
  st.free_blocks = device_.pool.num_free();
  st.used_blocks = device_.pool.num_blocks() - device_.pool.num_free();
  st.cached_free_blocks = counters_.cached_free;
  st.num_seqs = seqs_.live;
  st.query_tokens = counters_.query_tokens;
  st.hit_tokens = counters_.hit_tokens;
  st.computed_tokens = counters_.computed_tokens;
  st.evictions = counters_.evictions;
  st.cow_copies = counters_.cow_copies;
  st.swapped_out_blocks = counters_.swapped_out;
  st.swapped_in_blocks = counters_.swapped_in;
  st.free_host_blocks = host_blocks_.empty.size();
  st.events_dropped = events_.dropped_total();
  st.device_hit_tokens = counters_.hit_tokens - counters_.host_hit_tokens - store_.hit_tokens;
  st.host_hit_tokens = counters_.host_hit_tokens;
  st.offloaded_blocks = counters_.offloaded;
  st.loaded_blocks = counters_.loaded;
  st.host_evictions = counters_.host_evictions;
  // Host blocks are empty, held by swapped-out sequences, or cached: pinned ones (read by pending loads)
  // are cached too, in the host index and findable.
  st.cached_host_blocks = cfg_.num_host_blocks - host_blocks_.empty.size() - host_blocks_.held - store_.staged;
  st.store_hit_tokens = store_.hit_tokens;
  st.store_put_blocks = store_.put_blocks;
  st.store_put_bytes = store_.put_blocks * store_.block_bytes;
  st.store_put_failures = store_.put_failures;
  st.store_get_blocks = store_.get_blocks;
  st.store_get_bytes = store_.get_blocks * store_.block_bytes;
  st.store_get_failures = store_.get_failures;
  st.store_recomputed_tokens = store_.recomputed_tokens;
  st.store_filling_blocks = store_.gets.size();
  st.store_abandoned_gets = store_.abandoned_gets;
  return st;
}

}  // namespace kvb
