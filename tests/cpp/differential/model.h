// Differential test of the block manager: the model. A deliberately plain re-statement of
// docs/ARCHITECTURE.md ("Design rules") and of kvblock.h (std::list free queue with O(N) removal, std::map
// index, per-sequence token vectors, xxh64 over the documented byte layout) that the library is compared
// against after every step.
// This file holds the model's state; its operations are defined by concern in
//   model_hash.h    the public chain hash and the model's index keys
//   model_pool.h    the free queue, the device index and the events
//   model_lookup.h  the prefix lookup and the hit valid for every KV cache group
//   model_seq.h     the sequence calls: allocate, commit, append, free, fork, rollback, window, reset
//   model_batch.h   the batched decode calls (kvb_batch_append, kvb_batch_commit)
//   model_host.h    the host level (host cache) and swapping
//   model_store.h   the store level below the host (kvblock.h "Store tier"): lookups past the host, gets
//                   into staging host blocks, their completions, puts at host eviction and write-through
// KV cache groups (kvblock.h): every sequence has one MTable per group over the one pool and free queue;
// a manager without groups is one full group whose window is per sequence, so every operation is
// written once, over the groups.
//
// A new feature extends the model here: its state as members of Model (and MSeq / MTable / MBlock), its
// operations as Model methods that return the kvb_status the library must return and change nothing on
// failure. Then add the operation to operations.h and what it makes observable to compare.h.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <list>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kvblock.h"
#include "model_hash.h"
#include "util.h"

