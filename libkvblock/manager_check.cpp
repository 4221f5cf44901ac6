// kvb_check_invariants: recomputes every derived quantity from scratch and compares. O(N + tokens);
// meant for tests and debugging, never called by the library itself.
#include <cinttypes>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "error.h"
#include "manager.h"

namespace kvb {

#define KVB_INVARIANT(cond, ...) \
  do {                           \
    if (!(cond)) fail(Code::internal, "invariant violated: " __VA_ARGS__); \
  } while (0)

namespace {

// Events speak of the set of public hashes a tier's index holds: per group (the same public hash in two
// groups is two stored hashes; events carry the group), the hashes of its n indexed blocks and their
// multiplicities must be exactly its event counts. where / hash / blocks word the message for the tier.
void check_event_counts(const Tier& tier, uint32_t n, const char* where, const char* hash, const char* blocks) {
  std::map<std::pair<uint32_t, uint64_t>, uint32_t> counts;
  for (uint32_t b = 0; b < n; ++b)
    if (tier.pool.meta(static_cast<int32_t>(b)).indexed)
      ++counts[{tier.group_of(static_cast<int32_t>(b)), tier.pool.meta(static_cast<int32_t>(b)).hash}];
  const HashCounts& hc = *tier.hashes;
  KVB_INVARIANT(counts.size() == hc.size(), "%zu (group, public hash) pairs %s, event counts hold %zu", counts.size(),
                where, hc.size());
  for (const auto& c : counts)
    KVB_INVARIANT(hc.count(c.first.first, c.first.second) == c.second, "group %u %s %016" PRIx64 ": %u %s, counted %u",
                  c.first.first, hash, c.first.second, c.second, blocks, hc.count(c.first.first, c.first.second));
}

}  // namespace

void Manager::check_invariants() const {
  const uint32_t N = device_.pool.num_blocks();

  // Free queue: a well-linked list whose members are exactly the blocks with ref 0.
  uint32_t walked = 0;
  int32_t prev = -1;
  for (int32_t b = device_.pool.free_head(); b >= 0; b = device_.pool.meta(b).next) {
    KVB_INVARIANT(b < static_cast<int32_t>(N), "free queue holds block id %d", b);
    KVB_INVARIANT(walked < N, "free queue has a cycle");
    const BlockMeta& m = device_.pool.meta(b);
    KVB_INVARIANT(m.in_free == 1, "block %d is linked in the free queue but marked %d", b, m.in_free);
    KVB_INVARIANT(m.ref == 0, "free block %d has ref count %d", b, m.ref);
    KVB_INVARIANT(m.prev == prev, "block %d: prev link %d, expected %d", b, m.prev, prev);
    prev = b;
    ++walked;
  }
  KVB_INVARIANT(prev == device_.pool.free_tail(), "free queue tail is %d, walk ended at %d", device_.pool.free_tail(), prev);
  // The parked queue (groups only): cached blocks that a live sequence's window group let go of.
  uint32_t parked = 0;
  prev = -1;
  for (int32_t b = device_.pool.parked_head(); b >= 0; b = device_.pool.meta(b).next) {
    KVB_INVARIANT(b < static_cast<int32_t>(N) && parked < N, "parked queue holds block id %d or has a cycle", b);
    const BlockMeta& m = device_.pool.meta(b);
    KVB_INVARIANT(m.in_free == 2 && m.ref == 0 && m.indexed && m.prev == prev,
                  "parked block %d: in_free %d, ref %d, indexed %d, prev link %d (expected %d)", b, m.in_free, m.ref,
                  m.indexed, m.prev, prev);
    prev = b;
    ++parked;
  }
  KVB_INVARIANT(prev == device_.pool.parked_tail() && parked == device_.pool.num_parked() && (parked == 0 || grouped()),
                "parked queue: tail %d, walk ended at %d, %u blocks walked, count says %u", device_.pool.parked_tail(), prev,
                parked, device_.pool.num_parked());
  walked += parked;
  KVB_INVARIANT(walked == device_.pool.num_free(), "free queue walk found %u blocks, count says %u", walked, device_.pool.num_free());
  if (parked > 0) {  // each parked block is parked for a live sequence that released it with that content
    std::vector<uint8_t> owned(N, 0);
    for (const Sequence& s0 : seqs_.pool)
      for (uint32_t g = 0; s0.live && g < groups_.count; ++g)
        for (const GroupTable::ReleasedBlock& r : s0.groups[g].released_blocks)
          if (r.block >= 0 && static_cast<uint32_t>(r.block) < N && device_.pool.meta(r.block).key == r.key &&
              groups_.parked_for[r.block] == s0.id)
            owned[r.block] = 1;
    for (int32_t b = device_.pool.parked_head(); b >= 0; b = device_.pool.meta(b).next)
      KVB_INVARIANT(owned[b], "parked block %d is parked for seq %" PRId64 ", which does not name it", b, groups_.parked_for[b]);
  }

  // Reference counts equal the number of sequence tables holding each block.
  std::vector<int32_t> refs(N, 0);
  std::vector<uint8_t> host_held(cfg_.num_host_blocks, 0);
  size_t live = 0;
  for (const Sequence& s0 : seqs_.pool) {
    if (!s0.live) continue;
    ++live;
    KVB_INVARIANT(find_seq_const(s0.id) == &s0, "seq %" PRId64 " is not reachable through the sequence table", s0.id);
    KVB_INVARIANT(s0.groups.size() == groups_.count, "seq %" PRId64 " has %zu groups, the manager %u", s0.id,
                  s0.groups.size(), groups_.count);
   for (uint32_t g = 0; g < groups_.count; ++g) {
    const GroupTable& s = s0.groups[g];
    KVB_INVARIANT(s.group == g, "seq %" PRId64 " group %u: its table says group %u", s0.id, g, s.group);
    if (grouped()) {
      const GroupSpec& spec = cfg_.groups[g];
      KVB_INVARIANT(s.window == (spec.window ? spec.window_tokens : 0) && s.sink == (spec.window ? spec.sink_tokens : 0),
                    "seq %" PRId64 " group %u: window %u/%u differs from its group spec", s0.id, g, s.window, s.sink);
      KVB_INVARIANT(s.first_link.key.hi == g,
                    "seq %" PRId64 " group %u: first link is not keyed by its group", s0.id, g);
    }
    KVB_INVARIANT(s0.num_computed <= s0.num_tokens, "seq %" PRId64 ": computed %" PRIu64 " > tokens %" PRIu64, s0.id,
                  s0.num_computed, s0.num_tokens);
    KVB_INVARIANT(s0.num_tokens >= 1, "seq %" PRId64 " has no tokens", s0.id);
    KVB_INVARIANT(s.table.size() == blocks_for(s0.num_tokens, bs_), "seq %" PRId64 ": %zu table entries for %" PRIu64
                  " tokens", s0.id, s.table.size(), s0.num_tokens);
    // A sequence filling from the store hashes its store blocks when its last get ends.
    KVB_INVARIANT(s.num_hashed == s0.num_computed / bs_ || (s0.store_filling && s.num_hashed < s0.num_computed / bs_),
                  "seq %" PRId64 ": %u blocks hashed, %" PRIu64
                  " full computed blocks", s0.id, s.num_hashed, s0.num_computed / bs_);
    // A swapped-out sequence (every group of it) holds host blocks in host_table instead, with the same
    // released slots and the same content: the chain check below reads whichever table holds the blocks.
    const BlockPool& pool = s0.swapped ? host_.pool : device_.pool;
    const std::vector<int32_t>& table = s0.swapped ? s.host_table : s.table;
    if (s0.swapped) {
      KVB_INVARIANT(s.host_table.size() == s.table.size(), "swapped seq %" PRId64 ": host table size", s0.id);
      for (size_t i = 0; i < s.table.size(); ++i) {
        KVB_INVARIANT(s.table[i] == -1, "swapped seq %" PRId64 " still names device block %d", s0.id, s.table[i]);
        int32_t h = s.host_table[i];
        if (h < 0) continue;
        KVB_INVARIANT(static_cast<uint32_t>(h) < cfg_.num_host_blocks && !host_held[h],
                      "host block %d is out of range or held twice", h);
        host_held[h] = 1;
      }
    } else {
      KVB_INVARIANT(s.host_table.empty(), "seq %" PRId64 " on device has a host table", s0.id);
    }
    KVB_INVARIANT(table.back() >= 0, "seq %" PRId64 ": last block released", s0.id);
    for (size_t i = 0; i < s.released_links.size(); ++i) {
      uint32_t k = s.released_links[i].first;
      KVB_INVARIANT(k + 1 < table.size() && table[k] < 0 && (i == 0 || s.released_links[i - 1].first < k),
                    "seq %" PRId64 ": released link of block %u names a held, missing or unordered block", s0.id, k);
    }
    KVB_INVARIANT(s.released_blocks.empty() || (grouped() && s.window),
                  "seq %" PRId64 " group %u: released blocks remembered outside a window group", s0.id, g);
    for (size_t i = 0; i < s.released_blocks.size(); ++i) {
      const GroupTable::ReleasedBlock& r = s.released_blocks[i];
      KVB_INVARIANT(r.index < s.table.size() && s.table[r.index] < 0 && r.block >= 0 &&
                    static_cast<uint32_t>(r.block) < N && (i == 0 || s.released_blocks[i - 1].index < r.index),
                    "seq %" PRId64 " group %u: released block entry %zu (index %u, block %d) names a held, missing or "
                    "unordered block", s0.id, g, i, r.index, r.block);
    }
    // Each hashed block still held must carry the hash its chain position implies.
    ChainLink chain = s.first_link;
    bool chain_known = true;
    for (size_t i = 0; i < table.size(); ++i) {
      int32_t b = table[i];
      if (b < 0) {
        // Released by a sliding window, which may have been switched off or resized since; never the last
        // block (checked above).
        KVB_INVARIANT(i + 1 < table.size(), "seq %" PRId64 ": block %zu released", s0.id, i);
        chain_known = false;
        continue;
      }
      if (!s0.swapped) {
        KVB_INVARIANT(b < static_cast<int32_t>(N), "seq %" PRId64 " holds block id %d", s0.id, b);
        ++refs[b];
      }
      if (i >= s.num_hashed || (s.uncacheable_from != kNoBlockIndex && i >= s.uncacheable_from)) continue;
      const BlockMeta& m = pool.meta(b);
      KVB_INVARIANT(m.has_hash, "seq %" PRId64 ": committed full block %zu (%s block %d) has no hash", s0.id, i,
                    s0.swapped ? "host" : "device", b);
      if (chain_known) {
        ExtraKey extra = s0.extra_key(static_cast<uint32_t>(i));
        uint64_t h;
        Key128 k;
        keys_.hasher.hash_and_key(chain, pool.tokens(b), bs_, extra, &h, &k);
        KVB_INVARIANT(h == m.hash && k == m.key, "seq %" PRId64 " group %u: block %zu (%s block %d) hash does not match "
                      "its chain", s0.id, g, i, s0.swapped ? "host" : "device", b);
      }
      if (!device_.group.empty() && !s0.swapped)
        KVB_INVARIANT(!m.indexed || device_.group[b] == g, "seq %" PRId64 " group %u holds block %d of group %u", s0.id, g,
                      b, device_.group[b]);
      chain = link_after(m);
      chain_known = true;
    }
    if (s.uncacheable_from == kNoBlockIndex && chain_known)
      KVB_INVARIANT(s.chain.kind == chain.kind && s.chain.hash == chain.hash && s.chain.key == chain.key,
                    "seq %" PRId64 ": stored chain link differs from its last hashed block", s0.id);
   }
  }
  KVB_INVARIANT(live == seqs_.live, "%zu live sequences, counter says %zu", live, seqs_.live);
  KVB_INVARIANT(seqs_.table.size() == seqs_.live, "sequence table has %zu entries for %zu sequences",
                seqs_.table.size(), seqs_.live);

  std::vector<uint8_t> is_dst(N, 0);
  for (const BlockPair& p : pending_.copies) {
    KVB_INVARIANT(p.first >= 0 && p.first < static_cast<int32_t>(N) && p.second >= 0 &&
                      p.second < static_cast<int32_t>(N),
                  "pending copy (%d, %d) out of range", p.first, p.second);
    KVB_INVARIANT(!is_dst[p.second], "block %d is the destination of two pending copies", p.second);
    is_dst[p.second] = 1;
    ++refs[p.first];  // a pending copy holds its source
  }
  for (const BlockPair& p : pending_.loads) {
    KVB_INVARIANT(p.second >= 0 && p.second < static_cast<int32_t>(N), "pending load into block %d", p.second);
    ++refs[p.second];  // a pending load holds its destination
  }
  for (const BlockPair& p : pending_.copies)
    KVB_INVARIANT(!is_dst[p.first], "pending copy from block %d, itself waiting for a copy", p.first);
  check_tree_invariants(refs);  // pending token trees, and the blocks their slot copies hold

  uint64_t cached_free = 0;
  size_t indexed = 0;
  for (uint32_t b = 0; b < N; ++b) {
    const BlockMeta& m = device_.pool.meta(static_cast<int32_t>(b));
    KVB_INVARIANT(m.ref == refs[b], "block %u has ref count %d, sequences and pending copies hold %d", b, m.ref,
                  refs[b]);
    KVB_INVARIANT((m.ref == 0) == (m.in_free != 0), "block %u: ref %d but in_free %d", b, m.ref, m.in_free);
    if (m.indexed) {
      KVB_INVARIANT(m.has_hash, "block %u is indexed without a hash", b);
      KVB_INVARIANT(device_.index.find(m.key) == static_cast<int32_t>(b), "indexed block %u is not found under its key", b);
      ++indexed;
      if (m.in_free) ++cached_free;
    }
  }
  if (events_.enabled()) check_event_counts(device_, N, "in the index", "hash", "indexed blocks");
  KVB_INVARIANT(indexed == device_.index.size(), "%zu blocks marked indexed, index holds %zu", indexed, device_.index.size());
  if (grouped()) {  // what bounds the groups lookup's walk
    std::vector<uint32_t> per_group(groups_.count, 0);
    for (uint32_t b = 0; b < N; ++b)
      if (device_.pool.meta(static_cast<int32_t>(b)).indexed) ++per_group[device_.group_of(static_cast<int32_t>(b))];
    for (uint32_t h = 0; h < host_.pool.num_blocks(); ++h)
      if (host_.pool.meta(static_cast<int32_t>(h)).indexed) ++per_group[host_.group_of(static_cast<int32_t>(h))];
    for (uint32_t g = 0; g < groups_.count; ++g)
      KVB_INVARIANT(per_group[g] == groups_.cached[g], "group %u: %u blocks indexed on both levels, counter says %u", g,
                    per_group[g], groups_.cached[g]);
  }
  KVB_INVARIANT(cached_free == counters_.cached_free, "%" PRIu64 " cached-free blocks, counter says %" PRIu64, cached_free,
                counters_.cached_free);
  for (size_t pos = 0; pos < device_.index.capacity(); ++pos) {
    const IndexSlot& s = device_.index.slot(pos);
    if (s.block < 0) continue;
    KVB_INVARIANT(device_.pool.meta(s.block).indexed, "index slot %zu names block %d, which is not marked indexed", pos,
                  s.block);
    KVB_INVARIANT(device_.index.locate(device_.pool.meta(s.block).key) == static_cast<long>(pos),
                  "index slot %zu is unreachable from its key", pos);
  }

  check_host_invariants(host_held);

  for (const BlockPair& p : pending_.copies)
    KVB_INVARIANT(device_.pool.meta(p.second).ref > 0, "pending copy into free block %d", p.second);
}

// Every host block is exactly one of: empty, cached (in the queue and the host index), held (by one
// swapped-out sequence, or pinned by its pending loads). Cached ones are in the host pool's queue (LRU of
// unique blocks) or, with a device twin, in the twin list.
void Manager::check_host_invariants(const std::vector<uint8_t>& swap_held) const {
  const uint32_t H = cfg_.num_host_blocks;
  std::vector<uint8_t> seen(H, 0);
  for (int32_t h : host_blocks_.empty) {
    KVB_INVARIANT(h >= 0 && static_cast<uint32_t>(h) < H && !seen[h] && !swap_held[h], "host block %d: empty twice, "
                  "out of range or held", h);
    const BlockMeta& m = host_.pool.meta(h);
    KVB_INVARIANT(m.ref == 0 && !m.in_free && !m.indexed && host_blocks_.twin[h] < 0, "empty host block %d is in use", h);
    seen[h] = 1;
  }
  // The LRU of unique cached blocks (the host pool's queue), then the twin list.
  for (int list = 0; list < 2; ++list) {
    uint32_t walked = 0;
    int32_t prev = -1;
    for (int32_t h = list == 0 ? host_.pool.free_head() : host_blocks_.twins.head; h >= 0; h = host_.pool.meta(h).next) {
      KVB_INVARIANT(static_cast<uint32_t>(h) < H && !seen[h] && walked < H, "host list %d: block %d repeated", list, h);
      const BlockMeta& m = host_.pool.meta(h);
      KVB_INVARIANT(m.in_free == list + 1 && m.ref == 0 && m.indexed && m.has_hash && m.prev == prev,
                    "cached host block %d: bad state or links", h);
      KVB_INVARIANT((host_blocks_.twin[h] >= 0) == (list == 1), "host block %d is in the wrong list for its twin %d", h,
                    host_blocks_.twin[h]);
      seen[h] = 1;
      prev = h;
      ++walked;
    }
    KVB_INVARIANT(prev == (list == 0 ? host_.pool.free_tail() : host_blocks_.twins.tail) &&
                      walked == (list == 0 ? host_.pool.num_free() : host_blocks_.twins.size),
                  "host list %d: tail or count", list);
  }
  std::vector<int32_t> pins(H, 0);
  const bool staging = !store_.staging.empty();
  for (const BlockPair& p : pending_.loads) {
    KVB_INVARIANT(p.first >= 0 && static_cast<uint32_t>(p.first) < H, "pending load from host block %d", p.first);
    ++pins[p.first];
    KVB_INVARIANT(host_.pool.meta(p.first).indexed || (staging && store_.staging[p.first] == 2),
                  "pending load %d -> %d: source neither cached nor filled from the store", p.first, p.second);
    if (staging && store_.staging[p.first] == 2)
      KVB_INVARIANT(pins[p.first] == 1, "host block %d filled from the store is loaded twice", p.first);
  }
  if (staging) {  // the store's gets hold their staging blocks
    std::vector<int32_t> gets(H, 0);
    check_store_invariants(gets);
    for (uint32_t h = 0; h < H; ++h) pins[h] += gets[h];
  }
  size_t held = 0, indexed = 0;
  for (uint32_t h = 0; h < H; ++h) {
    const BlockMeta& m = host_.pool.meta(static_cast<int32_t>(h));
    held += swap_held[h];
    if (!seen[h])
      KVB_INVARIANT(m.ref > 0 && m.ref == swap_held[h] + pins[h] && !(swap_held[h] && (pins[h] || m.indexed)),
                    "host block %u: ref %d, swapped %d, pinned %d", h, m.ref, swap_held[h], pins[h]);
    if (m.indexed) {
      ++indexed;
      KVB_INVARIANT(host_.index.find(m.key) == static_cast<int32_t>(h), "cached host block %u not found by key", h);
    }
    int32_t d = host_blocks_.twin[h];
    if (d >= 0)
      KVB_INVARIANT(m.indexed && d < static_cast<int32_t>(device_.pool.num_blocks()) && device_.pool.meta(d).indexed &&
                        device_.pool.meta(d).key == m.key,
                    "host block %u: twin %d does not hold its key", h, d);
  }
  KVB_INVARIANT(held == host_blocks_.held, "%zu host blocks held by swapped sequences, counter says %zu", held, host_blocks_.held);
  KVB_INVARIANT(indexed == host_.index.size(), "%zu host blocks cached, host index holds %zu", indexed,
                host_.index.size());
  for (uint32_t b = 0; b < device_.pool.num_blocks() && cfg_.host_cache; ++b) {
    const BlockMeta& m = device_.pool.meta(static_cast<int32_t>(b));
    if (!m.indexed) continue;
    int32_t h = host_.index.find(m.key);
    KVB_INVARIANT(h < 0 || host_blocks_.twin[h] == static_cast<int32_t>(b), "device block %u: host copy %d does not name it",
                  b, h);
    // Keys carry the group, so a block and its host copy belong to one group.
    KVB_INVARIANT(h < 0 || host_.group_of(h) == device_.group_of(static_cast<int32_t>(b)),
                  "device block %u of group %u: host copy %d is of group %u", b, device_.group_of(static_cast<int32_t>(b)), h,
                  host_.group_of(h));
  }
  std::vector<uint8_t> dst(H, 0);
  for (const BlockPair& p : pending_.offloads) {
    KVB_INVARIANT(p.second >= 0 && static_cast<uint32_t>(p.second) < H && !dst[p.second] &&
                      host_.pool.meta(p.second).indexed,
                  "pending offload into host block %d: repeated or not cached", p.second);
    dst[p.second] = 1;
  }
  if (events_.enabled() && cfg_.host_cache) check_event_counts(host_, H, "on the host", "host hash", "blocks");
}

}  // namespace kvb
