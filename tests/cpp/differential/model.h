// Differential test of the block manager: the model. A deliberately plain re-statement of DESIGN §4 and
// §6 (std::list free queue with O(N) removal, std::map index, per-sequence token vectors, xxh64 over
// the documented byte layout) that the library is compared against after every step.
//
// A new feature (a host cache tier, KV cache groups, ...) extends the model here: its state as members
// of Model (and MSeq / MBlock), its operations as Model methods that return the kvb_status the library
// must return and change nothing on failure. Then add the operation to operations.h and what it
// makes observable to compare.h.
#pragma once

#include <xxhash.h>

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
#include "util.h"

namespace {

void put_u64(std::vector<unsigned char>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<unsigned char>(v >> (8 * i)));
}

// DESIGN §4: xxh64 (seed 0) over [parent hash or salt, u64 LE] + tokens (i64 LE) + [extra key, u64 LE].
uint64_t model_hash(bool has_parent, uint64_t parent, const int64_t* toks, size_t n, bool has_extra, uint64_t extra) {
  std::vector<unsigned char> bytes;
  if (has_parent) put_u64(bytes, parent);
  for (size_t i = 0; i < n; ++i) put_u64(bytes, static_cast<uint64_t>(toks[i]));
  if (has_extra) put_u64(bytes, extra);
  return XXH64(bytes.data(), bytes.size(), 0);
}

// Index key, in both index modes: a hash over an unambiguous layout (kind byte, the parent's *key*,
// tokens, extra-present byte, extra), so that equal keys mean equal whole histories: "salt 1 + tokens
// [0,2]", "parent 1 + tokens [0,2]" and "tokens [1,0] + extra key 2" hash the same public xxh64 bytes but
// are different keys, and so are their children. The model uses its own hash of that layout.
uint64_t model_key(bool keyed, uint64_t pub, int kind, uint64_t parent_key, const int64_t* toks, size_t n, bool hx,
                   uint64_t xv) {
  (void)keyed;
  (void)pub;
  std::vector<unsigned char> bytes;
  bytes.push_back(static_cast<unsigned char>(kind));
  put_u64(bytes, parent_key);
  for (size_t i = 0; i < n; ++i) put_u64(bytes, static_cast<uint64_t>(toks[i]));
  bytes.push_back(hx);
  put_u64(bytes, xv);
  return XXH64(bytes.data(), bytes.size(), 0x5eed);
}

struct MBlock {
  int ref = 0;
  bool has_hash = false;  // holds a committed full block (kvb_block_hash answers)
  uint64_t hash = 0;
  uint64_t key = 0;           // index key (= hash unless keyed)
  std::vector<int64_t> toks;  // the block's tokens when it was hashed
  bool has_extra = false;
  uint64_t extra = 0;
  int parent_kind = 0;        // as events report it (kvb_parent_kind), set when indexed
  uint64_t parent_hash = 0;
};

// An event as kvb_drain_events reports it (tokens only for STORED).
struct MEvent {
  uint32_t type = 0, parent_kind = 0, medium = 0, has_extra = 0;
  uint64_t hash = 0, parent_hash = 0, extra = 0;
  int32_t block = -1;
  std::vector<int64_t> toks;
};

