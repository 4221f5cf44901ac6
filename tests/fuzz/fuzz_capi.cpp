// libFuzzer harness for the manager's C API (build and run: `make fuzz FUZZ_SECONDS=N`).
//
// The input is decoded into a manager configuration (with or without KV cache groups) and a sequence of
// C API calls, valid and invalid: any sequence ids, lengths, groups, NULL where a pointer is optional or
// required, capacities too small, struct sizes too small, operations in any order. After every call:
//   - kvb_check_invariants() must pass;
//   - a failed call must name a known status, leave a non-empty kvb_last_error() and change nothing
//     observable (stats, free count, every group's block tables, infos, block hashes: tests/kvbt_state.h);
//   - the test model predicts the status of the core operations and, where they succeed, the sequence
//     lengths, computed counts, location and, per group, which blocks a window released (kvblock.h's
//     rule replayed at every release point); a block belongs to one group and one block index at a time;
//   - the model tracks what every device block holds (per group: a block of another group never
//     matches), so that a prefix-cache hit on a block whose K/V is not exactly the prompt's (other
//     tokens, other salt or extra key, not yet committed, non-cacheable, another group) is caught, and
//     a window group holds exactly the blocks the hit rule says it needs;
//   - with KVB_CONFIG_HOST_CACHE the model also plays the KV store the engine keeps: what each device
//     and host block's K/V holds, moved by the drained offload / load pairs (run before anything writes
//     device K/V: before commits and swap-ins), so that a hit from the host level must find the prompt's
//     K/V once its load has run, and every offload / load moves committed, cacheable content.
//   - some host-cache inputs register a store tier below it (fuzz_store.h): store hits wait for their gets,
//     failures the input injects (a key gone or corrupted after the lookup, slow gets, refused puts, a
//     store that vanishes) cut the sequence, and every block below its computed count holds the prompt's
//     K/V once loaded; one store key never names two contents.
// Any violation aborts, which libFuzzer reports as a crash with the input saved.
//
// This file drives the steps; the configuration is decoded in fuzz_config.h, the model is in
// fuzz_model.h, the op handlers in fuzz_ops_seq.h (sequence lifecycle), fuzz_ops_tree.h (token trees) and
// fuzz_ops_io.h (the rest).
#include <algorithm>
#include <cinttypes>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "fuzz_config.h"
#include "fuzz_harness.h"
#include "fuzz_model.h"
#include "fuzz_ops_io.h"
#include "fuzz_ops_seq.h"
#include "fuzz_ops_tree.h"
#include "fuzz_store.h"
#include "kvblock.h"
#include "kvbt_state.h"