namespace {

struct MBlock {
  int ref = 0;
  bool has_hash = false;  // holds a committed full block (kvb_block_hash answers)
  uint64_t hash = 0;
  uint64_t key = 0;           // index key (group-keyed)
  uint32_t group = 0;         // KV cache group of the content (events report it)
  std::vector<int64_t> toks;  // the block's tokens when it was hashed
  bool has_extra = false;
  uint64_t extra = 0;
  int parent_kind = 0;        // as events report it (kvb_parent_kind), set when indexed
  uint64_t parent_hash = 0;
};

// An event as kvb_drain_events_group reports it (tokens only for STORED).
struct MEvent {
  uint32_t type = 0, parent_kind = 0, medium = 0, has_extra = 0, group = 0;
  uint64_t hash = 0, parent_hash = 0, extra = 0;
  int32_t block = -1;
  std::vector<int64_t> toks;
};

// A KV cache group as its kvb_group_spec gives it.
struct MGroupSpec {
  bool window = false;
  uint32_t window_tokens = 0, sink_tokens = 0;
};

// One KV cache group's part of a sequence: its block table and index keys. The tokens, counts and
// public hashes are the sequence's, the same in every group.
struct MTable {
  std::vector<int32_t> table;       // device blocks, -1 = released by the window or not taken at a hit
                                    // (all -1 while swapped)
  std::vector<int32_t> host_table;  // while swapped: host block per block index, -1 = none
  std::vector<uint64_t> keys;       // index keys of blocks [0, hashed) up to the first uncacheable one
  uint32_t window = 0, sink = 0;    // the group's window (without groups: the sequence's)
  // With groups: the cached blocks this window released (parked), by block index, with the key they
  // held then; freeing the sequence puts those still holding that content back with its other blocks.
  struct Released {
    size_t index;
    int32_t block;
    uint64_t key;
  };
  std::vector<Released> released;
};

struct MSeq {
  int64_t id = 0;
  std::vector<int64_t> tokens;
  std::vector<MTable> g;            // one per KV cache group (one without groups)
  bool swapped = false;
  size_t computed = 0, cached = 0;
  size_t hashed = 0;                // blocks considered for the index (= computed / block_size)
  long unc = -1;                    // first block that broke the chain (non-cacheable), -1 = none
  bool has_salt = false;
  uint64_t salt = 0;
  std::map<uint32_t, uint64_t> extra;
  std::vector<uint64_t> hashes;     // chain hashes of blocks [0, hashed) up to the first uncacheable one
  size_t filling = 0;               // store gets in flight
  std::vector<int32_t> tree;        // parents of a pending token tree (its nodes: the uncomputed tokens)
};

// A store get in flight (kvblock.h "Store tier"): host block `host` fills block `index` of sequence `id`,
// whose device block there is `device`; `key` is the block's index key (the store's content is keyed by it).
struct MGet {
  uint64_t ticket;
  int64_t id;
  size_t index;
  int32_t host, device;
  uint64_t key;
};

// What the test's store does with each get an allocation starts (the store's choice, known to the model).
enum MGetOutcome { kGetOk, kGetCorrupt, kGetMissing, kGetRefused };

struct Opts {
  bool has_salt = false;
  uint64_t salt = 0;
  std::vector<uint32_t> ek_blocks;
  std::vector<uint64_t> ek_vals;
  uint32_t window = 0, sink = 0;
};

struct Model {
  uint32_t bs = 0, N = 0, H = 0, wm = 0;
  bool keyed = false;
  bool host_cache = false;  // KVB_CONFIG_HOST_CACHE
  uint32_t twin_budget = 0;
  std::vector<MGroupSpec> groups;  // kvb_config.groups; empty = no groups (one full group)
  std::set<int64_t> nc;
  std::vector<MBlock> blk;
  std::list<int32_t> freeq;  // front = head
  // With groups: cached blocks a window released while their sequence runs, oldest first. Free blocks,
  // taken only when freeq is empty (docs/ARCHITECTURE.md "Eviction order with groups").
  std::list<int32_t> parked;
  std::vector<int64_t> parked_for;  // the sequence whose window parked each parked block (last to park it)
  std::map<uint64_t, int32_t> index;
  std::map<int64_t, MSeq> seqs;
  std::vector<MBlock> host;  // content descriptions of host blocks
  // Host blocks that hold nothing, a stack (back is taken next; block 0 first at start).
  std::vector<int32_t> host_free;
  // Host cache level (docs/ARCHITECTURE.md "Host tier"): cached host blocks are in host_index and, unless pinned
  // by pending loads (host[h].ref > 0), in host_lru (least recently used first) or, when the device
  // index holds the same key (twin[h] = that device block), in host_twins (oldest first).
  std::map<uint64_t, int32_t> host_index;
  std::list<int32_t> host_lru, host_twins;
  std::vector<int32_t> twin;
  std::vector<std::pair<int32_t, int32_t>> offloads, loads;  // pending (device, host) / (host, device)
  uint64_t host_hit = 0, offloaded = 0, loaded = 0, host_evictions = 0;
  // Events: per medium (0 device, 1 host), how many indexed blocks of a group carry a public hash
  // (STORED at 0 -> 1, REMOVED at 1 -> 0), and the undrained events.
  std::map<std::pair<uint32_t, uint64_t>, int> hash_count[2];
  std::vector<MEvent> events;
  std::vector<std::pair<int32_t, int32_t>> pending;  // copy-on-write (src, dst)
  std::vector<std::pair<int64_t, int64_t>> slot_pending;  // token-tree compaction (src slot, dst slot)
  std::vector<int32_t> slot_held;   // blocks past an accepted path holding a source, until the drain
  uint64_t query = 0, hit = 0, computed = 0, evictions = 0, cow = 0, sw_out = 0, sw_in = 0;
  // Store level (model_store.h): the keys the store holds (model index keys), per host block its staging
  // state (0, 1 = a get fills it, 2 = filled, its load pending), whether its content was put, the
  // write-through list; the gets in flight in the library's order (removal swaps the last in).
  bool store_on = false, write_through = false;
  bool store_refuse_puts = false, store_lookup_fails = false;  // the test store's behaviour this step
  std::vector<MGetOutcome> store_plan;                          // outcome of each get of the next allocation
  std::set<uint64_t> store_keys;
  std::vector<uint8_t> staging, written, through_pending;
  std::vector<int32_t> through;
  std::vector<MGet> gets;
  uint64_t next_ticket = 1;
  std::vector<std::pair<int32_t, std::vector<int64_t>>> put_log;  // expected puts: host block, its tokens
  uint64_t store_hit = 0, put_blocks = 0, put_failures = 0, get_blocks = 0, get_failures = 0, recomputed = 0;
  // Activity (printed, not compared): window releases; hit blocks a window group did not take; hits a
  // window group made shorter than the full groups' cached prefix.
  uint64_t window_released = 0, window_skipped = 0, window_cut = 0;

