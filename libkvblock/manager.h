// The block manager (docs/ARCHITECTURE.md, "Design rules") as a plain C++ class. Not thread-safe by itself:
// the C boundary holds one lock per manager. Errors are thrown as kvb::Error; a throwing call changes
// nothing.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "block_pool.h"
#include "event_queue.h"
#include "hash_counts.h"
#include "open_table.h"
#include "prefix_index.h"
#include "sequence.h"
#include "sequence_table.h"
#include "store.h"
#include "tier.h"
#include "tree.h"

namespace kvb {

// One KV cache group (kvb_group_spec): full attention keeps every block; a window group keeps the
// blocks its queries can reach (window_tokens back, plus sink_tokens at the start).
struct GroupSpec {
  bool window = false;
  uint32_t window_tokens = 0, sink_tokens = 0;
};

struct ManagerConfig {
  uint32_t block_size = 16;
  uint32_t num_blocks = 0;
  uint32_t num_host_blocks = 0;
  float watermark = 0.0f;
  std::vector<int64_t> non_cacheable;
  bool keyed_index = false;
  bool events = false;
  bool host_cache = false;  // host blocks are a second prefix-cache level
  uint32_t host_twin_percent = 1;  // host blocks that may keep copies of blocks also on the device
  uint32_t event_capacity = 65536;
  uint64_t index_seed = 0;  // 0 = random
  std::vector<GroupSpec> groups;  // empty = one group, the per-sequence table and window of today
};

// Throws invalid_argument for a configuration the manager cannot run with.
void validate_config(const ManagerConfig& cfg);

// Per-sequence options as passed in (not owned).
struct SeqOptions {
  bool has_salt = false;
  uint64_t salt = 0;
  const uint32_t* extra_key_blocks = nullptr;
  const uint64_t* extra_keys = nullptr;
  size_t num_extra_keys = 0;
  uint32_t window = 0, sink = 0;
};

// The chain link before a sequence's first block in group g: none, or the cache salt; with g in the
// key's high word, so that a cached block is keyed by its group and its whole history and groups never
// hit each other's blocks, while the public hash (what events report, with the group index) is the same
// in every group. Group 0, the one group of a manager without groups, keys exactly as the salt alone.
inline ChainLink first_link_of(const SeqOptions& o, uint32_t group) {
  ChainLink l;
  if (o.has_salt) {
    l.kind = ChainLink::salt;
    l.hash = o.salt;
    l.key = Key128{o.salt, 0};
  }
  l.key.hi ^= group;
  return l;
}

// The options' extra keys block after block, for blocks visited in increasing order: one pass over the
// sorted extra_key_blocks for a whole prompt (a search per block made a long prompt's lookup quadratic).
class ExtraKeyCursor {
 public:
  explicit ExtraKeyCursor(const SeqOptions& o) : o_(o) {}
  ExtraKey at(uint32_t block) {
    while (next_ < o_.num_extra_keys && o_.extra_key_blocks[next_] < block) ++next_;
    if (next_ < o_.num_extra_keys && o_.extra_key_blocks[next_] == block) return ExtraKey{true, o_.extra_keys[next_]};
    return ExtraKey{};
  }

