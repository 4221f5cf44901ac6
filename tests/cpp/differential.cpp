// Randomized differential test of the block manager (docs/ARCHITECTURE.md, "Design rules") through the
// public C API.
//
// A deliberately plain model of the manager lives in differential/model.h (std::list free queue with O(N)
// removal, std::map index, per-sequence token vectors, xxh64 over the documented byte layout). Thousands of random
// operation sequences drive the library and the model side by side; after every step the test compares
// block tables, cached-token counts, free-block counts, the hash of every block, sequence info, stats and
// kvb_check_invariants. It also plays the engine: it keeps a simulated KV store content[block][slot]
// holding token ids, writes it only where kvb_batch_export's slot mapping says before committing, runs
// drained copy-on-write pairs and swap pairs on it, and checks after every step that each live sequence's
// computed tokens read back through its block table are exactly the model's tokens ("data is never
// lost", and a prefix hit never lands on KV that was not written).
// The host-cache configurations (host_*) add the second cache level: the model keeps its host index,
// LRU and twin lists as kvblock.h documents them; the test compares the drained offload / load pairs,
// the host stats and every event (with its medium), and runs the pairs on the simulated store (all
// offloads, then all loads, before copies, swap-ins and commits), checking that every block a hit can
// return, on either level, holds exactly the tokens committed into it.
//
// The KV cache group configurations (grp_*) give the manager several groups over one pool: the model
// keeps one table per group, releases window groups' blocks as kvblock.h says, takes prefix hits by the
// rule valid for every group (full groups every block, window groups only what the first uncached
// token's window and sinks need, -1 elsewhere), and the test compares every group's table, the batch
// export of every group (kvb_batch.group) and the events with their group (kvb_drain_events_group); the
// engine writes each group's slots and reads every computed token back through every group's table.
// The store configurations (store_*) add the third level (kvblock.h "Store tier"): an in-memory store
// (differential/store_mem.h) the model knows the contents of; lookups past device and host, gets that
// succeed, are refused, find their key gone, read corrupted bytes or are given up on (the model predicts
// the shortened computed count and the loads), puts at host eviction and write-through (blocks and
// bytes compared), the store stats and STORED events on the store medium.
//
// grp_swap_* and grp_host_* add host blocks: a sequence swaps every group at once, and the host cache
// level keeps each group's blocks apart and feeds the same hit rule (loads per group).
//
// The parts, one concern per file under differential/ (headers, so that the Makefile's tests/cpp/*.cpp
// builds this file as the one test binary):
//   util.h        Rng, failure type, formatting
//   model.h       the model of the manager (where a new feature's expected behaviour goes first), its
//                 parts in model_hash.h, model_pool.h, model_lookup.h, model_seq.h, model_host.h
//   configs.h     the pool configurations and activity counters
//   run.h         one run: library + model + simulated KV store (class declaration)
//   inputs.h      random prompts, ids and per-sequence options
//   engine.h      the engine side: KV store, batch export, commits
//   operations.h  the operation generator (op_* and one_step: where a new operation goes)
//   store_mem.h, operations_store.h  the store configurations' in-memory store and its side of a run
//   model_tree.h, operations_tree.h  token trees: the model (append + rollback + commit) and the operation
//   compare.h     the comparison after every step
//   this file     the driver: seeds, configurations, failure reports
//
// Environment: KVB_DIFF_SEEDS=n seeds per configuration (default 60); KVB_DIFF_CONFIG=name runs one
// configuration; KVB_DIFF_SEED=s runs only seed s (reproduce a failure); KVB_DIFF_VERBOSE=1 prints
// every op of the runs.
#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "harness.h"
#include "differential/compare.h"
#include "differential/configs.h"
#include "differential/engine.h"
#include "differential/inputs.h"
#include "differential/model.h"
#include "differential/operations.h"
#include "differential/operations_store.h"
#include "differential/operations_tree.h"
#include "differential/run.h"
#include "differential/util.h"

