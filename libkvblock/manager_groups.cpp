// The Grouped block strategy (manager.h), for a manager with KV cache groups (kvb_config.groups): the
// prefix lookup whose hit is valid for every group, allocation with one block table per group, and the
// order in which a freed sequence's blocks of every group reach the free queue. Every other operation
// loops over the group tables of a sequence (Sequence::groups) in its own file. A manager without
// groups runs the FullAttention strategy (manager_allocate.cpp, manager_seqs.cpp): its per-sequence
// windows and the store tier live there.
#include <algorithm>
#include <cinttypes>
#include <cstring>

#include "error.h"
#include "manager.h"

namespace kvb {

bool Manager::group_takes(uint32_t g, uint32_t k, uint32_t i) const {
  const GroupSpec& spec = cfg_.groups[g];
  if (!spec.window) return true;
  const uint64_t p = static_cast<uint64_t>(k) * bs_;  // the first uncached token
  const uint32_t a = std::min(window_first_block(spec.window_tokens, p), k - 1);
  return i >= a || i < blocks_for(spec.sink_tokens, bs_);
}

void Manager::plan(Grouped, const int64_t* tokens, size_t n, const SeqOptions& opts, bool keep, Plan& out) {
  if (opts.window || opts.sink)
    fail(Code::invalid_argument, "window_tokens %u / sink_tokens %u in the sequence options: with KV cache groups "
         "each group's window comes from its kvb_group_spec", opts.window, opts.sink);
  const uint32_t G = groups_.count;
  out = Plan{};
  out.num_blocks = blocks_for(n, bs_);
  const uint32_t M = out.num_blocks - 1;  // never the last block (see the FullAttention plan)
  scratch_.group_hits.clear();
  scratch_.group_links.clear();
  ChainLink link[kMaxKvCacheGroups];       // each group's chain before block i
  uint32_t last_miss1[kMaxKvCacheGroups];  // 1 + the last block group g missed, 0 if none
  uint32_t missed[kMaxKvCacheGroups], num_missed = 0;  // the window groups that missed a block so far
  uint32_t left[kMaxKvCacheGroups];        // hits group g can still make: its blocks on both levels less its hits
  bool exhausted = false;                  // no candidate past the current block can be valid
  // Window groups, and the run of hits their window needs once it is full: ceil((window - 1) / bs), at
  // least 1 (a candidate k needs blocks k - min(k, run) .. k - 1 in the group).
  uint32_t windows[kMaxKvCacheGroups], run[kMaxKvCacheGroups], num_windows = 0;
  for (uint32_t g = 0; g < G; ++g) {
    link[g] = first_link_of(opts, g);
    last_miss1[g] = 0;
    left[g] = groups_.cached[g];
    exhausted |= left[g] == 0;
    if (cfg_.groups[g].window) {
      windows[num_windows++] = g;
      run[g] = std::max<uint32_t>(1, blocks_for(cfg_.groups[g].window_tokens - 1, bs_));
    }
  }
  // Every group's chain, computed from the tokens, block after block; candidate k = i + 1 is checked
  // once block i is known in every group (kvblock.h's rule): every full group hit blocks 0 .. k-1, and
  // every window group hit the blocks the first uncached token (p = k * block_size) needs: its window
  // and the block of p - 1 (last_miss < a), and its sink blocks. The walk stops where no candidate can
  // be valid any more: at a full group's first miss (every longer candidate needs that block), at a
  // miss among a window group's sink blocks (every longer candidate needs it too), once a group has
  // hit every block it has cached (every candidate k needs block k - 1 in every group; a block is hit
  // at most once), and once a window group's hits since its last miss and the blocks it has left
  // cannot make the run its window needs (any later candidate's run ends past block i). So a prompt
  // longer than what the cache holds is not walked to its end.
  ExtraKeyCursor extras(opts);
  uint32_t k = 0;
  for (uint32_t i = 0; i < M && !exhausted; ++i) {
    const int64_t* blk = tokens + static_cast<size_t>(i) * bs_;
    const ExtraKey extra = extras.at(i);
    if (!is_cacheable(blk, bs_, extra)) break;
    bool no_longer = false;  // no candidate past i can be valid
    for (uint32_t g = 0; g < G; ++g) {
      ChainLink next;
      next.kind = ChainLink::parent;
      keys_.hasher.hash_and_key(link[g], blk, bs_, extra, &next.hash, &next.key);
      // The stored tokens and extra key must equal the prompt's, on either level (see the FullAttention plan).
      auto same = [&](const BlockPool& pool, int32_t x) {
        return std::memcmp(pool.tokens(x), blk, bs_ * sizeof(int64_t)) == 0 && pool.meta(x).has_extra == extra.present &&
               (!extra.present || pool.meta(x).extra == extra.value);
      };
      int32_t b = device_.index.find(next.key);  // the device level first, then the host level (stored as -2 - h)
      bool hit = b >= 0 && same(device_.pool, b);
      if (!hit && cfg_.host_cache) {
        const int32_t h = host_.index.find(next.key);
        hit = h >= 0 && same(host_.pool, h);
        b = -2 - h;
      }
      if (hit) {
        uint32_t before = kLinkOfPrevious;
        if (i == 0 || last_miss1[g] == i) {  // block i - 1 missed: keep the computed link
          before = static_cast<uint32_t>(scratch_.group_links.size());
          scratch_.group_links.push_back(link[g]);
        }
        scratch_.group_hits.push_back(GroupHit{i, g, b, before});
        exhausted |= --left[g] == 0;
      } else {
        if (last_miss1[g] == 0) missed[num_missed++] = g;
        last_miss1[g] = i + 1;
        const GroupSpec& spec = cfg_.groups[g];
        if (!spec.window || i < blocks_for(spec.sink_tokens, bs_)) no_longer = true;
      }
      link[g] = next;
    }
    if (no_longer) break;
    // Candidate i + 1: full groups have no miss yet, nor window groups among their sinks; a window group
    // that never missed has every block its window needs.
    const uint32_t c = i + 1;
    bool ok = true;
    for (uint32_t j = 0; j < num_missed && ok; ++j) {
      const uint32_t g = missed[j];
      const uint32_t a = std::min(window_first_block(cfg_.groups[g].window_tokens, static_cast<uint64_t>(c) * bs_), c - 1);
      ok = last_miss1[g] <= a;
    }
    if (ok) k = c;
    for (uint32_t j = 0; j < num_windows && !exhausted; ++j) {
      const uint32_t g = windows[j];
      exhausted = (i + 1 - last_miss1[g]) + static_cast<uint64_t>(left[g]) < std::min(i + 2, run[g]);
    }
  }
  out.hits = k;
  // New blocks, free device hits, and host hits (each loads into a free device block); a hit token is a
  // host hit when any group loads its block (entries come in prompt order).
  uint64_t needed = static_cast<uint64_t>(G) * (out.num_blocks - k);
  uint32_t host_index = UINT32_MAX;
  for (const GroupHit& e : scratch_.group_hits) {
    if (e.index >= k || !group_takes(e.group, k, e.index)) continue;
    if (e.block < 0 || device_.pool.meta(e.block).ref == 0) ++needed;
    if (e.block < -1 && e.index != host_index) {
      host_index = e.index;
      ++out.host_hits;
    }
  }
  out.needed = needed;
  if (keep) sort_group_hits();  // may allocate: before allocate_as creates the sequence
}

// Stable: each group's hits stay in prompt order.
void Manager::sort_group_hits() {
  uint32_t* first = scratch_.group_first;
  const uint32_t G = groups_.count;
  uint32_t count[kMaxKvCacheGroups] = {};
  for (const GroupHit& e : scratch_.group_hits) ++count[e.group];
  first[0] = 0;
  for (uint32_t g = 0; g < G; ++g) first[g + 1] = first[g] + count[g];
  scratch_.group_hits_by_group.resize(scratch_.group_hits.size());
  uint32_t at[kMaxKvCacheGroups];
  for (uint32_t g = 0; g < G; ++g) at[g] = first[g];
  for (const GroupHit& e : scratch_.group_hits) scratch_.group_hits_by_group[at[e.group]++] = e;
}

void Manager::reserve(Grouped, Sequence& s, const SeqOptions&, const Plan& p) {
  for (uint32_t g = 0; g < groups_.count; ++g) {
    GroupTable& t = s.groups[g];
    t.table.reserve(p.num_blocks);
    reserve_window_link(t, cfg_.groups[g].window_tokens);
  }
}

size_t Manager::take(Grouped, Sequence& s, const int64_t* tokens, size_t n, const SeqOptions& opts, const Plan& p) {
  const uint32_t* first = scratch_.group_first;
  const uint32_t G = groups_.count, k = p.hits;
  // Every group's device hits are taken and host hits pinned before any block leaves the free queue: its
  // evictions (and their offloads) must not touch them.
  // A window group's blocks not taken are followed by its window: the link before the window's first
  // block is kept (released_links), read now, while the hit before it (if any) still holds its content.
  const GroupHit* hits = scratch_.group_hits_by_group.data();
  ChainLink window_link[kMaxKvCacheGroups];
  for (uint32_t g = 0; g < G; ++g)
    for (uint32_t j = first[g]; j < first[g + 1]; ++j) {
      const GroupHit& e = hits[j];
      if (e.index >= k || !group_takes(g, k, e.index)) continue;
      if (e.index > 0 && !group_takes(g, k, e.index - 1))
        window_link[g] = e.link != kLinkOfPrevious ? scratch_.group_links[e.link] : link_after(hit_meta(hits[j - 1].block));
      if (e.block >= 0) acquire_cached(e.block);
      else pin_host(-2 - e.block);
    }
  const size_t cached = static_cast<size_t>(k) * bs_;
  s.num_tokens = n;
  s.num_computed = s.num_cached = cached;
  for (uint32_t g = 0; g < G; ++g) {
    GroupTable& gs = s.groups[g];
    const GroupSpec& spec = cfg_.groups[g];
    // The group's hit for block i (every block it takes is a hit, since k is valid for every group).
    uint32_t j = first[g];
    auto hit_at = [&](uint32_t i) -> const GroupHit& {
      while (j + 1 < first[g + 1] && hits[j].index < i) ++j;
      return hits[j];
    };
    bool took = false;  // block i - 1 was taken
    for (uint32_t i = 0; i < k; ++i) {
      const bool take = group_takes(g, k, i);
      int32_t b = -1;
      if (take) {
        const GroupHit& e = hit_at(i);
        b = e.block;
        if (b < -1) {  // counts as cached: the load runs before the step
          // The link before block i: kept by the lookup, or after block i - 1 (held, or loaded, by now).
          const ChainLink before = e.link != kLinkOfPrevious ? scratch_.group_links[e.link]
                                   : took                    ? link_after(device_.pool.meta(gs.table[i - 1]))
                                                             : window_link[g];
          b = load_from_host(-2 - b, before);
        }
      }
      gs.table.push_back(b);
      // A block not taken, followed by one taken: keep its link (as apply_window does for a release).
      if (!take && group_takes(g, k, i + 1)) gs.released_links.emplace_back(i, window_link[g]);
      took = take;
    }
    while (gs.table.size() < p.num_blocks) gs.table.push_back(take_free_block());
    write_tokens(gs, cached, tokens + cached, n - cached);
    gs.num_hashed = k;
    gs.first_link = first_link_of(opts, g);
    gs.chain = k ? link_after(device_.pool.meta(gs.table[k - 1])) : gs.first_link;  // block k - 1 is taken: held
    gs.window = spec.window ? spec.window_tokens : 0;
    gs.sink = spec.window ? spec.sink_tokens : 0;
    gs.window_next = blocks_for(gs.sink, bs_);
    apply_window(s, gs);  // before the next group takes its blocks: the order blocks reach the free queue
  }
  return cached;
}

// Eviction order with groups (docs/ARCHITECTURE.md). A prefix hit needs every group, but a window group releases
// the blocks before its window while the sequence runs, and the full group its blocks only when the
// sequence ends. Put at the tail of the one free queue when released, the window's blocks were evicted
// long before the full group's blocks of the same prompt, and a later prompt sharing a prefix longer
// than the window (a system prompt) found it in the full group and missed in the window group. (vLLM's
// sliding-window manager frees into its one free queue the same way; SGLang's SWA radix cache keeps
// the window part in its own LRU list, timed by the use of the prefix it belongs to.) Here, one pool:
//  - a cached block the window releases is parked for its sequence (BlockPool, groups_.parked_for): still
//    free, but taken only when the free queue proper is empty, after everything that finished
//    sequences left cached. With every layer full attention it would still be held;
//  - freeing the sequence puts the blocks parked for it back in the free queue with its other blocks,
//    by block index, last first, every group at each index, so that pressure shortens the cached prefix
//    from its end in every group at once and every shorter prefix stays valid for every group.
// Measured (timed replay, docs/perf/manager.md "KV cache groups: eviction order"): on a trace of prompts that
// share system prompts, at 2,500 blocks, hits 30.0% before, 41.7% with this (all-full 50.1%, queueing
// 5x longer). Weaker variants measured on the way: requeueing at free without parking 32.0%; parking
// without groups_.parked_for (any sequence that had released a block requeued it at its end, even when a
// running sequence had parked it again since) 39.5%; also parking the window group's prefix hits not
// taken at allocation, 38.6% (those keep their place: only a prompt diverging before this one's hit
// point needs them). O(blocks of the sequence) and no allocation here: released_blocks has room for
// one entry per block (reserve_window_link).
void Manager::free_blocks(Grouped, Sequence& s) {
  const uint32_t G = groups_.count;
  size_t left[kMaxKvCacheGroups];  // per group: released_blocks entries not yet visited (from the end)
  const int32_t* tables[kMaxKvCacheGroups];  // read once (releasing a block changes no table)
  for (uint32_t g = 0; g < G; ++g) {
    left[g] = s.groups[g].released_blocks.size();
    tables[g] = s.groups[g].table.data();
  }
  for (size_t i = s.num_blocks(); i-- > 0;) {  // every group's table has the same length
    for (uint32_t g = 0; g < G; ++g) {
      const int32_t b = tables[g][i];
      if (b >= 0) release_block(b);
      else if (left[g] > 0 && s.groups[g].released_blocks[left[g] - 1].index == i)
        requeue_released(s.groups[g].released_blocks[--left[g]], s.id);
    }
  }
}

void Manager::requeue_released(const GroupTable::ReleasedBlock& r, int64_t id) {
  const BlockMeta& m = device_.pool.meta(r.block);
  if (!m.in_free || !m.indexed || m.key != r.key) return;  // taken since, or holding other content
  // Another sequence hit the block and its window parked it again: that sequence still runs.
  if (m.in_free == 2 && groups_.parked_for[r.block] != id) return;
  device_.pool.unlink(r.block);
  device_.pool.push_tail(r.block);
}

}  // namespace kvb