 private:
  const SeqOptions& o_;
  size_t next_ = 0;
};

enum class Availability { ok = 0, later = 1, never = 2 };

struct Stats {
  uint64_t free_blocks, used_blocks, cached_free_blocks, num_seqs;
  uint64_t query_tokens, hit_tokens, computed_tokens, evictions;
  uint64_t cow_copies, swapped_out_blocks, swapped_in_blocks, free_host_blocks, events_dropped;
  uint64_t device_hit_tokens, host_hit_tokens, offloaded_blocks, loaded_blocks, host_evictions, cached_host_blocks;
  uint64_t store_hit_tokens, store_put_blocks, store_put_bytes, store_put_failures, store_get_blocks, store_get_bytes;
  uint64_t store_get_failures, store_recomputed_tokens, store_filling_blocks;
};

// What the manager counted since its creation, as kvb_get_stats reports it (the gauges, such as free
// blocks, are read from the pools instead; the store tier counts its own in StoreTier). One struct, so
// that a new counter is one field here and one line in Manager::stats.
struct Counters {
  uint64_t cached_free = 0;  // a gauge, kept in step by the block helpers: indexed blocks in the free queue
  uint64_t query_tokens = 0, hit_tokens = 0, host_hit_tokens = 0, computed_tokens = 0;
  uint64_t evictions = 0, cow_copies = 0, swapped_out = 0, swapped_in = 0;
  uint64_t offloaded = 0, loaded = 0, host_evictions = 0;
};

// kvb_prefix_groups of a batch export (manager_batch.cpp): caller buffers in, sizes out.
struct PrefixGroupsOut {
  uint32_t min_shared = 2;
  uint32_t group_capacity = 0, member_capacity = 0;
  int32_t* group_start = nullptr;
  int32_t* members = nullptr;
  int32_t* shared_blocks = nullptr;
  uint32_t num_groups = 0, num_members = 0;  // out (also when a buffer is too small)
};

struct BatchOut {
  uint32_t max_blocks_per_seq = 0;
  int32_t* block_tables = nullptr;
  int32_t* seq_lens = nullptr;
  int32_t* query_start = nullptr;
  int64_t* slot_mapping = nullptr;
  size_t slot_capacity = 0;
  size_t num_slots = 0;               // out
  uint32_t max_blocks_needed = 0;     // out
  uint32_t group = 0;                 // whose block tables and slots
  PrefixGroupsOut* prefix_groups = nullptr;  // NULL = not wanted
  uint64_t* tree_mask = nullptr;      // [slot_capacity]; NULL = not wanted
};

using BlockPair = std::pair<int32_t, int32_t>;  // (src, dst)

constexpr uint32_t kMaxForkGroups = 64;  // most KV cache groups a manager may have
constexpr uint32_t kMaxBlocks = 1u << 30;  // block ids are int32; slots (id*bs) must fit int64
// No sequence has more blocks than this (its table alone would take 4 GiB): bounds extra-key indices.
constexpr uint32_t kMaxSeqBlocks = 1u << 30;

// Blocks that `tokens` tokens fill, rounded up. In 64 bits without adding block_size - 1 first, so that
// a count near 2^32 (sink tokens up to UINT32_MAX) cannot wrap to 0 blocks. Every caller's count is
// bounded so that the result fits uint32 (a sink gives at most UINT32_MAX blocks, at block size 1).
inline uint32_t blocks_for(uint64_t tokens, uint32_t block_size) {
  return static_cast<uint32_t>(tokens / block_size + (tokens % block_size != 0));
}

class Manager {
 public:
  explicit Manager(const ManagerConfig& cfg);

  const ManagerConfig& config() const { return cfg_; }

  // Core flow (manager_allocate.cpp, manager_append.cpp, manager_seqs.cpp, manager_blocks.cpp).
  bool can_allocate(const int64_t* tokens, size_t n, const SeqOptions& opts, size_t* num_cached);
  size_t allocate(int64_t id, const int64_t* tokens, size_t n, const SeqOptions& opts);
  void commit(int64_t id, size_t n);
  bool can_append(int64_t id, size_t n);
  void append(int64_t id, const int64_t* tokens, size_t n);
  void free_seq(int64_t id);
  const std::vector<int32_t>& block_table(int64_t id, uint32_t group = 0);
  uint32_t num_groups() const { return groups_.count; }
  uint64_t block_hash(int32_t block) const;
  size_t num_free() const { return device_.pool.num_free(); }
  void set_extra_key(int64_t id, uint32_t block_index, uint64_t key);
  const Sequence& sequence(int64_t id) { return seq(id); }

  // Beyond the core: fork, copy-on-write, rollback (manager_fork.cpp), host tier and swapping
  // (manager_host.cpp), window (manager_window.cpp), batch (manager_batch.cpp).
  void fork(int64_t parent, int64_t child, size_t num_tokens);
  // Copy-on-write pairs not yet drained; each holds a reference on its source block.
  const std::vector<BlockPair>& pending_copies() const { return pending_.copies; }
  void release_pending_copies();  // after the caller took them
  // Host-cache transfers not yet drained: offloads (device src, host dst) run before loads (host src,
  // device dst). A pending load holds its source host block and its destination device block.
  const std::vector<BlockPair>& pending_offloads() const { return pending_.offloads; }
  const std::vector<BlockPair>& pending_loads() const { return pending_.loads; }
  void release_host_transfers();  // after the caller took them
  void rollback(int64_t id, size_t n);
  void set_window(int64_t id, uint32_t window, uint32_t sink);
  Availability can_swap_out(int64_t id);
  Availability can_swap_in(int64_t id);
  size_t swap_out_size(int64_t id);  // pairs a swap would produce
  size_t swap_in_size(int64_t id);
  void swap_out(int64_t id, int32_t* pairs);
  void swap_in(int64_t id, int32_t* pairs);
  void batch_export(const int64_t* ids, size_t n, BatchOut& out);
  // Decode step for N sequences at once (manager_batch.cpp); all-or-nothing. counts NULL = all uncomputed.
  void batch_append(const int64_t* ids, const int64_t* tokens, size_t n);
  void batch_commit(const int64_t* ids, const size_t* counts, size_t n);