namespace {

// ---- driver -------------------------------------------------------------------------------------

int g_seeds = 60;
long g_only_seed = -1;
bool g_verbose = false;

uint64_t seed_of(size_t config_index, long s) { return config_index * 1000003ULL + static_cast<uint64_t>(s); }

bool run_config(size_t ci) {
  const Config& c = kConfigs[ci];
  long nseeds = g_only_seed >= 0 ? 1 : std::max<long>(1, static_cast<long>(g_seeds) * c.seed_weight / 4);
  for (long k = 0; k < nseeds; ++k) {
    long s = g_only_seed >= 0 ? g_only_seed : k;
    Run run(c, seed_of(ci, s), g_verbose);
    try {
      run.go();
    } catch (const Divergence& d) {
      printf("differential %s: seed %ld, step %d: %s\n", c.name, s, run.step(), d.what());
      printf("  reproduce: KVB_DIFF_CONFIG=%s KVB_DIFF_SEED=%ld [KVB_DIFF_VERBOSE=1] <this binary>\n", c.name, s);
      printf("  last operations:\n");
      for (const std::string& h : run.history()) printf("    %s\n", h.c_str());
      printf("  model state:\n");
      run.dump();
      return false;
    }
  }
  return true;
}

void hash_compat() {  // the model's hash is the library's kvb_hash_tokens (and nano-vllm's)
  Rng r(99);
  for (size_t n : {1, 2, 4, 16, 32}) {
    std::vector<int64_t> t(n);
    for (auto& x : t) x = static_cast<int64_t>(r.next());
    uint64_t p = r.next();
    CHECK(kvb_hash_tokens(nullptr, t.data(), n) == model_hash(false, 0, t.data(), n, false, 0));
    CHECK(kvb_hash_tokens(&p, t.data(), n) == model_hash(true, p, t.data(), n, false, 0));
  }
}

}  // namespace

int main() {
  if (const char* e = getenv("KVB_DIFF_SEEDS")) g_seeds = std::max(1, atoi(e));
  if (const char* e = getenv("KVB_DIFF_SEED")) g_only_seed = atol(e);
  if (const char* e = getenv("KVB_DIFF_VERBOSE")) g_verbose = atoi(e) != 0;
  const char* only = getenv("KVB_DIFF_CONFIG");

  RUN_TEST(hash_compat);
  for (size_t ci = 0; ci < sizeof kConfigs / sizeof kConfigs[0]; ++ci) {
    if (only && strcmp(only, kConfigs[ci].name) != 0) continue;
    g_act = Activity{};
    bool ok = run_config(ci);
    printf("     %s: %" PRIu64 " seeds, %" PRIu64 " steps; %" PRIu64 " allocations (%" PRIu64 " out of blocks), %" PRIu64
           " hit tokens, %" PRIu64 " commits, %" PRIu64 " appends, %" PRIu64 " forks, %" PRIu64 " CoW copies, %" PRIu64
           " rollbacks, %" PRIu64 " window releases, %" PRIu64 "/%" PRIu64 " swaps out/in, %" PRIu64 " evictions, %" PRIu64
           " expected errors; host: %" PRIu64 " hit tokens, %" PRIu64 "/%" PRIu64 " offloads/loads, %" PRIu64
           " evictions, %" PRIu64 " events; groups: %" PRIu64 " hit blocks a window group did not take, %" PRIu64
           " hits cut by a window group\n",
           kConfigs[ci].name, g_act.seeds, g_act.steps, g_act.allocs, g_act.alloc_oob, g_act.hit_tokens, g_act.commits,
           g_act.appends, g_act.forks, g_act.cow, g_act.rollbacks, g_act.released, g_act.swaps_out, g_act.swaps_in,
           g_act.evictions, g_act.errors, g_act.host_hit_tokens, g_act.offloads, g_act.loads, g_act.host_evictions,
           g_act.events, g_act.window_skipped, g_act.window_cut);
    printf("     %s trees: %" PRIu64 " appended, %" PRIu64 " committed, %" PRIu64 " slot pairs\n", kConfigs[ci].name,
           g_act.trees, g_act.tree_commits, g_act.slot_pairs);
    if (kConfigs[ci].store)
      printf("     %s store: %" PRIu64 " hit tokens, %" PRIu64 " puts, %" PRIu64 " good gets, %" PRIu64 " failed gets\n",
             kConfigs[ci].name, g_act.store_hit_tokens, g_act.store_puts, g_act.store_gets, g_act.store_failed_gets);
    if (ok) kvbt_passed++;
    else kvbt_failed++;
    printf("%s differential_%s\n", ok ? "ok  " : "FAIL", kConfigs[ci].name);
    fflush(stdout);
  }
  TEST_SUMMARY();
}