struct MSeq {
  std::vector<int64_t> tokens;
  std::vector<int32_t> table;       // device blocks, -1 = released by the window (all -1 while swapped)
  std::vector<int32_t> host_table;  // while swapped: host block per block index, -1 = none
  bool swapped = false;
  size_t computed = 0, cached = 0;
  size_t hashed = 0;                // blocks considered for the index (= computed / block_size)
  long unc = -1;                    // first block that broke the chain (non-cacheable), -1 = none
  bool has_salt = false;
  uint64_t salt = 0;
  std::map<uint32_t, uint64_t> extra;
  std::vector<uint64_t> hashes;     // chain hashes of blocks [0, hashed) up to the first uncacheable one
  std::vector<uint64_t> keys;       // their index keys
  uint32_t window = 0, sink = 0;
};

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
  std::set<int64_t> nc;
  std::vector<MBlock> blk;
  std::list<int32_t> freeq;  // front = head
  std::map<uint64_t, int32_t> index;
  std::map<int64_t, MSeq> seqs;
  std::vector<MBlock> host;  // content descriptions of host blocks
  // Host blocks that hold nothing, a stack (back is taken next; block 0 first at start).
  std::vector<int32_t> host_free;
  // Host cache level (kvblock.h "Host cache"): cached host blocks are in host_index and, unless pinned
  // by pending loads (host[h].ref > 0), in host_lru (least recently used first) or, when the device
  // index holds the same key (twin[h] = that device block), in host_twins (oldest first).
  std::map<uint64_t, int32_t> host_index;
  std::list<int32_t> host_lru, host_twins;
  std::vector<int32_t> twin;
  std::vector<std::pair<int32_t, int32_t>> offloads, loads;  // pending (device, host) / (host, device)
  uint64_t host_hit = 0, offloaded = 0, loaded = 0, host_evictions = 0;
  // Events: public hashes per medium (STORED at 0 -> 1, REMOVED at 1 -> 0) and the undrained events.
  std::map<uint64_t, int> hash_count[2];
  std::vector<MEvent> events;
  std::vector<std::pair<int32_t, int32_t>> pending;  // copy-on-write (src, dst)
  uint64_t query = 0, hit = 0, computed = 0, evictions = 0, cow = 0, sw_out = 0, sw_in = 0;
  uint64_t window_released = 0;

  void init(uint32_t block_size, uint32_t num_blocks, uint32_t num_host, float watermark,
            const std::vector<int64_t>& non_cacheable, bool keyed_index, bool host_cache_level = false,
            uint32_t twin_percent = 1) {
    keyed = keyed_index;
    host_cache = host_cache_level;
    twin_budget = static_cast<uint32_t>(static_cast<uint64_t>(num_host) * twin_percent / 100);
    bs = block_size;
    N = num_blocks;
    H = num_host;
    wm = static_cast<uint32_t>(std::floor(static_cast<double>(watermark) * num_blocks));
    nc.insert(non_cacheable.begin(), non_cacheable.end());
    blk.assign(N, MBlock{});
    for (uint32_t b = 0; b < N; ++b) freeq.push_back(static_cast<int32_t>(b));
    host.assign(H, MBlock{});
    for (uint32_t h = H; h-- > 0;) host_free.push_back(static_cast<int32_t>(h));
    twin.assign(H, -1);
  }

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
  size_t cached_free() const {
    size_t n = 0;
    for (int32_t b : freeq) n += indexed(b);
    return n;
  }
  bool cacheable(const int64_t* t, bool has_extra) const {
    if (has_extra) return true;
    for (uint32_t i = 0; i < bs; ++i)
      if (nc.count(t[i])) return false;
    return true;
  }

  // ---- events ----
  void stored(int medium, const MBlock& m, int32_t b) {
    if (++hash_count[medium][m.hash] != 1) return;
    MEvent e;
    e.type = KVB_EVENT_BLOCK_STORED;
    e.medium = static_cast<uint32_t>(medium);
    e.hash = m.hash;
    e.parent_kind = static_cast<uint32_t>(m.parent_kind);
    e.parent_hash = m.parent_hash;
    e.has_extra = m.has_extra;
    e.extra = m.has_extra ? m.extra : 0;
    e.block = b;
    e.toks = m.toks;
    events.push_back(e);
  }
  void removed(int medium, const MBlock& m, int32_t b) {
    if (--hash_count[medium][m.hash] != 0) return;
    hash_count[medium].erase(m.hash);
    MEvent e;
    e.type = KVB_EVENT_BLOCK_REMOVED;
    e.medium = static_cast<uint32_t>(medium);
    e.hash = m.hash;
    e.block = b;
    events.push_back(e);
  }

  // ---- the device index (with the host level's twin bookkeeping and events) ----
  // Enters committed block b (its hash, key, tokens and parent set); replaces an older entry.
  void index_put(int32_t b) {
    auto it = index.find(blk[b].key);
    int32_t old = it == index.end() ? -1 : it->second;
    if (old == b) return;
    index[blk[b].key] = b;
    if (host_cache) {
      auto h = host_index.find(blk[b].key);
      if (h != host_index.end()) twin_enter(b, h->second);
    }
    stored(0, blk[b], b);
    if (old >= 0) removed(0, blk[old], old);
  }
  void index_erase(int32_t b) {  // b is indexed
    index.erase(blk[b].key);
    if (host_cache) {
      auto h = host_index.find(blk[b].key);
      if (h != host_index.end() && twin[h->second] == b) twin_leave(h->second);
    }
    removed(0, blk[b], b);
  }

  // ---- the host level ----
  bool host_queued(int32_t h) const { return host[h].ref == 0; }  // cached and not pinned
  void host_unqueue(int32_t h) {
    if (twin[h] >= 0) host_twins.remove(h);
    else host_lru.remove(h);
  }
  void host_enqueue(int32_t h) {
    if (twin[h] >= 0) host_twins.push_back(h);
    else host_lru.push_back(h);
  }
  void twin_enter(int32_t b, int32_t h) {
    bool q = host_queued(h);
    if (q) host_unqueue(h);
    twin[h] = b;
    if (q) host_enqueue(h);  // to the newest end of the twin list
  }
  void twin_leave(int32_t h) {
    bool q = host_queued(h);
    if (q) host_unqueue(h);
    twin[h] = -1;
    if (q) host_enqueue(h);  // the only copy now, most recently used
  }
  // An empty host block, else evict a cached one (twins first when over budget or no unique one is
  // left; the newest twin); -1 when every host block is held or pinned.
  int32_t take_host() {
    if (!host_free.empty()) {
      int32_t h = host_free.back();
      host_free.pop_back();
      return h;
    }
    int32_t h;
    if (!host_twins.empty() && (host_twins.size() > twin_budget || host_lru.empty())) {
      h = host_twins.back();
      host_twins.pop_back();
    } else if (!host_lru.empty()) {
      h = host_lru.front();
      host_lru.pop_front();
    } else {
      return -1;
    }
    host_index.erase(host[h].key);
    ++host_evictions;
    removed(1, host[h], h);
    host[h] = MBlock{};
    twin[h] = -1;
    for (size_t i = 0; i < offloads.size(); ++i)  // its pending offload would overwrite the new content
      if (offloads[i].second == h) {
        offloads.erase(offloads.begin() + static_cast<long>(i));
        --offloaded;
        break;
      }
    return h;
  }
  // Write-back of an evicted device block (before its content is dropped).
  void offload(int32_t b) {
    if (host_index.count(blk[b].key)) return;  // already on the host level
    int32_t h = take_host();
    if (h < 0) return;
    host[h] = blk[b];
    host[h].ref = 0;
    host_index[host[h].key] = h;
    host_enqueue(h);
    offloads.emplace_back(b, h);
    ++offloaded;
    stored(1, host[h], h);
  }
  size_t host_available() const { return host_free.size() + host_lru.size() + host_twins.size(); }
  // Drained transfers: pinned host sources become evictable, load destinations are released.
  void release_host_transfers() {
    offloads.clear();
    std::vector<std::pair<int32_t, int32_t>> taken;
    taken.swap(loads);
    for (const auto& p : taken) {
      if (--host[p.first].ref == 0) host_enqueue(p.first);
      release(p.second);
    }
  }

  int32_t take_free() {  // queue head; a cached block there is evicted
    int32_t b = freeq.front();
    freeq.pop_front();
    if (indexed(b)) {
      index_erase(b);
      ++evictions;
      if (host_cache) offload(b);
    }
    blk[b] = MBlock{};
    blk[b].ref = 1;
    return b;
  }
  void acquire(int32_t b) {
    if (blk[b].ref == 0) freeq.remove(b);
    ++blk[b].ref;
  }
  // Sequences holding b: its ref count less the pending copies that read it.
  int holders(int32_t b) const {
    int n = blk[b].ref;
    for (const auto& p : pending) n -= p.first == b;
    return n;
  }
  void release(int32_t b) {
    if (--blk[b].ref > 0) return;
    freeq.push_back(b);
    // A copy into a block nobody holds any more is dropped, with the reference it held on its source.
    for (size_t i = 0; i < pending.size(); ++i) {
      if (pending[i].second != b) continue;
      int32_t src = pending[i].first;
      pending.erase(pending.begin() + static_cast<long>(i));
      release(src);
      break;
    }
  }
  void forget(int32_t b) {
    if (indexed(b)) index_erase(b);
    blk[b].has_hash = false;
    blk[b].has_extra = false;
  }

  struct Lookup {
    size_t nb = 0;
    std::vector<int32_t> hits;
    std::vector<uint64_t> hashes, keys;
    size_t free_hits = 0, host_hits = 0;  // a host hit is stored in hits as -2 - h
  };
  bool same(const MBlock& m, const int64_t* bt, bool hx, uint64_t xv) const {
    return m.toks.size() == bs && std::equal(m.toks.begin(), m.toks.end(), bt) && m.has_extra == hx &&
           (!hx || m.extra == xv);
  }
  Lookup lookup(const std::vector<int64_t>& t, const Opts& o) const {
    Lookup r;
    r.nb = nblocks(t.size());
    bool hp = o.has_salt;
    uint64_t parent = o.salt, pkey = o.salt;
    int kind = o.has_salt ? 2 : 0;
    for (size_t i = 0; i + 1 < r.nb; ++i) {  // never the last block
      const int64_t* bt = &t[i * bs];
      bool hx = false;
      uint64_t xv = 0;
      for (size_t k = 0; k < o.ek_blocks.size(); ++k)
        if (o.ek_blocks[k] == i) hx = true, xv = o.ek_vals[k];
      if (!cacheable(bt, hx)) break;
      uint64_t h = model_hash(hp, parent, bt, bs, hx, xv);
      uint64_t key = model_key(keyed, h, kind, pkey, bt, bs, hx, xv);
      auto it = index.find(key);
      if (it != index.end() && same(blk[it->second], bt, hx, xv)) {  // the device level first
        r.hits.push_back(it->second);
        if (blk[it->second].ref == 0) ++r.free_hits;
      } else {  // then the host level
        auto hi = host_cache ? host_index.find(key) : host_index.end();
        if (hi == host_index.end() || !same(host[hi->second], bt, hx, xv)) break;
        r.hits.push_back(-2 - hi->second);
        ++r.host_hits;
      }
      r.hashes.push_back(h);
      r.keys.push_back(key);
      hp = true;
      parent = h;
      pkey = key;
      kind = 1;
    }
    return r;
  }

  static bool opts_valid(const Opts& o) {
    for (size_t i = 1; i < o.ek_blocks.size(); ++i)
      if (o.ek_blocks[i] <= o.ek_blocks[i - 1]) return false;
    return !(o.window == 0 && o.sink != 0);
  }

  kvb_status can_allocate(const std::vector<int64_t>& t, const Opts& o, size_t* cached) const {
    if (t.empty() || !opts_valid(o)) return KVB_ERR_INVALID_ARGUMENT;
    Lookup lk = lookup(t, o);
    *cached = lk.hits.size() * bs;
    size_t needed = lk.nb - lk.hits.size() + lk.free_hits + lk.host_hits;
    return freeq.size() >= needed + wm ? KVB_OK : KVB_ERR_OUT_OF_BLOCKS;
  }

  kvb_status allocate(int64_t id, const std::vector<int64_t>& t, const Opts& o, size_t* cached) {
    if (t.empty() || !opts_valid(o)) return KVB_ERR_INVALID_ARGUMENT;
    if (find(id)) return KVB_ERR_SEQUENCE_EXISTS;
    Lookup lk = lookup(t, o);
    size_t needed = lk.nb - lk.hits.size() + lk.free_hits + lk.host_hits;
    if (freeq.size() < needed + wm) return KVB_ERR_OUT_OF_BLOCKS;
    MSeq& s = seqs[id];
    // Device hits are taken and host hits pinned before any block leaves the free queue.
    for (int32_t b : lk.hits) {
      if (b >= 0) {
        acquire(b);
      } else {
        int32_t h = -2 - b;
        if (host_queued(h)) host_unqueue(h);
        ++host[h].ref;
      }
    }
    for (size_t i = 0; i < lk.hits.size(); ++i) {
      int32_t b = lk.hits[i];
      if (b < 0) {  // a load from the host: a free device block, held by the load until drained
        int32_t h = -2 - b;
        b = take_free();
        blk[b] = host[h];
        blk[b].ref = 2;
        blk[b].parent_kind = i > 0 ? KVB_PARENT_BLOCK : o.has_salt ? KVB_PARENT_SALT : KVB_PARENT_NONE;
        blk[b].parent_hash = i > 0 ? lk.hashes[i - 1] : o.has_salt ? o.salt : 0;
        loads.emplace_back(h, b);
        ++loaded;
        index_put(b);
      }
      s.table.push_back(b);
    }
    while (s.table.size() < lk.nb) s.table.push_back(take_free());
    s.tokens = t;
    s.computed = s.cached = s.hashed = lk.hits.size() * bs;
    s.hashed = lk.hits.size();
    s.hashes = lk.hashes;
    s.keys = lk.keys;
    s.has_salt = o.has_salt;
    s.salt = o.salt;
    for (size_t k = 0; k < o.ek_blocks.size(); ++k) s.extra[o.ek_blocks[k]] = o.ek_vals[k];
    s.window = o.window;
    s.sink = o.sink;
    query += t.size();
    hit += s.cached;
    host_hit += lk.host_hits * bs;
    *cached = s.cached;
    apply_window(s);
    return KVB_OK;
  }

  // Sliding window with sinks: every held block wholly before the window of the first query still to
  // come (position `computed`: [computed + 1 - window, computed]) and past the first `sink` tokens is
  // released (ascending order), except the block of the last computed token.
  void apply_window(MSeq& s) {
    if (s.window == 0 || s.computed == 0) return;
    size_t before = s.computed + 1 > s.window ? s.computed + 1 - s.window : 0;
    size_t end = std::min(before / bs, (s.computed - 1) / bs);
    for (size_t i = (s.sink + bs - 1) / bs; i < end; ++i)
      if (s.table[i] >= 0) {
        release(s.table[i]);
        s.table[i] = -1;
        ++window_released;
      }
  }

  kvb_status commit(int64_t id, size_t n) {
    MSeq* s = find(id);
    if (!s) return KVB_ERR_NO_SUCH_SEQUENCE;
    if (s->swapped) return KVB_ERR_BAD_STATE;
    if (n > s->tokens.size() - s->computed) return KVB_ERR_INVALID_ARGUMENT;
    s->computed += n;
    computed += n;
    size_t end = s->computed / bs;
    if (s->hashed < end && s->unc < 0) {
      for (size_t i = s->hashed; i < end; ++i) {
        const int64_t* bt = &s->tokens[i * bs];
        auto e = s->extra.find(static_cast<uint32_t>(i));
        bool hx = e != s->extra.end();
        uint64_t xv = hx ? e->second : 0;
        if (!cacheable(bt, hx)) {
          s->unc = static_cast<long>(i);
          break;
        }
        if (s->hashes.size() != i) throw Divergence("model: chain bookkeeping broken");
        bool hp = i > 0 || s->has_salt;
        uint64_t parent = i > 0 ? s->hashes[i - 1] : s->salt;
        uint64_t h = model_hash(hp, parent, bt, bs, hx, xv);
        uint64_t key = model_key(keyed, h, i > 0 ? 1 : (s->has_salt ? 2 : 0), i > 0 ? s->keys[i - 1] : s->salt, bt,
                                 bs, hx, xv);
        int32_t b = s->table[i];
        MBlock& m = blk[b];
        m.has_hash = true;
        m.hash = h;
        m.key = key;
        m.toks.assign(bt, bt + bs);
        m.has_extra = hx;
        m.extra = xv;
        m.parent_kind = i > 0 ? KVB_PARENT_BLOCK : s->has_salt ? KVB_PARENT_SALT : KVB_PARENT_NONE;
        m.parent_hash = i > 0 ? s->hashes[i - 1] : s->has_salt ? s->salt : 0;
        index_put(b);  // overwrites an older entry for the same hash
        s->hashes.push_back(h);
        s->keys.push_back(key);
      }
    }
    s->hashed = std::max(s->hashed, end);
    apply_window(*s);
    return KVB_OK;
  }

  size_t append_needed(const MSeq& s, size_t n) const {
    if (n == 0) return 0;
    size_t L = s.tokens.size();
    size_t need = nblocks(L + n) - s.table.size();
    if (L % bs != 0 && holders(s.table.back()) > 1) ++need;  // copy-on-write of a shared partial block
    return need;
  }
  kvb_status can_append(int64_t id, size_t n) {
    MSeq* s = find(id);
    if (!s) return KVB_ERR_NO_SUCH_SEQUENCE;
    if (s->swapped) return KVB_ERR_BAD_STATE;
    return freeq.size() >= append_needed(*s, n) ? KVB_OK : KVB_ERR_OUT_OF_BLOCKS;
  }
  kvb_status append(int64_t id, const std::vector<int64_t>& t) {
    MSeq* s = find(id);
    if (!s) return KVB_ERR_NO_SUCH_SEQUENCE;
    if (s->swapped) return KVB_ERR_BAD_STATE;
    if (t.empty()) return KVB_OK;
    if (freeq.size() < append_needed(*s, t.size())) return KVB_ERR_OUT_OF_BLOCKS;
    size_t L = s->tokens.size();
    if (L % bs != 0) {
      int32_t last = s->table.back();
      if (holders(last) > 1) {
        int32_t dst = take_free();
        // The sequence's reference on last moves to the pending copy; a copy from a block that is
        // itself waiting for a copy is taken from that copy's source instead.
        int32_t from = last;
        for (const auto& p : pending)
          if (p.second == last) from = p.first;
        if (from != last) {
          ++blk[from].ref;
          release(last);
        }
        pending.emplace_back(from, dst);
        ++cow;
        s->table.back() = dst;
      } else if (blk[last].has_hash) {
        // The block still held a committed full block (rolled back while shared): it is overwritten now.
        forget(last);
      }
    }
    size_t total = nblocks(L + t.size());
    while (s->table.size() < total) s->table.push_back(take_free());
    s->tokens.insert(s->tokens.end(), t.begin(), t.end());
    apply_window(*s);
    return KVB_OK;
  }

  kvb_status free_seq(int64_t id) {
    MSeq* s = find(id);
    if (!s) return KVB_ERR_NO_SUCH_SEQUENCE;
    if (s->swapped) {
      release_swapped(*s);
    } else {
      for (size_t i = s->table.size(); i-- > 0;)
        if (s->table[i] >= 0) release(s->table[i]);
    }
    seqs.erase(id);
    return KVB_OK;
  }

  kvb_status fork(int64_t pid, int64_t cid, size_t pos, bool at) {
    MSeq* p = find(pid);
    if (!p) return KVB_ERR_NO_SUCH_SEQUENCE;
    if (!at) pos = p->tokens.size();
    if (p->swapped) return KVB_ERR_BAD_STATE;
    if (pid == cid || find(cid)) return KVB_ERR_SEQUENCE_EXISTS;
    if (pos == 0 || pos > p->tokens.size()) return KVB_ERR_INVALID_ARGUMENT;
    if (pos > p->computed) return KVB_ERR_BAD_STATE;
    size_t nb = nblocks(pos);
    if (p->table[nb - 1] < 0) return KVB_ERR_BAD_STATE;
    size_t hashed = std::min(p->hashed, pos / bs);
    MSeq c;
    c.tokens.assign(p->tokens.begin(), p->tokens.begin() + static_cast<long>(pos));
    c.table.assign(p->table.begin(), p->table.begin() + static_cast<long>(nb));
    for (int32_t b : c.table)
      if (b >= 0) acquire(b);
    c.computed = pos;
    c.cached = std::min(p->cached, pos);
    c.hashed = hashed;
    c.unc = (p->unc >= 0 && static_cast<size_t>(p->unc) < hashed) ? p->unc : -1;
    c.hashes.assign(p->hashes.begin(), p->hashes.begin() + static_cast<long>(std::min(hashed, p->hashes.size())));
    c.keys.assign(p->keys.begin(), p->keys.begin() + static_cast<long>(std::min(hashed, p->keys.size())));
    c.has_salt = p->has_salt;
    c.salt = p->salt;
    c.extra = p->extra;
    c.window = p->window;
    c.sink = p->sink;
    MSeq& cs = seqs[cid] = c;
    apply_window(cs);
    return KVB_OK;
  }

  kvb_status rollback(int64_t id, size_t n) {
    MSeq* s = find(id);
    if (!s) return KVB_ERR_NO_SUCH_SEQUENCE;
    if (s->swapped) return KVB_ERR_BAD_STATE;
    if (n == 0) return KVB_OK;
    if (n >= s->tokens.size()) return KVB_ERR_INVALID_ARGUMENT;
    size_t len = s->tokens.size() - n;
    size_t nb = nblocks(len);
    if (s->table[nb - 1] < 0) return KVB_ERR_BAD_STATE;
    size_t hashed = std::min(s->hashed, len / bs);
    for (size_t i = s->table.size(); i-- > nb;)
      if (s->table[i] >= 0) release(s->table[i]);
    s->table.resize(nb);
    if (len % bs != 0) {
      int32_t last = s->table.back();
      if (blk[last].has_hash && holders(last) == 1) forget(last);  // stops being full, unless shared
    }
    s->tokens.resize(len);
    s->computed = std::min(s->computed, len);
    s->cached = std::min(s->cached, len);
    s->hashed = hashed;
    if (s->unc >= 0 && static_cast<size_t>(s->unc) >= hashed) s->unc = -1;
    if (s->hashes.size() > hashed) s->hashes.resize(hashed);
    if (s->keys.size() > hashed) s->keys.resize(hashed);
    return KVB_OK;
  }

  kvb_status set_window(int64_t id, uint32_t w, uint32_t sk) {
    MSeq* s = find(id);
    if (!s) return KVB_ERR_NO_SUCH_SEQUENCE;
    if (s->swapped) return KVB_ERR_BAD_STATE;
    if (w == 0 && sk != 0) return KVB_ERR_INVALID_ARGUMENT;
    s->window = w;
    s->sink = sk;
    apply_window(*s);
    return KVB_OK;
  }

  kvb_status set_extra_key(int64_t id, uint32_t bi, uint64_t key) {
    MSeq* s = find(id);
    if (!s) return KVB_ERR_NO_SUCH_SEQUENCE;
    if (bi < s->hashed) return KVB_ERR_BAD_STATE;
    s->extra[bi] = key;
    return KVB_OK;
  }

  static size_t held(const std::vector<int32_t>& t) {
    size_t n = 0;
    for (int32_t b : t) n += b >= 0;
    return n;
  }

  void release_swapped(MSeq& s) {
    for (size_t i = s.host_table.size(); i-- > 0;)
      if (s.host_table[i] >= 0) {
        host[s.host_table[i]] = MBlock{};
        host_free.push_back(s.host_table[i]);
      }
  }

  kvb_status can_swap_out(int64_t id, kvb_availability* a) {
    MSeq* s = find(id);
    if (!s) return KVB_ERR_NO_SUCH_SEQUENCE;
    if (s->swapped) return KVB_ERR_BAD_STATE;
    size_t need = held(s->table);
    *a = need > H ? KVB_AVAIL_NEVER : host_available() >= need ? KVB_AVAIL_OK : KVB_AVAIL_LATER;
    return KVB_OK;
  }
  kvb_status check_swap_out(int64_t id, size_t cap, size_t* need) {
    MSeq* s = find(id);
    if (!s) return KVB_ERR_NO_SUCH_SEQUENCE;
    if (s->swapped) return KVB_ERR_BAD_STATE;
    *need = held(s->table);
    if (cap < *need) return KVB_ERR_BUFFER_TOO_SMALL;
    if (host_available() < *need) return KVB_ERR_OUT_OF_BLOCKS;
    for (const auto& p : pending)
      if (std::find(s->table.begin(), s->table.end(), p.second) != s->table.end()) return KVB_ERR_BAD_STATE;
    for (const auto& p : loads)
      if (std::find(s->table.begin(), s->table.end(), p.second) != s->table.end()) return KVB_ERR_BAD_STATE;
    return KVB_OK;
  }
  // Applies a swap-out and checks the library's pairs against the model's host block choice.
  std::string apply_swap_out(int64_t id, const int32_t* pairs, size_t np) {
    MSeq& s = seqs[id];
    s.host_table.assign(s.table.size(), -1);
    size_t k = 0;
    for (size_t i = 0; i < s.table.size(); ++i) {
      int32_t b = s.table[i];
      if (b < 0) continue;
      if (k >= np) return "swap out returned too few pairs";
      if (pairs[2 * k] != b) return fmt("swap out pair %zu: device src %d, want %d", k, pairs[2 * k], b);
      int32_t h = take_host();  // never -1: check_swap_out counted them
      if (pairs[2 * k + 1] != h) return fmt("swap out pair %zu: host dst %d, model %d", k, pairs[2 * k + 1], h);
      host[h] = blk[b];
      host[h].ref = 1;
      s.host_table[i] = h;
      ++k;
    }
    if (k != np) return "swap out returned too many pairs";
    for (size_t i = s.table.size(); i-- > 0;)
      if (s.table[i] >= 0) {
        release(s.table[i]);
        s.table[i] = -1;
      }
    s.swapped = true;
    sw_out += k;
    return "";
  }

  kvb_status can_swap_in(int64_t id, kvb_availability* a) {
    MSeq* s = find(id);
    if (!s) return KVB_ERR_NO_SUCH_SEQUENCE;
    if (!s->swapped) return KVB_ERR_BAD_STATE;
    size_t need = held(s->host_table);
    *a = need > N ? KVB_AVAIL_NEVER : freeq.size() >= need + wm ? KVB_AVAIL_OK : KVB_AVAIL_LATER;
    return KVB_OK;
  }
  kvb_status swap_in(int64_t id, size_t cap, size_t* need, std::vector<int32_t>* pairs) {
    MSeq* s = find(id);
    if (!s) return KVB_ERR_NO_SUCH_SEQUENCE;
    if (!s->swapped) return KVB_ERR_BAD_STATE;
    *need = held(s->host_table);
    if (cap < *need) return KVB_ERR_BUFFER_TOO_SMALL;
    if (freeq.size() < *need) return KVB_ERR_OUT_OF_BLOCKS;
    bool parent_known = true;
    int pk = s->has_salt ? KVB_PARENT_SALT : KVB_PARENT_NONE;
    uint64_t ph = s->has_salt ? s->salt : 0;
    for (size_t i = 0; i < s->host_table.size(); ++i) {
      int32_t h = s->host_table[i];
      if (h < 0) {
        parent_known = false;
        continue;
      }
      int32_t b = take_free();
      MBlock& m = blk[b];
      m = host[h];
      m.ref = 1;
      m.parent_kind = pk;
      m.parent_hash = ph;
      // Back in the index where no other block holds its hash (and its parent is known).
      if (m.has_hash && parent_known && !index.count(m.key)) index_put(b);
      parent_known = m.has_hash;
      pk = KVB_PARENT_BLOCK;
      ph = m.hash;
      s->table[i] = b;
      pairs->push_back(h);
      pairs->push_back(b);
      ++sw_in;
    }
    release_swapped(*s);
    s->host_table.clear();
    s->swapped = false;
    return KVB_OK;
  }

  kvb_status reset_prefix_cache() {
    if (freeq.size() != N) return KVB_ERR_BAD_STATE;
    index.clear();
    for (MBlock& m : blk) {
      m.has_hash = false;
      m.has_extra = false;
    }
    // The host level empties too (least recently used first, then the twins, oldest first); pending
    // offloads into it are dropped. No load can be pending: its destination would be in use.
    while (!host_lru.empty() || !host_twins.empty()) {
      std::list<int32_t>& l = host_lru.empty() ? host_twins : host_lru;
      int32_t h = l.front();
      l.pop_front();
      host[h] = MBlock{};
      twin[h] = -1;
      host_free.push_back(h);
    }
    host_index.clear();
    offloaded -= offloads.size();
    offloads.clear();
    hash_count[0].clear();
    hash_count[1].clear();
    MEvent e;
    e.type = KVB_EVENT_ALL_CLEARED;
    events.push_back(e);
    return KVB_OK;
  }
};


}  // namespace