  // Token trees (manager_tree.cpp; kvblock.h, "Token trees"). depths may be NULL.
  void append_tree(int64_t id, const int64_t* tokens, const int32_t* parents, size_t n, int32_t* depths);
  void commit_tree(int64_t id, const int32_t* path, size_t k);
  const std::vector<SlotPair>& pending_slot_copies() const { return trees_.copies; }
  void release_slot_copies();  // after the caller took them
  // The calls that a pending tree refuses (append, commit, rollback, fork, swap) test s.tree_nodes inline.
  [[noreturn]] void refuse_pending_tree(const Sequence& s, const char* what) const;

  // Stats (manager_stats.cpp), events (manager_events.cpp), control (manager_blocks.cpp).
  Stats stats() const;
  EventQueue& events() { return events_; }
  void reset_prefix_cache();

  // Store tier (manager_store.cpp; kvblock.h, "Store tier"). ops NULL removes the store.
  void set_store(const kvb_store* ops, const Key128& ns, uint64_t block_bytes);
  size_t store_poll();  // learns completions; returns the gets still in flight
  void seq_store_state(int64_t id, size_t* num_computed, size_t* num_filling);

  // Full O(N) consistency check (manager_check.cpp); throws Error(internal) naming the broken rule.
  void check_invariants() const;

 private:
  void allocate_block_arrays();  // the constructor's per-block arrays (fail_alloc names them)
  // A prefix lookup's result: matched blocks and the chain state after them.
  struct Lookup {
    uint32_t num_blocks = 0;  // blocks the prompt needs
    uint32_t hits = 0;        // device and host hits
    uint32_t host_hits = 0;   // each needs a device block from the free queue
    uint32_t free_hits = 0;   // device hits on blocks in the free queue (they count as needed)
    uint32_t store_hits = 0;  // of hits, the last ones, found in the store (keys in store_.keys)
    ChainLink chain;          // after the device and host hits (store hits are hashed when their gets end)
  };