  void init(uint32_t block_size, uint32_t num_blocks, uint32_t num_host, float watermark,
            const std::vector<int64_t>& non_cacheable, bool keyed_index, bool host_cache_level = false,
            uint32_t twin_percent = 1, const std::vector<MGroupSpec>& group_specs = {}) {
    keyed = keyed_index;
    host_cache = host_cache_level;
    twin_budget = static_cast<uint32_t>(static_cast<uint64_t>(num_host) * twin_percent / 100);
    groups = group_specs;
    bs = block_size;
    N = num_blocks;
    H = num_host;
    wm = static_cast<uint32_t>(std::floor(static_cast<double>(watermark) * num_blocks));
    nc.insert(non_cacheable.begin(), non_cacheable.end());
    blk.assign(N, MBlock{});
    for (uint32_t b = 0; b < N; ++b) freeq.push_back(static_cast<int32_t>(b));
    parked_for.assign(N, 0);
    host.assign(H, MBlock{});
    for (uint32_t h = H; h-- > 0;) host_free.push_back(static_cast<int32_t>(h));
    twin.assign(H, -1);
    staging.assign(H, 0);
    written.assign(H, 0);
    through_pending.assign(H, 0);
  }

  size_t num_groups() const { return groups.empty() ? 1 : groups.size(); }
  // A window group (its spec's window): without groups, group 0 is a full group for the hit rule.
  bool window_group(size_t g) const { return !groups.empty() && groups[g].window; }
  size_t nblocks(size_t ntok) const { return (ntok + bs - 1) / bs; }
  MSeq* find(int64_t id) {
    auto it = seqs.find(id);
    return it == seqs.end() ? nullptr : &it->second;
  }
  bool indexed(int32_t b) const {
    const MBlock& m = blk[b];
    if (!m.has_hash) return false;
    auto it = index.find(m.key);
    return it != index.end() && it->second == b;
  }
  size_t num_free() const { return freeq.size() + parked.size(); }
  bool is_free(int32_t b) const { return blk[b].ref == 0; }
  size_t cached_free() const {
    size_t n = 0;
    for (int32_t b : freeq) n += indexed(b);
    for (int32_t b : parked) n += indexed(b);
    return n;
  }
  bool cacheable(const int64_t* t, bool has_extra) const {
    if (has_extra) return true;
    for (uint32_t i = 0; i < bs; ++i)
      if (nc.count(t[i])) return false;
    return true;
  }
  static size_t held(const std::vector<int32_t>& t) {
    size_t n = 0;
    for (int32_t b : t) n += b >= 0;
    return n;
  }
  // Blocks the sequence holds in every group (device, or host while swapped).
  static size_t held(const MSeq& s) {
    size_t n = 0;
    for (const MTable& t : s.g) n += held(s.swapped ? t.host_table : t.table);
    return n;
  }

  // ---- the free queue, the device index and the events (model_pool.h) ----
  void push_stored(int medium, const MBlock& m, int32_t b);
  void stored(int medium, const MBlock& m, int32_t b);
  void removed(int medium, const MBlock& m, int32_t b);
  void index_put(int32_t b);
  void index_erase(int32_t b);
  int32_t take_free();
  void acquire(int32_t b);
  int holders(int32_t b) const;
  void release(int32_t b, const MSeq* parker = nullptr);
  void requeue(const MTable::Released& r, int64_t id);
  void forget(int32_t b);

  // ---- the prefix lookup and the hit rule over the groups (model_lookup.h) ----
  struct Lookup {
    size_t nb = 0;  // blocks of the prompt (in every group)
    size_t k = 0;   // hit blocks: the cached prefix valid for every group
    std::vector<uint64_t> hashes;             // public chain hashes of the candidate blocks
    std::vector<std::vector<uint64_t>> keys;  // [group][candidate] index keys
    // [group][candidate]: the device block holding it, -2 - h for host block h, or -1 (not cached)
    std::vector<std::vector<int32_t>> found;
    size_t needed = 0;     // free-queue blocks an allocation takes (new, free hits, host hits)
    size_t host_hits = 0;  // hit blocks that at least one group loads from the host level
    size_t store_hits = 0; // blocks after the k hits found in the store (no groups, no window)
  };
  bool same(const MBlock& m, const int64_t* bt, bool hx, uint64_t xv) const;
  bool group_needs(size_t g, size_t k, size_t i) const;
  bool hit_valid(const Lookup& r, size_t k) const;
  Lookup lookup(const std::vector<int64_t>& t, const Opts& o) const;

