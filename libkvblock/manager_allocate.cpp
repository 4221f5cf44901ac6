// Allocation (docs/ARCHITECTURE.md, "Sequences"): a new sequence's options, its prefix lookup through the
// device index, the host cache and the store, can_allocate and allocate. (With KV cache groups, allocate
// hands over to manager_groups.cpp.)
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
      if (device_.pool.meta(b).ref == 0) ++out.free_hits;
      if (hits_out) hits_out->push_back(b);
      out.chain = link_to(key, device_.pool.meta(b));
      continue;
    }
    int32_t h = cfg_.host_cache ? host_.index.find(key) : -1;  // then the host level
    if (h < 0 || !same(host_.pool.meta(h), host_.pool.tokens(h))) break;
    ++out.hits;
    ++out.host_hits;
    if (hits_out) hits_out->push_back(-2 - h);  // host hits are stored as -2 - h
    out.chain = link_to(key, host_.pool.meta(h));
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
    return device_.pool.num_free() >= gl.needed + watermark_blocks_;
  }
  Lookup lk;
  lookup(tokens, n, first_link_of(opts, 0), opts, nullptr, lk);
  *num_cached = static_cast<size_t>(lk.hits) * bs_;
  uint64_t needed = static_cast<uint64_t>(lk.num_blocks - lk.hits) + lk.host_hits + lk.free_hits + lk.store_hits;
  return device_.pool.num_free() >= needed + watermark_blocks_;
}

size_t Manager::allocate(int64_t id, const int64_t* tokens, size_t n, const SeqOptions& opts) {
  if (n == 0) fail(Code::invalid_argument, "seq %" PRId64 ": prompt has 0 tokens", id);
  if (n > static_cast<size_t>(kMaxBlocks) * bs_)
    fail(Code::invalid_argument, "seq %" PRId64 ": prompt of %zu tokens is longer than any pool", id, n);
  validate_options(opts, n);
  if (find_seq(id)) fail(Code::sequence_exists, "sequence id %" PRId64 " already exists", id);
  if (!cfg_.groups.empty()) return allocate_groups(id, tokens, n, opts);

  ChainLink first = first_link_of(opts, 0);
  scratch_.hits.clear();
  Lookup lk;
  lookup(tokens, n, first, opts, &scratch_.hits, lk);
  uint64_t needed = static_cast<uint64_t>(lk.num_blocks - lk.hits) + lk.host_hits + lk.free_hits + lk.store_hits;
  if (device_.pool.num_free() < needed + watermark_blocks_)
    fail(Code::out_of_blocks, "seq %" PRId64 ": needs %" PRIu64 " free block%s (+%u watermark), %u %s free", id, needed,
         plural_s(needed), watermark_blocks_, device_.pool.num_free(), is_are(device_.pool.num_free()));

  Sequence& s = new_seq(id);
  GroupTable& t = s.groups[0];  // the one full group
  try {
    t.table.reserve(lk.num_blocks);
    reserve_window_link(t, opts.window);
    s.set_extra_keys(opts.extra_key_blocks, opts.extra_keys, opts.num_extra_keys);
    if (lk.store_hits) {
      store_.gets.reserve(store_.gets.size() + lk.store_hits);
      scratch_.store_hosts.resize(lk.store_hits);
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
  for (int32_t b : scratch_.hits) {
    if (b >= 0) acquire_cached(b);
    else pin_host(-2 - b);
  }
  // Store hits' staging host blocks next, while lookup's count of takeable host blocks still holds (the
  // device evictions below offload into host blocks too).
  for (uint32_t j = 0; j < lk.store_hits; ++j) scratch_.store_hosts[j] = take_store_staging();
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
  t.table.resize(lk.num_blocks, -1);
  take_free_blocks(t.table.data() + first_new, lk.num_blocks - first_new);
  size_t cached = static_cast<size_t>(lk.hits) * bs_;
  // Store hits count as cached but are hashed (and indexed) only once their gets end good.
  const uint32_t hashed = lk.hits - lk.store_hits;
  const size_t written = static_cast<size_t>(hashed) * bs_;
  write_tokens(t, written, tokens + written, n - written);
  s.num_tokens = n;
  s.num_computed = s.num_cached = cached;
  t.num_hashed = hashed;
  t.first_link = first;
  t.chain = lk.chain;
  t.window = opts.window;
  t.sink = opts.sink;
  t.window_next = blocks_for(opts.sink, bs_);
  counters_.query_tokens += n;
  counters_.hit_tokens += cached;
  counters_.host_hit_tokens += static_cast<uint64_t>(lk.host_hits) * bs_;
  apply_window(s, t);
  if (lk.store_hits) store_start_gets(s, hashed, lk.store_hits);
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