  // Groups path of allocate / can_allocate (manager_groups.cpp): the hit rule valid for every group.
  struct GroupLookup {
    uint32_t num_blocks = 0;  // blocks the prompt needs (per group)
    uint32_t hits = 0;        // cached blocks valid for every group
    uint32_t host_hits = 0;   // of those, blocks that some group loads from the host
    uint64_t needed = 0;      // free-queue blocks the allocation takes (new blocks and free hits)
    // Group g's hits in scratch_.group_hits_by_group: [first[g], first[g + 1]).
    uint32_t first[kMaxForkGroups + 1] = {};
  };
  // A cached block that group `group` found for prompt block `index` (device block, or -2 - h for host
  // block h). The chain link before it (a host load and a released window link need it) is the link
  // after the group's hit at index - 1 (its metadata), or, after a miss or at index 0,
  // scratch_.group_links[link].
  static constexpr uint32_t kLinkOfPrevious = UINT32_MAX;
  struct GroupHit {
    uint32_t index, group;
    int32_t block;
    uint32_t link;  // kLinkOfPrevious, or a position in scratch_.group_links
  };
  const BlockMeta& hit_meta(int32_t block) const {
    return block >= 0 ? device_.pool.meta(block) : host_.pool.meta(-2 - block);
  }
  // Does group g take block i (< hits) at allocation? Full groups take all; window groups the blocks
  // the first uncached token's window and sinks need (the blocks apply_window would keep).
  bool group_takes(uint32_t g, uint32_t hits, uint32_t i) const;
  void group_lookup(const int64_t* tokens, size_t n, const SeqOptions& opts, GroupLookup& out);
  void sort_group_hits(GroupLookup& gl);  // scratch_.group_hits_by_group, for allocate_groups
  size_t allocate_groups(int64_t id, const int64_t* tokens, size_t n, const SeqOptions& opts);
  // A sequence's block tables (and extra keys) could not be reserved: fail_alloc with their size.
  [[noreturn]] static void fail_seq_tables(int64_t id, uint32_t groups, uint32_t num_blocks, size_t num_extra_keys);
  void free_group_blocks(Sequence& s);   // free_seq with groups: ARCHITECTURE.md, "Eviction order with groups"
  // A block the window of sequence `id` let go of, if it still holds that content and is free (and, if
  // parked, parked for that sequence): to the queue tail.
  void requeue_released(const GroupTable::ReleasedBlock& r, int64_t id);
  // One group's part of an append (blocks checked and reserved; s.num_tokens is still the old count) and
  // of a rollback to len tokens, nb blocks (s's counts are set by the caller).
  void append_apply(const Sequence& s, GroupTable& t, const int64_t* tokens, size_t n);
  void commit_apply(Sequence& s, size_t n) {  // commit() once n is checked and window links reserved
    // In the class: commit() and batch_commit() (two files) run it once per decode token.
    counters_.computed_tokens += n;
    s.num_computed += n;
    for (GroupTable& t : s.groups) {
      // Most decode commits fill no block: no call then (hash_committed_blocks tests this too).
      if (s.num_computed / bs_ > t.num_hashed) hash_committed_blocks(s, t);
      apply_window(s, t);
    }
  }
  void rollback_apply(const Sequence& s, GroupTable& t, uint64_t len, uint32_t nb, uint32_t hashed, const ChainLink& chain);
  Sequence& seq(int64_t id);             // throws no_such_sequence
  Sequence& device_seq(int64_t id);      // ... and bad_state if swapped out
  Sequence& swap_out_seq(int64_t id);    // ... and bad_state with a pending token tree
  Sequence* find_seq(int64_t id);
  const Sequence* find_seq_const(int64_t id) const;
  Sequence& new_seq(int64_t id);         // throws sequence_exists; inserts into the table
  void drop_seq(Sequence& s);
  void check_batch_ids(const int64_t* ids, size_t n, const char* what);  // on device, no duplicates
  // Prefix groups of the batch rows (manager_batch.cpp): sizes out.num_groups / num_members, fails with
  // buffer_too_small before writing anything; write_prefix_groups then fills the caller's buffers.
  void find_prefix_groups(const int64_t* ids, size_t n, uint32_t group, PrefixGroupsOut& out);
  void write_prefix_groups(PrefixGroupsOut& out);

  void validate_options(const SeqOptions& opts, size_t n) const;
  void lookup(const int64_t* tokens, size_t n, const ChainLink& first, const SeqOptions& opts,
              std::vector<int32_t>* hits_out, Lookup& out);
  // The per-block helpers of the lookup, append and commit loops (is_cacheable, link_after, and below
  // acquire_cached, sequence_holders, forget_hash) are defined in the class, not in manager_blocks.cpp:
  // their callers are in other files (manager_allocate.cpp, manager_groups.cpp, manager_append.cpp),
  // and called out of line they cost the cached-prompt path about a quarter of its time.
  bool is_cacheable(const int64_t* tokens, size_t n, ExtraKey extra) const {
    // The empty list (the usual case) is tested here, not behind a call per block.
    return extra.present || keys_.non_cacheable.empty() || !contains_non_cacheable(tokens, n);
  }
  bool contains_non_cacheable(const int64_t* tokens, size_t n) const;
  ChainLink link_after(const BlockMeta& m) const { return link_to(m.key, m); }
  // link_after(m) for the block m that a lookup found under `key` (so m.key == key): the next block's key
  // waits on the key just computed, not on m's metadata, which on a large index is a cache miss (as its
  // slot and tokens are) while the next key's hash could run. The replay of the full Mooncake trace
  // (nearly every lookup a run of hits): 0.93 -> 0.55 s at the same index.
  ChainLink link_to(const Key128& key, const BlockMeta& m) const {
    ChainLink l;
    l.kind = ChainLink::parent;
    l.hash = m.hash;
    l.key = key;
    return l;
  }
  uint32_t watermark_blocks() const { return watermark_blocks_; }

