// The core flow (docs/ARCHITECTURE.md, "Sequences"): allocate with prefix lookup, commit, append, free,
// and the block-level helpers that keep the free queue, the index and the counters in step.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <new>

#include "error.h"
#include "manager.h"

namespace kvb {

static constexpr uint32_t kMaxBlockSize = 1u << 16;
static constexpr uint32_t kMaxBlocks = 1u << 30;  // block ids are int32; slots (id*bs) must fit int64
// No sequence has more blocks than this (its table alone would take 4 GiB): bounds extra-key indices.
static constexpr uint32_t kMaxSeqBlocks = 1u << 30;
static constexpr uint32_t kMaxGroups = kMaxForkGroups;

Manager::Manager(const ManagerConfig& cfg)
    : cfg_((validate_config(cfg), cfg)),
      bs_(cfg.block_size),
      watermark_blocks_(static_cast<uint32_t>(std::floor(static_cast<double>(cfg.watermark) * cfg.num_blocks))),
      hasher_(cfg.keyed_index ? (cfg.index_seed ? cfg.index_seed : os_random_u64()) : 0),
      pool_(cfg.num_blocks, cfg.block_size, "the device block pool"),
      index_(pool_, "the device prefix index"),
      groups_(cfg.groups.empty() ? 1 : static_cast<uint32_t>(cfg.groups.size())),
      non_cacheable_(cfg.non_cacheable),
      seq_table_(64, SeqTraits{}, "the sequence table"),
      host_pool_(cfg.num_host_blocks, cfg.block_size, "the host block pool"),
      host_index_(host_pool_, "the host prefix index") {
  std::sort(non_cacheable_.begin(), non_cacheable_.end());
  non_cacheable_.erase(std::unique(non_cacheable_.begin(), non_cacheable_.end()), non_cacheable_.end());
  if (cfg.events) {
    events_.enable(cfg.event_capacity, bs_);
    stored_hashes_.reset(new HashCounts(cfg.num_blocks, "the device event hash counts"));
    if (cfg.host_cache) host_hashes_.reset(new HashCounts(cfg.num_host_blocks, "the host event hash counts"));
  }
  try {
    allocate_block_arrays();
  } catch (const std::bad_alloc&) {
    const bool many = groups_ > 1, host = cfg.host_cache, ev = cfg.events;
    const unsigned long long device = (ev ? sizeof(ParentRef) : 0) + (host ? sizeof(BlockPair) : 0) + many +
                                      (cfg.groups.empty() ? 0 : sizeof(int64_t));
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
  if (groups_ > 1) block_group_.assign(cfg.num_blocks, 0);
  if (groups_ > 1 && cfg.host_cache) host_group_.assign(cfg.num_host_blocks, 0);
  if (!cfg.groups.empty()) parked_for_.assign(cfg.num_blocks, 0);
  if (!cfg.groups.empty()) group_cached_.assign(groups_, 0);
  // Host blocks start empty (a stack: block 0 is taken first), not in the host pool's queue.
  host_empty_.reserve(cfg.num_host_blocks);
  while (host_pool_.num_free() > 0) host_empty_.push_back(host_pool_.pop_head());
  std::reverse(host_empty_.begin(), host_empty_.end());
  host_twin_.assign(cfg.num_host_blocks, -1);
  twin_budget_ = static_cast<uint32_t>(static_cast<uint64_t>(cfg.num_host_blocks) * cfg.host_twin_percent / 100);
  if (cfg.host_cache) {  // pending transfers have unique destinations: these bounds are never passed
    pending_offloads_.reserve(cfg.num_host_blocks);
    pending_loads_.reserve(cfg.num_blocks);
  }
  if (cfg.events) {
    parents_.resize(cfg.num_blocks);
    if (cfg.host_cache) host_parents_.resize(cfg.num_host_blocks);
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
  if (cfg.groups.size() > kMaxGroups)
    fail(Code::invalid_argument, "num_groups %zu exceeds %u", cfg.groups.size(), kMaxGroups);
  for (size_t g = 0; g < cfg.groups.size(); ++g) {
    const GroupSpec& gs = cfg.groups[g];
    if (gs.window && gs.window_tokens == 0)
      fail(Code::invalid_argument, "groups[%zu]: a window group needs window_tokens > 0", g);
    if (!gs.window && (gs.window_tokens || gs.sink_tokens))
      fail(Code::invalid_argument, "groups[%zu]: a full-attention group takes no window_tokens (%u) or sink_tokens (%u)",
           g, gs.window_tokens, gs.sink_tokens);
  }
}

// ---- blocks -------------------------------------------------------------------------------------

int32_t Manager::take_free_block() {
  int32_t b = pool_.pop_head();
  // The block taken after this one (whose metadata pop_head just touched): if it is cached, its index
  // slot, which its eviction will erase, loads meanwhile. On large pools that slot is a cache miss.
  const int32_t next = pool_.free_head();
  if (next >= 0 && pool_.meta(next).indexed) index_.prefetch(pool_.meta(next).key);
  BlockMeta& m = pool_.meta(b);
  if (m.indexed) {
    unindex_block(b);
    --cached_free_;
    ++evictions_;
    if (cfg_.host_cache) offload(b);  // write-back: the content moves to the host level
  }
  m.has_hash = 0;
  m.has_extra = 0;
  m.ref = 1;
  return b;
}

void Manager::acquire_cached(int32_t b) {
  BlockMeta& m = pool_.meta(b);
  if (m.ref == 0) {
    pool_.unlink(b);
    if (m.indexed) --cached_free_;
  }
  ++m.ref;
}

void Manager::release_block(int32_t b, const Sequence* parker) {
  BlockMeta& m = pool_.meta(b);
  if (--m.ref > 0) return;
  if (parker) {
    pool_.park(b);
    parked_for_[b] = parker->id;
  } else {
    pool_.push_tail(b);
  }
  if (m.indexed) ++cached_free_;
  // A copy into a block nobody holds any more must not run once the block is reused; dropping it
  // releases the reference it held on its source. (Destinations are unique.)
  for (size_t i = 0; i < pending_copies_.size(); ++i) {
    if (pending_copies_[i].second != b) continue;
    int32_t src = pending_copies_[i].first;
    pending_copies_.erase(pending_copies_.begin() + static_cast<long>(i));
    release_block(src);
    break;
  }
}

int32_t Manager::sequence_holders(int32_t b) const {
  // Pending copies read b before the next forward step writes anything, so they do not make b shared.
  int32_t n = pool_.meta(b).ref;
  for (const BlockPair& p : pending_copies_) n -= p.first == b;
  return n;
}

void Manager::release_pending_copies() {
  // The caller has the pairs and runs them before the next forward step: sources may be reused after.
  // No source is also a destination (append folds such chains), so these releases drop no pair.
  for (const BlockPair& p : pending_copies_) release_block(p.first);
  pending_copies_.clear();
}

void Manager::forget_hash(int32_t b) {
  BlockMeta& m = pool_.meta(b);
  if (m.indexed) {
    unindex_block(b);
    if (m.in_free) --cached_free_;
  }
  m.has_hash = 0;
  m.has_extra = 0;
}

void Manager::unindex_block(int32_t b) {
  BlockMeta& m = pool_.meta(b);
  index_.erase_if_points_to(m.key, b);
  if (m.indexed && !group_cached_.empty()) --group_cached_[block_group(b)];
  m.indexed = 0;
  if (cfg_.host_cache) host_twin_leave(b);
  if (events_.enabled() && stored_hashes_->remove(block_group(b), m.hash))
    emit(2 /* KVB_EVENT_BLOCK_REMOVED */, b, nullptr);
}

void Manager::index_block(int32_t b, const ChainLink& parent, uint32_t group, int32_t host_copy) {
  BlockMeta& m = pool_.meta(b);
  int32_t old = index_.put(m.key, b);
  if (old == b) return;
  // Keys carry the group (the first link does), so a replaced block is always of the same group.
  if (!block_group_.empty()) block_group_[b] = static_cast<uint8_t>(group);
  if (!m.indexed && m.in_free) ++cached_free_;
  if (!m.indexed && !group_cached_.empty()) ++group_cached_[group];
  m.indexed = 1;
  if (cfg_.host_cache) host_twin_enter(b, host_copy == kUnknownHost ? host_index_.find(m.key) : host_copy);
  if (events_.enabled()) parents_[b] = ParentRef{parent.hash, static_cast<uint8_t>(parent.kind)};
  // The new block is counted before the one it replaces is uncounted: equal keys carry equal public
  // hashes, so replacing a block by a recomputed copy emits nothing.
  if (events_.enabled() && stored_hashes_->add(group, m.hash)) emit(1 /* KVB_EVENT_BLOCK_STORED */, b, &parent);
  if (old >= 0) {
    BlockMeta& o = pool_.meta(old);
    o.indexed = 0;
    if (!group_cached_.empty()) --group_cached_[group];
    if (o.in_free) --cached_free_;
    if (o.in_free == 2) {  // parked blocks are cached ones (see park): an empty one is reused first
      pool_.unlink(old);
      pool_.push_head(old);
    }
    if (events_.enabled() && stored_hashes_->remove(group, o.hash)) emit(2 /* KVB_EVENT_BLOCK_REMOVED */, old, nullptr);
  }
}

ChainLink Manager::link_after(const BlockMeta& m) const {
  ChainLink l;
  l.kind = ChainLink::parent;
  l.hash = m.hash;
  l.key = m.key;
  return l;
}

bool Manager::contains_non_cacheable(const int64_t* tokens, size_t n) const {
  if (non_cacheable_.empty()) return false;
  if (non_cacheable_.size() <= 4) {
    for (size_t i = 0; i < n; ++i)
      for (int64_t t : non_cacheable_)
        if (tokens[i] == t) return true;
    return false;
  }
  for (size_t i = 0; i < n; ++i)
    if (std::binary_search(non_cacheable_.begin(), non_cacheable_.end(), tokens[i])) return true;
  return false;
}

bool Manager::is_cacheable(const int64_t* tokens, size_t n, ExtraKey extra) const {
  return extra.present || !contains_non_cacheable(tokens, n);
}

// ---- allocate -----------------------------------------------------------------------------------

void Manager::fail_seq_tables(int64_t id, uint32_t groups, uint32_t num_blocks, size_t num_extra_keys) {
  char what[64];
  std::snprintf(what, sizeof what, "the tables of seq %" PRId64, id);
  const unsigned long long extra = num_extra_keys * sizeof(std::pair<uint32_t, uint64_t>);
  fail_alloc(what, static_cast<unsigned long long>(groups) * (static_cast<unsigned long long>(num_blocks) * sizeof(int32_t) + extra),
             "%u group%s x (%u blocks of 4 bytes + %zu extra keys of %zu bytes)", groups, plural_s(groups), num_blocks,
             num_extra_keys, sizeof(std::pair<uint32_t, uint64_t>));
}

void Manager::validate_options(const SeqOptions& o, size_t n) const {
  if (o.num_extra_keys) {
    if (!o.extra_key_blocks || !o.extra_keys)
      fail(Code::invalid_argument, "num_extra_keys is %zu but extra_key_blocks or extra_keys is NULL", o.num_extra_keys);
    if (o.extra_key_blocks[o.num_extra_keys - 1] >= kMaxSeqBlocks)  // indices increase: the last is largest
      fail(Code::invalid_argument, "extra_key_blocks[%zu] = %u: no sequence has more than %u blocks",
           o.num_extra_keys - 1, o.extra_key_blocks[o.num_extra_keys - 1], kMaxSeqBlocks);
    for (size_t i = 1; i < o.num_extra_keys; ++i)
      if (o.extra_key_blocks[i] <= o.extra_key_blocks[i - 1])
        fail(Code::invalid_argument, "extra_key_blocks[%zu] = %u is not greater than the previous index %u", i,
             o.extra_key_blocks[i], o.extra_key_blocks[i - 1]);
  }
  if (o.window == 0 && o.sink != 0)
    fail(Code::invalid_argument, "sink_tokens %u given without a window", o.sink);
  (void)n;
}

static ChainLink first_link_of(const SeqOptions& o) {
  ChainLink l;
  if (o.has_salt) {
    l.kind = ChainLink::salt;
    l.hash = o.salt;
    l.key = Key128{o.salt, 0};
  }
  return l;
}

void Manager::lookup(const int64_t* tokens, size_t n, const ChainLink& first, const SeqOptions& opts,
                     std::vector<int32_t>* hits_out, Lookup& out) {
  out = Lookup{};
  out.num_blocks = blocks_for(n, bs_);
  out.chain = first;
  // Never the last block: at least one token is always computed, so the model has logits to sample.
  ExtraKeyCursor extras(opts);
  uint32_t i = 0;
  for (; i + 1 < out.num_blocks; ++i) {
    const int64_t* blk = tokens + static_cast<size_t>(i) * bs_;
    const ExtraKey extra = extras.at(i);
    if (!is_cacheable(blk, bs_, extra)) break;
    const Key128 key = hasher_.key(out.chain, blk, bs_, extra);
    // The hash is not trusted alone: the stored tokens and extra key must equal the prompt's.
    auto same = [&](const BlockMeta& m, const int64_t* stored) {
      return std::memcmp(stored, blk, bs_ * sizeof(int64_t)) == 0 && m.has_extra == extra.present &&
             (!extra.present || m.extra == extra.value);
    };
    if (cfg_.host_cache) host_index_.prefetch(key);  // its slot loads while the device level is probed
    int32_t b = index_.find(key);  // the device level first
    if (b >= 0 && same(pool_.meta(b), pool_.tokens(b))) {
      ++out.hits;
      if (pool_.meta(b).ref == 0) ++out.free_hits;
      if (hits_out) hits_out->push_back(b);
      out.chain = link_after(pool_.meta(b));
      continue;
    }
    int32_t h = cfg_.host_cache ? host_index_.find(key) : -1;  // then the host level
    if (h < 0 || !same(host_pool_.meta(h), host_pool_.tokens(h))) break;
    ++out.hits;
    ++out.host_hits;
    if (hits_out) hits_out->push_back(-2 - h);  // host hits are stored as -2 - h
    out.chain = link_after(host_pool_.meta(h));
  }
  if (store_.on) {  // the third level: one batched lookup of the blocks after the miss
    out.store_hits = store_lookup(tokens, i, out.num_blocks, out.chain, opts, out.host_hits);
    out.hits += out.store_hits;
  }
}

bool Manager::can_allocate(const int64_t* tokens, size_t n, const SeqOptions& opts, size_t* num_cached) {
  if (n == 0) fail(Code::invalid_argument, "prompt has 0 tokens");
  // Same bound as allocate: beyond it the block count would not fit uint32 (and wrap to a wrong "OK").
  if (n > static_cast<size_t>(kMaxBlocks) * bs_)
    fail(Code::invalid_argument, "prompt of %zu tokens is longer than any pool", n);
  validate_options(opts, n);
  if (!cfg_.groups.empty()) {
    GroupLookup gl;
    group_lookup(tokens, n, opts, gl);
    *num_cached = gl.hits * static_cast<size_t>(bs_);
    return pool_.num_free() >= gl.needed + watermark_blocks_;
  }
  Lookup lk;
  lookup(tokens, n, first_link_of(opts), opts, nullptr, lk);
  *num_cached = static_cast<size_t>(lk.hits) * bs_;
  uint64_t needed = static_cast<uint64_t>(lk.num_blocks - lk.hits) + lk.host_hits + lk.free_hits + lk.store_hits;
  return pool_.num_free() >= needed + watermark_blocks_;
}

size_t Manager::allocate(int64_t id, const int64_t* tokens, size_t n, const SeqOptions& opts) {
  if (n == 0) fail(Code::invalid_argument, "seq %" PRId64 ": prompt has 0 tokens", id);
  if (n > static_cast<size_t>(kMaxBlocks) * bs_)
    fail(Code::invalid_argument, "seq %" PRId64 ": prompt of %zu tokens is longer than any pool", id, n);
  validate_options(opts, n);
  if (find_seq(id)) fail(Code::sequence_exists, "sequence id %" PRId64 " already exists", id);
  if (!cfg_.groups.empty()) return allocate_groups(id, tokens, n, opts);

  ChainLink first = first_link_of(opts);
  scratch_hits_.clear();
  Lookup lk;
  lookup(tokens, n, first, opts, &scratch_hits_, lk);
  uint64_t needed = static_cast<uint64_t>(lk.num_blocks - lk.hits) + lk.host_hits + lk.free_hits + lk.store_hits;
  if (pool_.num_free() < needed + watermark_blocks_)
    fail(Code::out_of_blocks, "seq %" PRId64 ": needs %" PRIu64 " free block%s (+%u watermark), %u %s free", id, needed,
         plural_s(needed), watermark_blocks_, pool_.num_free(), is_are(pool_.num_free()));

  Sequence& s = new_seq(id);
  try {
    s.table.reserve(lk.num_blocks);
    reserve_window_link(s, opts.window);
    if (opts.num_extra_keys) {
      s.extra_keys.reserve(opts.num_extra_keys);
      for (size_t i = 0; i < opts.num_extra_keys; ++i) s.extra_keys.emplace_back(opts.extra_key_blocks[i], opts.extra_keys[i]);
    }
    if (lk.store_hits) {
      store_.gets.reserve(store_.gets.size() + lk.store_hits);
      store_hosts_.resize(lk.store_hits);
    }
  } catch (const std::bad_alloc&) {
    drop_seq(s);
    fail_seq_tables(id, 1, lk.num_blocks, opts.num_extra_keys);
  } catch (...) {
    drop_seq(s);
    throw;
  }
  // From here on nothing allocates. Device hits are taken and host hits pinned before any block is taken
  // from the free queue: its evictions (and their offloads) must not touch them.
  for (int32_t b : scratch_hits_) {
    if (b >= 0) acquire_cached(b);
    else pin_host(-2 - b);
  }
  // Store hits' staging host blocks next, while lookup's count of takeable host blocks still holds (the
  // device evictions below offload into host blocks too).
  for (uint32_t j = 0; j < lk.store_hits; ++j) store_hosts_[j] = take_store_staging();
  ChainLink parent = first;
  for (int32_t b : scratch_hits_) {
    if (b < 0) b = load_from_host(-2 - b, parent);  // counts as cached: the load runs before the step
    s.table.push_back(b);
    parent = link_after(pool_.meta(b));
  }
  while (s.table.size() < lk.num_blocks) s.table.push_back(take_free_block());
  size_t cached = static_cast<size_t>(lk.hits) * bs_;
  // Store hits count as cached but are hashed (and indexed) only once their gets end good.
  const uint32_t hashed = lk.hits - lk.store_hits;
  s.num_tokens = static_cast<size_t>(hashed) * bs_;
  write_tokens(s, tokens + s.num_tokens, n - s.num_tokens);
  s.num_computed = s.num_cached = cached;
  s.num_hashed = hashed;
  s.first_link = first;
  s.chain = lk.chain;
  s.window = opts.window;
  s.sink = opts.sink;
  s.window_next = blocks_for(opts.sink, bs_);
  query_tokens_ += n;
  hit_tokens_ += cached;
  host_hit_tokens_ += static_cast<uint64_t>(lk.host_hits) * bs_;
  apply_window(s);
  if (lk.store_hits) store_start_gets(s, hashed, lk.store_hits);
  return cached;
}

void Manager::write_tokens(Sequence& s, const int64_t* tokens, size_t n) {
  uint64_t pos = s.num_tokens;
  while (n > 0) {
    uint32_t off = static_cast<uint32_t>(pos % bs_);
    size_t take = std::min<size_t>(n, bs_ - off);
    std::memcpy(pool_.tokens(s.table[pos / bs_]) + off, tokens, take * sizeof(int64_t));
    tokens += take;
    pos += take;
    n -= take;
  }
  s.num_tokens = pos;
}

// ---- commit -------------------------------------------------------------------------------------

void Manager::hash_committed_blocks(Sequence& s) {
  const uint32_t end = static_cast<uint32_t>(s.num_computed / bs_);
  if (s.num_hashed >= end) return;
  if (s.uncacheable_from == kNoBlockIndex) {
    // Each block enters the index one iteration after its hash is computed, so that its index slot,
    // prefetched meanwhile, is in cache by then: on large pools the index is the miss path's stall.
    int32_t lagging = -1;
    ChainLink lagging_parent;
    for (uint32_t i = s.num_hashed; i < end; ++i) {
      int32_t b = s.table[i];
      ExtraKey extra = s.extra_keys.empty() ? ExtraKey{} : s.extra_key(i);
      const int64_t* toks = pool_.tokens(b);
      // Once a block holds a non-cacheable token (without an extra key), no later block is cacheable:
      // its hash chain would describe content that the index cannot reproduce.
      if (!is_cacheable(toks, bs_, extra)) {
        s.uncacheable_from = i;
        break;
      }
      BlockMeta& m = pool_.meta(b);
      hasher_.hash_and_key(s.chain, toks, bs_, extra, &m.hash, &m.key);
      m.has_hash = 1;
      m.has_extra = extra.present;
      m.extra = extra.value;
      index_.prefetch(m.key);
      if (lagging >= 0) index_block(lagging, lagging_parent, s.group);
      lagging = b;
      lagging_parent = s.chain;
      s.chain = link_after(m);
    }
    if (lagging >= 0) index_block(lagging, lagging_parent, s.group);
  }
  s.num_hashed = end;
}

void Manager::commit(int64_t id, size_t n) {
  Sequence& s = device_seq(id);
  uint64_t uncomputed = s.num_tokens - s.num_computed;
  if (n > uncomputed)
    fail(Code::invalid_argument, "seq %" PRId64 ": commit of %zu token%s exceeds %" PRIu64 " uncomputed token%s", id, n,
         plural_s(n), uncomputed, plural_s(uncomputed));
  for (uint32_t g = 0; g < groups_; ++g) reserve_window_link(grp(s, g), grp(s, g).window);
  computed_tokens_ += n;
  for (uint32_t g = 0; g < groups_; ++g) {
    Sequence& gs = grp(s, g);
    gs.num_computed += n;
    hash_committed_blocks(gs);
    apply_window(gs);
  }
}

// ---- append -------------------------------------------------------------------------------------

size_t Manager::blocks_needed_to_append(const Sequence& s, size_t n) const {
  if (n == 0) return 0;
  uint64_t total = blocks_for(s.num_tokens + n, bs_);
  size_t needed = static_cast<size_t>(total - s.table.size());
  // Writing into a partial block that another sequence shares needs a private copy first.
  if (s.num_tokens % bs_ != 0 && sequence_holders(s.table.back()) > 1) ++needed;
  return needed;
}

bool Manager::can_append(int64_t id, size_t n) {
  Sequence& s = device_seq(id);
  if (n > static_cast<size_t>(kMaxSeqBlocks) * bs_ || s.num_tokens + n > static_cast<uint64_t>(kMaxSeqBlocks) * bs_)
    return false;
  size_t needed = 0;
  for (uint32_t g = 0; g < groups_; ++g) needed += blocks_needed_to_append(grp(s, g), n);
  return pool_.num_free() >= needed;
}

void Manager::append(int64_t id, const int64_t* tokens, size_t n) {
  Sequence& s = device_seq(id);
  if (n == 0) return;
  if (n > static_cast<size_t>(kMaxSeqBlocks) * bs_ || s.num_tokens + n > static_cast<uint64_t>(kMaxSeqBlocks) * bs_)
    fail(Code::invalid_argument, "seq %" PRId64 ": append of %zu tokens to %" PRIu64 " would exceed %u blocks", id, n,
         s.num_tokens, kMaxSeqBlocks);
  size_t needed = 0;
  for (uint32_t g = 0; g < groups_; ++g) needed += blocks_needed_to_append(grp(s, g), n);
  if (pool_.num_free() < needed)
    fail(Code::out_of_blocks, "seq %" PRId64 ": append of %zu token%s needs %zu free block%s, %u %s free", id, n,
         plural_s(n), needed, plural_s(needed), pool_.num_free(), is_are(pool_.num_free()));
  // Reserve for every group first: nothing below allocates, so the append is all-or-nothing across groups.
  const size_t total = blocks_for(s.num_tokens + n, bs_);
  size_t cows = 0;
  for (uint32_t g = 0; g < groups_; ++g) {
    Sequence& gs = grp(s, g);
    if (total > gs.table.capacity()) gs.table.reserve(std::max(total, 2 * gs.table.capacity()));
    cows += gs.num_tokens % bs_ != 0 && sequence_holders(gs.table.back()) > 1;
  }
  if (pending_copies_.size() + cows > pending_copies_.capacity())
    pending_copies_.reserve(std::max<size_t>(16, 2 * (pending_copies_.size() + cows)));
  for (uint32_t g = 0; g < groups_; ++g) append_apply(grp(s, g), tokens, n);
}

void Manager::append_apply(Sequence& s, const int64_t* tokens, size_t n) {
  const size_t total = blocks_for(s.num_tokens + n, bs_);
  const bool cow = s.num_tokens % bs_ != 0 && sequence_holders(s.table.back()) > 1;
  if (cow) {
    int32_t src = s.table.back();
    int32_t dst = take_free_block();
    std::memcpy(pool_.tokens(dst), pool_.tokens(src), (s.num_tokens % bs_) * sizeof(int64_t));
    // The sequence's reference on src passes to the pending copy, so src cannot be reused before the
    // copy runs. If src is itself waiting for a copy from s0, copy from s0: its content is what src
    // will hold, and the drained list then never depends on the order of its pairs.
    int32_t from = src;
    for (const BlockPair& p : pending_copies_)
      if (p.second == src) from = p.first;
    if (from != src) {
      acquire_cached(from);  // held by its own pending copy: never in the free queue
      release_block(src);    // still held by the sequences it is shared with
    }
    pending_copies_.emplace_back(from, dst);
    ++cow_copies_;
    s.table.back() = dst;
  } else if (s.num_tokens % bs_ != 0 && pool_.meta(s.table.back()).has_hash) {
    // A committed full block that this sequence shares only partially (fork_at or rollback into a block
    // that was shared then) and now holds alone: writing changes its content, so it leaves the index.
    forget_hash(s.table.back());
  }
  while (s.table.size() < total) s.table.push_back(take_free_block());
  write_tokens(s, tokens, n);
  // No window release here: the new tokens' queries attend back from their own positions (see
  // apply_window), and a rejected draft must be rollback-able.
}

// ---- free, queries ------------------------------------------------------------------------------

void Manager::free_seq(int64_t id) {
  Sequence& s = seq(id);
  if (s.swapped) {
    release_swapped(s);
    for (uint32_t g = 0; g < groups_; ++g)  // its parked blocks (if any) age from now on
      for (size_t i = grp(s, g).released_blocks.size(); i-- > 0;) requeue_released(grp(s, g).released_blocks[i], id);
  } else if (!cfg_.groups.empty()) {
    free_group_blocks(s);  // every group's blocks age together (manager_groups.cpp)
  } else {
    for (size_t i = s.table.size(); i-- > 0;)
      if (s.table[i] >= 0) release_block(s.table[i]);
  }
  drop_seq(s);
}

const std::vector<int32_t>& Manager::block_table(int64_t id, uint32_t group) {
  Sequence& s = seq(id);
  if (group >= groups_)
    fail(Code::invalid_argument, "group %u is out of range: the manager has %u group%s", group, groups_,
         plural_s(groups_));
  if (s.swapped) fail(Code::bad_state, "seq %" PRId64 " is swapped out: it has no device block table", id);
  return grp(s, group).table;
}

uint64_t Manager::block_hash(int32_t b) const {
  if (b < 0 || static_cast<uint32_t>(b) >= pool_.num_blocks())
    fail(Code::invalid_argument, "block id %d is out of range [0, %u)", b, pool_.num_blocks());
  const BlockMeta& m = pool_.meta(b);
  if (!m.has_hash) fail(Code::bad_state, "block %d holds no committed full block", b);
  return m.hash;
}

void Manager::set_extra_key(int64_t id, uint32_t block_index, uint64_t key) {
  Sequence& s = seq(id);
  if (block_index >= kMaxSeqBlocks)
    fail(Code::invalid_argument, "seq %" PRId64 ": block index %u: no sequence has more than %u blocks", id,
         block_index, kMaxSeqBlocks);
  if (block_index < s.num_hashed)
    fail(Code::bad_state, "seq %" PRId64 ": block %u is already committed and hashed", id, block_index);
  if (s.store_filling)  // its store blocks' bytes were found under their extra keys as they are
    fail(Code::bad_state, "seq %" PRId64 " is filling from the store; poll it first", id);
  auto it = std::lower_bound(s.extra_keys.begin(), s.extra_keys.end(), std::make_pair(block_index, uint64_t{0}),
                             [](const auto& a, const auto& b) { return a.first < b.first; });
  for (uint32_t g = 1; g < groups_; ++g) grp(s, g).extra_keys.reserve(s.extra_keys.size() + 1);  // before any change
  if (it != s.extra_keys.end() && it->first == block_index) it->second = key;
  else s.extra_keys.insert(it, std::make_pair(block_index, key));
  for (uint32_t g = 1; g < groups_; ++g) grp(s, g).extra_keys = s.extra_keys;  // fits: no allocation
}

Stats Manager::stats() const {
  Stats st{};
  st.free_blocks = pool_.num_free();
  st.used_blocks = pool_.num_blocks() - pool_.num_free();
  st.cached_free_blocks = cached_free_;
  st.num_seqs = live_seqs_;
  st.query_tokens = query_tokens_;
  st.hit_tokens = hit_tokens_;
  st.computed_tokens = computed_tokens_;
  st.evictions = evictions_;
  st.cow_copies = cow_copies_;
  st.swapped_out_blocks = swapped_out_;
  st.swapped_in_blocks = swapped_in_;
  st.free_host_blocks = host_empty_.size();
  st.events_dropped = events_.dropped_total();
  st.device_hit_tokens = hit_tokens_ - host_hit_tokens_ - store_.hit_tokens;
  st.host_hit_tokens = host_hit_tokens_;
  st.offloaded_blocks = offloaded_;
  st.loaded_blocks = loaded_;
  st.host_evictions = host_evictions_;
  // Host blocks are empty, held by swapped-out sequences, or cached: pinned ones (read by pending loads)
  // are cached too, in the host index and findable.
  st.cached_host_blocks = cfg_.num_host_blocks - host_empty_.size() - host_held_ - store_.staged;
  st.store_hit_tokens = store_.hit_tokens;
  st.store_put_blocks = store_.put_blocks;
  st.store_put_bytes = store_.put_blocks * store_.block_bytes;
  st.store_put_failures = store_.put_failures;
  st.store_get_blocks = store_.get_blocks;
  st.store_get_bytes = store_.get_blocks * store_.block_bytes;
  st.store_get_failures = store_.get_failures;
  st.store_recomputed_tokens = store_.recomputed_tokens;
  st.store_filling_blocks = store_.gets.size();
  return st;
}

}  // namespace kvb