  // ---- the sequence calls (model_seq.h) ----
  kvb_status check_opts(const Opts& o) const;
  kvb_status can_allocate(const std::vector<int64_t>& t, const Opts& o, size_t* cached) const;
  kvb_status allocate(int64_t id, const std::vector<int64_t>& t, const Opts& o, size_t* cached);
  void apply_window(const MSeq& s, MTable& t);
  kvb_status commit(int64_t id, size_t n);
  size_t append_needed(const MSeq& s, const MTable& t, size_t n) const;
  kvb_status can_append(int64_t id, size_t n);
  kvb_status append(int64_t id, const std::vector<int64_t>& t);
  kvb_status free_seq(int64_t id);
  kvb_status fork(int64_t pid, int64_t cid, size_t pos, bool at);
  kvb_status rollback(int64_t id, size_t n, bool window_check = true);  // false: a tree's commit
  bool needs_released(const MSeq& s, size_t len, size_t done) const;
  kvb_status set_window(int64_t id, uint32_t w, uint32_t sk);
  kvb_status set_extra_key(int64_t id, uint32_t bi, uint64_t key);
  kvb_status reset_prefix_cache();

  // ---- token trees (model_tree.h) ----
  static std::vector<uint64_t> tree_masks(const std::vector<int32_t>& parents);
  std::vector<uint64_t> mask_rows(const MSeq& s) const;  // kvb_batch.tree_mask of s's uncomputed rows
  kvb_status append_tree(int64_t id, const std::vector<int64_t>& t, const std::vector<int32_t>& parents,
                         std::vector<int32_t>* depths);
  kvb_status commit_tree(int64_t id, const std::vector<int32_t>& path);
  void release_slot_copies();

  // ---- the batched decode calls (model_batch.h) ----
  kvb_status check_batch_ids(const std::vector<int64_t>& ids);
  kvb_status batch_append(const std::vector<int64_t>& ids, const std::vector<int64_t>& toks);
  kvb_status batch_commit(const std::vector<int64_t>& ids, const std::vector<size_t>& counts);

  // ---- the host level and swapping (model_host.h) ----
  bool host_queued(int32_t h) const { return host[h].ref == 0; }  // cached and not pinned
  void host_unqueue(int32_t h);
  void host_enqueue(int32_t h);
  void twin_enter(int32_t b, int32_t h);
  void twin_leave(int32_t h);
  int32_t take_host();
  void offload(int32_t b);
  int32_t load(int32_t h, int parent_kind, uint64_t parent_hash);
  size_t host_available() const { return host_free.size() + host_lru.size() + host_twins.size(); }
  void release_host_transfers();
  void clear_host_level();
  void release_swapped(MSeq& s);
  kvb_status can_swap_out(int64_t id, kvb_availability* a);
  kvb_status check_swap_out(int64_t id, size_t cap, size_t* need);
  std::string apply_swap_out(int64_t id, const int32_t* pairs, size_t np);
  kvb_status can_swap_in(int64_t id, kvb_availability* a);
  kvb_status swap_in(int64_t id, size_t cap, size_t* need, std::vector<int32_t>* pairs);

  // ---- the store level (model_store.h) ----
  bool host_cached(int32_t h) const {
    auto it = host_index.find(host[h].key);
    return host[h].has_hash && it != host_index.end() && it->second == h;
  }
  size_t store_lookup(const Lookup& r, const Opts& o) const;
  void store_put(int32_t h);
  void store_evicting(int32_t h);
  void store_release_staging(int32_t h);
  void store_start_gets(MSeq& s, size_t first, const std::vector<int32_t>& hosts, const std::vector<uint64_t>& keys);
  void store_complete(size_t k, int32_t status);
  void store_through_offloaded();
  void store_poll(const std::vector<kvb_store_completion>& reported, bool gave_up);
};

}  // namespace

#include "model_pool.h"
#include "model_lookup.h"
#include "model_seq.h"
#include "model_batch.h"
#include "model_tree.h"
#include "model_host.h"
#include "model_store.h"