  int32_t take_free_block();             // queue head, evicting its cached content
  // Takes n blocks from the free queue into out[0..n) (take_free_block n times), loading the index slots
  // of the cached blocks it will evict a few blocks ahead of their eviction.
  void take_free_blocks(int32_t* out, size_t n);
  void acquire_cached(int32_t b) {  // a hit: take a reference
    BlockMeta& m = device_.pool.meta(b);
    if (m.ref == 0) {
      device_.pool.unlink(b);
      if (m.indexed) --counters_.cached_free;
    }
    ++m.ref;
  }
  // Drops a reference; at zero the block goes to the queue tail, or is parked for the window of `parker`.
  void release_block(int32_t b, const Sequence* parker = nullptr);
  void drop_copy_into(int32_t b);  // release_block's rare part (a pending copy into b), out of its line
  int32_t sequence_holders(int32_t b) const {  // ref count less pending copies reading b
    // Pending copies read b before the next forward step writes anything, so they do not make b shared.
    int32_t n = device_.pool.meta(b).ref;
    for (const BlockPair& p : pending_.copies) n -= p.first == b;
    return n;
  }
  void forget_hash(int32_t b) {  // the block's content changes: leave the index, lose the hash
    BlockMeta& m = device_.pool.meta(b);
    if (m.indexed) {
      unindex_block(b);
      if (m.in_free) --counters_.cached_free;
    }
    m.has_hash = 0;
    m.has_extra = 0;
  }
  // Enters a committed full block (STORED event). host_copy: the host block known to hold the same key
  // (a load), -1 if none is, kUnknownHost to look it up.
  static constexpr int32_t kUnknownHost = -2;
  void index_block(int32_t b, const ChainLink& parent, uint32_t group, int32_t host_copy = kUnknownHost);
  void unindex_block(int32_t b);         // leave the index (REMOVED event when its hash is gone)
  void hash_committed_blocks(const Sequence& s, GroupTable& t);  // group t's committed full blocks
  void apply_window(const Sequence& s, GroupTable& t);  // releases blocks no coming query can attend (ARCHITECTURE.md)
  // The first block the query of position p attends under a window of `window` tokens (sinks aside).
  uint32_t window_first_block(uint32_t window, uint64_t p) const;
  // A block that a rollback / fork_at to nb blocks, `computed` computed, would need but was released.
  uint32_t first_released_needed(const GroupTable& t, uint64_t computed, uint32_t nb) const;
  void reserve_window_link(GroupTable& t, uint32_t window);  // room for apply_window, before any change
  // Writes n tokens into group t's blocks from position `from` on (the blocks must already exist); the
  // caller sets the sequence's num_tokens.
  void write_tokens(GroupTable& t, uint64_t from, const int64_t* tokens, size_t n);
  // Free blocks an append of n tokens to s takes in all its groups (new blocks and copy-on-write
  // copies); *copies (if not NULL): how many of them are copies.
  size_t blocks_needed_to_append(const Sequence& s, size_t n, size_t* copies) const;
  // Block b of tier t (medium 0 device, 1 host) entered the index (stored) or left it (manager_events.cpp).
  void emit_block(const Tier& t, uint32_t medium, uint32_t type, int32_t b, bool stored);
  void emit_cleared();

  // Host tier (manager_host.cpp).
  int32_t take_host_block();              // empty, else evict the first cached block; -1 if none
  void offload(int32_t b);                // device block b is evicted: copy it to the host cache
  void host_twin_enter(int32_t b, int32_t h);  // device block b entered the index; h: its host copy
  void host_twin_leave(int32_t b);        // ... left it
  void pin_host(int32_t h);               // a pending load will read h
  void host_enqueue(int32_t h);           // a cached host block becomes evictable (twin list or LRU)
  void host_unqueue(int32_t h);           // ... leaves whichever list it is in
  int32_t load_from_host(int32_t h, const ChainLink& parent);  // a free device block, loaded from h
  void clear_host_cache();
  void release_swapped(Sequence& s);      // a swapped-out sequence's host blocks (every group's) become empty
  size_t host_available() const;          // host blocks a swap out may take
  size_t held_blocks(const Sequence& s, bool host) const;  // blocks held in every group (device or host tables)
  void check_host_invariants(const std::vector<uint8_t>& host_held) const;
  void check_tree_invariants(std::vector<int32_t>& refs) const;  // adds the held blocks' references
  // The export's tree_mask rows of one sequence (its uncomputed tokens).
  void write_tree_mask(const Sequence& s, uint64_t* out) const;

