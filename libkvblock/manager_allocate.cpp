// Allocation (docs/ARCHITECTURE.md, "Sequences"): a new sequence's prompt and options checked, then
// can_allocate and allocate through the block strategy (manager.h): the steps common to both strategies,
// and the FullAttention strategy's lookup (device index, host cache, store) and allocation. The Grouped
// strategy is in manager_groups.cpp.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "error.h"
#include "manager.h"

namespace kvb {

void Manager::fail_seq_tables(int64_t id, uint32_t groups, uint32_t num_blocks, size_t num_extra_keys) {
  char what[64];
  std::snprintf(what, sizeof what, "the tables of seq %" PRId64, id);
  const unsigned long long extra = num_extra_keys * sizeof(std::pair<uint32_t, uint64_t>);
  fail_alloc(what, static_cast<unsigned long long>(groups) * (static_cast<unsigned long long>(num_blocks) * sizeof(int32_t) + extra),
             "%u group%s x (%u blocks of 4 bytes + %zu extra keys of %zu bytes)", groups, plural_s(groups), num_blocks,
             num_extra_keys, sizeof(std::pair<uint32_t, uint64_t>));
}

void Manager::check_prompt(const int64_t* id, size_t n, const SeqOptions& o) const {
  char buf[32] = "";
  auto who = [&] {  // the message's prefix, formatted only for a failure
    if (id) std::snprintf(buf, sizeof buf, "seq %" PRId64 ": ", *id);
    return buf;
  };
  if (n == 0) fail(Code::invalid_argument, "%sprompt has 0 tokens", who());
  // Beyond this bound the block count would not fit uint32 (and can_allocate would wrap to a wrong "OK").
  if (n > static_cast<size_t>(kMaxBlocks) * bs_)
    fail(Code::invalid_argument, "%sprompt of %zu tokens is longer than any pool", who(), n);
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
}

// ---- the common steps of either strategy ---------------------------------------------------------

bool Manager::can_allocate(const int64_t* tokens, size_t n, const SeqOptions& opts, size_t* num_cached) {
  check_prompt(nullptr, n, opts);
  return grouped() ? can_allocate_as<Grouped>(tokens, n, opts, num_cached)
                   : can_allocate_as<FullAttention>(tokens, n, opts, num_cached);
}

size_t Manager::allocate(int64_t id, const int64_t* tokens, size_t n, const SeqOptions& opts) {
  check_prompt(&id, n, opts);
  if (find_seq(id)) fail(Code::sequence_exists, "sequence id %" PRId64 " already exists", id);
  return grouped() ? allocate_as<Grouped>(id, tokens, n, opts) : allocate_as<FullAttention>(id, tokens, n, opts);
}

template <class S>
bool Manager::can_allocate_as(const int64_t* tokens, size_t n, const SeqOptions& opts, size_t* num_cached) {
  Plan p;
  plan(S{}, tokens, n, opts, false, p);
  *num_cached = static_cast<size_t>(p.hits) * bs_;
  return device_.pool.num_free() >= p.needed + watermark_blocks_;
}

template <class S>
size_t Manager::allocate_as(int64_t id, const int64_t* tokens, size_t n, const SeqOptions& opts) {
  Plan p;
  plan(S{}, tokens, n, opts, true, p);
  if (device_.pool.num_free() < p.needed + watermark_blocks_) {
    char over[32] = "";
    if (grouped()) std::snprintf(over, sizeof over, " over %u groups", groups_.count);
    fail(Code::out_of_blocks, "seq %" PRId64 ": needs %" PRIu64 " free block%s%s (+%u watermark), %u %s free", id,
         p.needed, plural_s(p.needed), over, watermark_blocks_, device_.pool.num_free(), is_are(device_.pool.num_free()));
  }
  Sequence& s = new_seq(id);
  try {
    reserve(S{}, s, opts, p);
    s.set_extra_keys(opts.extra_key_blocks, opts.extra_keys, opts.num_extra_keys);
  } catch (const std::bad_alloc&) {
    drop_seq(s);
    fail_seq_tables(id, groups_.count, p.num_blocks, opts.num_extra_keys);
  } catch (...) {
    drop_seq(s);
    throw;
  }
  // From here on nothing allocates.
  const size_t cached = take(S{}, s, tokens, n, opts, p);
  counters_.query_tokens += n;
  counters_.hit_tokens += cached;
  counters_.host_hit_tokens += static_cast<uint64_t>(p.host_hits) * bs_;
  return cached;
}

// ---- FullAttention: the one full-attention group -------------------------------------------------

void Manager::plan(FullAttention, const int64_t* tokens, size_t n, const SeqOptions& opts, bool keep, Plan& out) {
  out = Plan{};
  out.num_blocks = blocks_for(n, bs_);
  out.chain = first_link_of(opts, 0);
  if (keep) scratch_.hits.clear();
  uint32_t free_hits = 0;  // device hits on blocks in the free queue: they count as needed
  // Never the last block: at least one token is always computed, so the model has logits to sample.
  ExtraKeyCursor extras(opts);
  uint32_t i = 0;
  for (; i + 1 < out.num_blocks; ++i) {
    const int64_t* blk = tokens + static_cast<size_t>(i) * bs_;
    const ExtraKey extra = extras.at(i);
    if (!is_cacheable(blk, bs_, extra)) break;
    const Key128 key = keys_.hasher.key(out.chain, blk, bs_, extra);
    // The hash is not trusted alone: the stored tokens and extra key must equal the prompt's.
    auto same = [&](const BlockMeta& m, const int64_t* stored) {
      return std::memcmp(stored, blk, bs_ * sizeof(int64_t)) == 0 && m.has_extra == extra.present &&
             (!extra.present || m.extra == extra.value);
    };
    if (cfg_.host_cache) host_.index.prefetch(key);  // its slot loads while the device level is probed
    int32_t b = device_.index.find(key);  // the device level first
    if (b >= 0 && same(device_.pool.meta(b), device_.pool.tokens(b))) {
      ++out.hits;
      if (device_.pool.meta(b).ref == 0) ++free_hits;
      if (keep) scratch_.hits.push_back(b);
      out.chain = link_to(key, device_.pool.meta(b));
      continue;
    }
    int32_t h = cfg_.host_cache ? host_.index.find(key) : -1;  // then the host level
    if (h < 0 || !same(host_.pool.meta(h), host_.pool.tokens(h))) break;
    ++out.hits;
    ++out.host_hits;
    if (keep) scratch_.hits.push_back(-2 - h);  // host hits are stored as -2 - h
    out.chain = link_to(key, host_.pool.meta(h));
  }
  if (store_.on) {  // the third level: one batched lookup of the blocks after the miss
    out.store_hits = store_lookup(tokens, i, out.num_blocks, out.chain, opts, out.host_hits);
    out.hits += out.store_hits;
  }
  out.needed = static_cast<uint64_t>(out.num_blocks - out.hits) + out.host_hits + free_hits + out.store_hits;
}

void Manager::reserve(FullAttention, Sequence& s, const SeqOptions& opts, const Plan& p) {
  GroupTable& t = s.groups[0];
  t.table.reserve(p.num_blocks);
  reserve_window_link(t, opts.window);
  if (p.store_hits) {
    store_.gets.reserve(store_.gets.size() + p.store_hits);
    scratch_.store_hosts.resize(p.store_hits);
  }
}

size_t Manager::take(FullAttention, Sequence& s, const int64_t* tokens, size_t n, const SeqOptions& opts, const Plan& p) {
  GroupTable& t = s.groups[0];
  const ChainLink first = first_link_of(opts, 0);
  // Device hits are taken and host hits pinned before any block is taken from the free queue: its
  // evictions (and their offloads) must not touch them.
  for (int32_t b : scratch_.hits) {
    if (b >= 0) acquire_cached(b);
    else pin_host(-2 - b);
  }
  // Store hits' staging host blocks next, while the lookup's count of takeable host blocks still holds
  // (the device evictions below offload into host blocks too).
  for (uint32_t j = 0; j < p.store_hits; ++j) scratch_.store_hosts[j] = take_store_staging();
  for (int32_t b : scratch_.hits) {
    if (b < 0) {  // counts as cached: the load runs before the step
      // Its parent: the block before it (held, or loaded, by now), whose link is read only here, not
      // after every device hit.
      const ChainLink parent = t.table.empty() ? first : link_after(device_.pool.meta(t.table.back()));
      b = load_from_host(-2 - b, parent);
    }
    t.table.push_back(b);
  }
  // Sized once, then filled: push_back's capacity check and out-of-line call cost a quarter of the
  // bookkeeping of a missed block. (Nothing here throws; were it to, the slots not yet filled hold -1,
  // which every walk over a table skips.)
  const size_t first_new = t.table.size();
  t.table.resize(p.num_blocks, -1);
  take_free_blocks(t.table.data() + first_new, p.num_blocks - first_new);
  size_t cached = static_cast<size_t>(p.hits) * bs_;
  // Store hits count as cached but are hashed (and indexed) only once their gets end good.
  const uint32_t hashed = p.hits - p.store_hits;
  const size_t written = static_cast<size_t>(hashed) * bs_;
  write_tokens(t, written, tokens + written, n - written);
  s.num_tokens = n;
  s.num_computed = s.num_cached = cached;
  t.num_hashed = hashed;
  t.first_link = first;
  t.chain = p.chain;
  t.window = opts.window;
  t.sink = opts.sink;
  t.window_next = blocks_for(opts.sink, bs_);
  apply_window(s, t);
  if (p.store_hits) store_start_gets(s, hashed, p.store_hits);
  return cached;
}

void Manager::write_tokens(GroupTable& t, uint64_t from, const int64_t* tokens, size_t n) {
  // One division for the whole write (not two per block), and a whole 16-token block copied with a size
  // the compiler knows (inline moves, not a memcpy call), as is a decode step's one token: a prompt's copy
  // is a fifth of a miss's bookkeeping.
  const int32_t* table = t.table.data();  // read once: the copies below may not change it
  size_t i = static_cast<size_t>(from / bs_);
  uint32_t off = static_cast<uint32_t>(from % bs_);
  while (n > 0) {
    const size_t take = std::min<size_t>(n, bs_ - off);
    int64_t* dst = device_.pool.tokens(table[i]) + off;
    if (take == 16) std::memcpy(dst, tokens, 16 * sizeof(int64_t));
    else if (take == 1) *dst = *tokens;  // a decode step's token
    else std::memcpy(dst, tokens, take * sizeof(int64_t));
    tokens += take;
    n -= take;
    off = 0;
    ++i;
  }
}

}  // namespace kvb
