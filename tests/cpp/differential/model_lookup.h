// Differential test of the block manager, the model (model.h): the prefix lookup of allocate and
// can_allocate, and the hit valid for every KV cache group as kvblock.h states it. Without groups there
// is one full group, whose rule is that of docs/ARCHITECTURE.md, "Sequences": the longest cached
// prefix, stopping at the first miss.
// With the host cache a block is cached on the device (looked up first) or on the host level.
#pragma once

#include "model.h"

namespace {

bool Model::same(const MBlock& m, const int64_t* bt, bool hx, uint64_t xv) const {
  return m.toks.size() == bs && std::equal(m.toks.begin(), m.toks.end(), bt) && m.has_extra == hx &&
         (!hx || m.extra == xv);
}

// Does group g need its block i (< k) for a hit of k blocks? A full group needs every block. A window
// group needs what the first uncached token, at p = k * bs, still attends: the blocks holding positions
// p + 1 - window_tokens .. p - 1, the block of position p - 1, and the blocks holding the first
// sink_tokens tokens.
bool Model::group_needs(size_t g, size_t k, size_t i) const {
  if (!window_group(g)) return true;
  const MGroupSpec& sp = groups[g];
  const size_t p = k * bs;
  if (i == (p - 1) / bs) return true;
  if (i * bs < sp.sink_tokens) return true;
  const size_t lo = p + 1 > sp.window_tokens ? p + 1 - sp.window_tokens : 0;  // window: positions lo .. p-1
  return lo < p && (i + 1) * bs > lo;  // block i holds positions i*bs .. (i+1)*bs - 1, all below p
}

// Is a hit of k blocks valid for every group: has each group cached every block it needs?
bool Model::hit_valid(const Lookup& r, size_t k) const {
  for (size_t g = 0; g < num_groups(); ++g)
    for (size_t i = 0; i < k; ++i)
      if (group_needs(g, k, i) && r.found[g][i] == -1) return false;
  return true;
}

Model::Lookup Model::lookup(const std::vector<int64_t>& t, const Opts& o) const {
  const size_t G = num_groups();
  Lookup r;
  r.nb = nblocks(t.size());
  r.found.assign(G, {});
  r.keys.assign(G, {});
  bool hp = o.has_salt;
  uint64_t parent = o.salt;
  std::vector<uint64_t> pkey(G, o.salt);
  int kind = o.has_salt ? 2 : 0;
  // Candidates: the blocks of the cacheable prefix, never the last block. Every group's chain is
  // computed from the tokens, so a window group can find blocks after one it has lost.
  for (size_t i = 0; i + 1 < r.nb; ++i) {
    const int64_t* bt = &t[i * bs];
    bool hx = false;
    uint64_t xv = 0;
    for (size_t k = 0; k < o.ek_blocks.size(); ++k)
      if (o.ek_blocks[k] == i) hx = true, xv = o.ek_vals[k];
    if (!cacheable(bt, hx)) break;
    const uint64_t h = model_hash(hp, parent, bt, bs, hx, xv);
    r.hashes.push_back(h);
    for (size_t g = 0; g < G; ++g) {
      const uint64_t key = model_key(static_cast<uint32_t>(g), kind, pkey[g], bt, bs, hx, xv);
      int32_t at = -1;
      auto it = index.find(key);
      if (it != index.end() && same(blk[it->second], bt, hx, xv)) {  // the device level first
        at = it->second;
      } else if (host_cache) {  // then the host level
        auto hi = host_index.find(key);
        if (hi != host_index.end() && same(host[hi->second], bt, hx, xv)) at = -2 - hi->second;
      }
      r.found[g].push_back(at);
      r.keys[g].push_back(key);
      pkey[g] = key;
    }
    hp = true;
    parent = h;
    kind = 1;
  }
  // The hit: the largest k valid for every group.
  r.k = r.hashes.size();
  while (r.k > 0 && !hit_valid(r, r.k)) --r.k;
  r.needed = G * (r.nb - r.k);
  for (size_t i = 0; i < r.k; ++i) {
    bool any_load = false;
    for (size_t g = 0; g < G; ++g) {
      if (!group_needs(g, r.k, i)) continue;
      const int32_t at = r.found[g][i];
      any_load = any_load || at <= -2;
      if (at <= -2 || blk[at].ref == 0) ++r.needed;  // a load takes a free block; a free hit leaves the queue
    }
    r.host_hits += any_load;
  }
  r.store_hits = store_lookup(r, o);  // new blocks in `needed`, filled by gets
  return r;
}

}  // namespace