  // Store tier (manager_store.cpp).
  // Continues a lookup that missed at block `from` (chain: the link before it) into the store.
  uint32_t store_lookup(const int64_t* tokens, uint32_t from, uint32_t num_blocks, ChainLink chain,
                        const SeqOptions& opts, uint32_t host_hits);
  void store_put(int32_t h);  // cached host block h is evicted (its pending offload, if any, is not)
  void store_through_offloaded();  // write-through: the pending offloads are being handed out
  // Allocate's store hits: keys in store_.keys, device blocks table[first, first + count).
  int32_t take_store_staging();  // a host block for a get (allocate made sure one is takeable)
  void store_start_gets(Sequence& s, uint32_t first, uint32_t count);  // hosts in scratch_.store_hosts
  void store_complete(size_t get, int32_t status);  // gets_[get] ended
  void store_release_staging(int32_t h);  // a staging host block is done: empty again
  void emit_store(int32_t h);
  void check_store_invariants(std::vector<int32_t>& host_refs) const;

  // The members, each with one job. What decides a block's key: the hasher (index keys: seed 0, or the
  // secret seed of a keyed index) and the tokens that make a block uncacheable (sorted, unique).
  struct KeyRules {
    explicit KeyRules(uint64_t seed) : hasher(seed) {}
    BlockHasher hasher;
    std::vector<int64_t> non_cacheable;
  };
  // Where the host tier's blocks are besides its pool's queue (see manager_host.cpp).
  struct HostBlocks {
    std::vector<int32_t> empty;  // stack of host blocks that hold nothing
    std::vector<int32_t> twin;   // device block indexed under the same key, or -1
    struct TwinList {            // cached host blocks with a device twin (in_free == 2), oldest first
      int32_t head = -1, tail = -1;
      uint32_t size = 0;
    } twins;
    uint32_t twin_budget = 0;    // twins kept before unique cached blocks are dropped
    size_t held = 0;             // blocks held by swapped-out sequences
  };
  // KV cache groups (kvb_config.groups).
  struct GroupState {
    explicit GroupState(uint32_t n) : count(n) {}
    uint32_t count;                   // 1 when none are configured
    std::vector<int64_t> parked_for;  // with groups: the sequence each parked block is parked for
    // With groups: blocks indexed under each group, device and host together. A prefix lookup hits a
    // block at most once (its key holds its group and whole history), so group g hits at most this many.
    std::vector<uint32_t> cached;
  };
  // Block pairs the engine drains. Copies: copy-on-write, each holding a reference on its source.
  // Host transfers: offloads (device src, host dst) run before loads (host src, device dst).
  struct Transfers {
    std::vector<BlockPair> copies, offloads, loads;
  };
  // Buffers reused across calls, so that a warm allocate does not allocate.
  struct Scratch {
    std::vector<int32_t> hits;  // allocate's device and host hits
    // group_lookup's hits, in prompt order (then group order): 16 bytes each. Only hits are kept, and
    // a block is hit once per lookup (its key holds its group and whole history): never more entries
    // than device and host blocks, whatever the prompt's length.
    std::vector<GroupHit> group_hits;
    std::vector<ChainLink> group_links;          // links before hits that follow a miss (or start the prompt)
    std::vector<GroupHit> group_hits_by_group;   // the same, by group then prompt order (allocate_groups)
    std::vector<int32_t> store_hosts;            // allocate's staging host blocks, one per store hit
  };

  ManagerConfig cfg_;
  uint32_t bs_;                // cfg_.block_size, read on every path
  uint32_t watermark_blocks_;  // free blocks an allocation leaves
  KeyRules keys_;
  Tier device_;  // device blocks; the pool's queue is the free queue
  Tier host_;    // host blocks; the pool's queue holds the cached host blocks in eviction order
  HostBlocks host_blocks_;
  GroupState groups_;
  SequenceTable seqs_;
  Transfers pending_;
  EventQueue events_;
  StoreTier store_;
  Counters counters_;
  Scratch scratch_;
  TreeState trees_;
};

}  // namespace kvb