namespace kvbfuzz {
namespace {

enum Op {
  OP_ALLOCATE, OP_CAN_ALLOCATE, OP_COMMIT, OP_APPEND, OP_CAN_APPEND, OP_FREE, OP_TABLE, OP_HASH, OP_FORK,
  OP_DRAIN_COPIES, OP_ROLLBACK, OP_WINDOW, OP_SWAP_OUT, OP_SWAP_IN, OP_BATCH, OP_STATS, OP_EVENTS, OP_RESET,
  OP_EXTRA_KEY, OP_INFO, OP_NUM_FREE, OP_NULL_MANAGER, OP_DRAIN_HOST, OP_COUNT,
  // Only inputs whose manager has a store draw it (the others decode their bytes as before it existed).
  OP_STORE_POLL = OP_COUNT,
  // Op bytes from 0xf0 on (fuzz_ops_tree.h): the corpus's low op bytes decode as before trees existed.
  OP_TREE
};
constexpr uint8_t kTreeOpByte = 0xf0;

const char* const kOpNames[OP_TREE + 1] = {"allocate", "can_allocate", "commit", "append", "can_append", "free",
                                        "block_table", "block_hash", "fork", "drain_copies", "rollback",
                                        "set_window", "swap_out", "swap_in", "batch_export", "get_stats",
                                        "drain_events", "reset_prefix_cache", "set_extra_key", "get_info",
                                        "num_free_blocks", "null_manager", "drain_host_transfers", "store_poll", "token_tree"};

// Operations that run while store gets are in flight; before any other the driver settles the store
// (fuzz_store.h): a sequence with gets in flight may only be allocated, freed, read or polled.
bool runs_while_filling(Op op) {
  switch (op) {
    case OP_ALLOCATE: case OP_CAN_ALLOCATE: case OP_FREE: case OP_TABLE: case OP_HASH: case OP_STATS:
    case OP_EVENTS: case OP_INFO: case OP_NUM_FREE: case OP_NULL_MANAGER: case OP_DRAIN_HOST: case OP_STORE_POLL:
      return true;
    default:
      return false;
  }
}

void run(const uint8_t* data, size_t size) {
  Reader r{data, size};
  Model md;
  static const bool trace = std::getenv("KVB_FUZZ_TRACE") != nullptr;  // replaying a crash: print the calls
  kvb_manager* m = make_manager(r, md, trace);
  const uint32_t bs = md.bs;

  std::vector<int64_t> toks;
  kvbt_state before{}, after{};
  std::vector<int64_t> snap_ids;

  for (int step = 0; step < 256 && !r.empty(); ++step) {
    const uint8_t op_byte = r.u8();
    const Op op = op_byte >= kTreeOpByte ? OP_TREE : static_cast<Op>(op_byte % (g_store.on ? OP_COUNT + 1 : OP_COUNT));
    // The forward step that wrote the K/V a commit reports ran after every pending transfer, and so does a
    // swap-in (kvblock.h's order): the engine drains them first.
    if (g_store.on && !runs_while_filling(op)) store_settle(m, md);
    if (op == OP_COMMIT || op == OP_BATCH || op == OP_SWAP_IN || op == OP_TREE) drain_host_all(m, md);
    snap_ids.clear();
    for (const auto& e : md.seqs) snap_ids.push_back(e.first);
    snap_ids.push_back(-1);
    kvbt_state_take(m, snap_ids.data(), snap_ids.size(), 0, &before);
    prime_last_error();
    Step st{m, md, r, toks, trace, bs, kOpNames[op]};

    switch (op) {
      case OP_ALLOCATE: st.allocate(false); break;
      case OP_CAN_ALLOCATE: st.allocate(true); break;
      case OP_COMMIT: st.commit(); break;
      case OP_APPEND: st.append(false); break;
      case OP_CAN_APPEND: st.append(true); break;
      case OP_FREE: st.free_seq(); break;
      case OP_TABLE: st.block_table(); break;
      case OP_HASH: st.block_hash(); break;
      case OP_FORK: st.fork(); break;
      case OP_DRAIN_COPIES: st.drain_copies(); break;
      case OP_ROLLBACK: st.rollback(); break;
      case OP_WINDOW: st.set_window(); break;
      case OP_SWAP_OUT: st.swap(false); break;
      case OP_SWAP_IN: st.swap(true); break;
      case OP_BATCH: st.batch(); break;
      case OP_STATS: st.stats(); break;
      case OP_EVENTS: st.events(); break;
      case OP_RESET: st.reset(); break;
      case OP_EXTRA_KEY: st.extra_key(); break;
      case OP_INFO: st.info(); break;
      case OP_NUM_FREE: st.num_free(); break;
      case OP_NULL_MANAGER: st.null_manager(); break;
      case OP_DRAIN_HOST: st.drain_host_transfers(); break;
      case OP_STORE_POLL: store_op(m, md, r, trace); break;
      case OP_TREE: st.tree(); break;
    }
    const kvb_status s = st.s;
    const char* const what = st.what;
    if (trace) {
      std::fprintf(stderr, "step %d: %s -> %s\n", step, what, kvb_status_string(s));
      for (const auto& e : md.seqs) {
        std::fprintf(stderr, "    seq %" PRId64 ": %zu tokens, %" PRIu64 " computed, window %u%s, table", e.first,
                     e.second.toks.size(), e.second.computed, e.second.window, e.second.swapped ? ", swapped" : "");
        for (uint32_t g = 0; !e.second.swapped && g < md.num_tables(); ++g) {
          if (g) std::fprintf(stderr, " |");
          for (int32_t b : table_of(m, e.first, g)) std::fprintf(stderr, " %d", b);
        }
        std::fprintf(stderr, "\n");
      }
    }

    kvb_status inv = kvb_check_invariants(m);
    REQUIRE(inv == KVB_OK, "after %s (%s): invariants: %s", what, kvb_status_string(s), kvb_last_error());
    if (s != KVB_OK) {
      check_failure(s, what);
      kvbt_state_take(m, snap_ids.data(), snap_ids.size(), 0, &after);
      long d = kvbt_state_diff(&before, &after);
      REQUIRE(d < 0, "failed %s (%s) changed the manager (snapshot byte %ld)", what, kvb_status_string(s), d);
    }
    for (const auto& e : md.seqs) check_info(m, md, e.first);
    check_block_owners(m, md);
  }

  for (const auto& e : md.seqs) check_info(m, md, e.first);
  store_settle(m, md);    // gets in flight hold host blocks
  drain_host_all(m, md);  // a pending load holds its device block
  // The block accounting balances once every sequence is gone.
  for (const auto& e : md.seqs) REQUIRE(kvb_seq_free(m, e.first) == KVB_OK, "final free");
  kvb_stats st;
  kvb_stats_init(&st);
  REQUIRE(kvb_get_stats(m, &st) == KVB_OK, "final stats");
  if (trace)
    std::fprintf(stderr, "final: %" PRIu64 " hit tokens (%" PRIu64 " from host, %" PRIu64 " from the store), %" PRIu64
                 " offloads, %" PRIu64 " loads, %" PRIu64 " host evictions; store: %" PRIu64 " puts (%" PRIu64
                 " refused), %" PRIu64 " gets good, %" PRIu64 " failed, %" PRIu64 " tokens recomputed\n",
                 st.hit_tokens, st.host_hit_tokens, st.store_hit_tokens, st.offloaded_blocks, st.loaded_blocks,
                 st.host_evictions, st.store_put_blocks, st.store_put_failures, st.store_get_blocks,
                 st.store_get_failures, st.store_recomputed_tokens);
  REQUIRE(st.free_blocks == md.nblocks && st.used_blocks == 0 && st.num_seqs == 0 &&
              st.free_host_blocks + st.cached_host_blocks == md.nhost,
          "final accounting: %" PRIu64 " free of %u, %" PRIu64 " used, %" PRIu64 " host free of %u", st.free_blocks,
          md.nblocks, st.used_blocks, st.free_host_blocks, md.nhost);
  REQUIRE(kvb_check_invariants(m) == KVB_OK, "final invariants: %s", kvb_last_error());
  kvb_manager_destroy(m);
  kvbt_state_free(&before);
  kvbt_state_free(&after);
}

}  // namespace
}  // namespace kvbfuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvbfuzz::run(data, size);
  return 0;
}

