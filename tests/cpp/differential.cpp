// Randomized differential test of the block manager (DESIGN §4 and §6) through the public C API.
//
// A deliberately plain model of the manager lives in this file (std::list free queue with O(N) removal,
// std::map index, per-sequence token vectors, xxh64 over the documented byte layout). Thousands of random
// operation sequences drive the library and the model side by side; after every step the test compares
// block tables, cached-token counts, free-block counts, the hash of every block, sequence info, stats and
// kvb_check_invariants. It also plays the engine: it keeps a simulated KV store content[block][slot]
// holding token ids, writes it only where kvb_batch_export's slot mapping says before committing, runs
// drained copy-on-write pairs and swap pairs on it, and checks after every step that each live sequence's
// computed tokens read back through its block table are exactly the model's tokens ("data is never
// lost", and a prefix hit never lands on KV that was not written).
//
// Environment: KVB_DIFF_SEEDS=n seeds per configuration (default 60); KVB_DIFF_CONFIG=name runs one
// configuration; KVB_DIFF_SEED=s runs only seed s (reproduce a failure); KVB_DIFF_VERBOSE=1 prints
// every op of the runs.
#include <xxhash.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "harness.h"

namespace {

// ---- utilities ----------------------------------------------------------------------------------

struct Rng {  // splitmix64: the same numbers on every platform and standard library
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ULL + 0x1234567ULL) {}
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return n ? static_cast<size_t>(next() % n) : 0; }
  size_t range(size_t lo, size_t hi) { return lo + below(hi - lo + 1); }  // inclusive
  bool chance(double p) { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0) < p; }
};

struct Divergence : std::runtime_error {
  explicit Divergence(const std::string& m) : std::runtime_error(m) {}
};

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, f);
  vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

template <class T>
std::string vec_str(const std::vector<T>& v) {
  std::string s = "[";
  if (v.size() > 48) return "[" + std::to_string(v.size()) + " items: " + std::to_string(v[0]) + "," + std::to_string(v[1]) + ",...," + std::to_string(v.back()) + "]";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

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

const char* sname(kvb_status s) { return kvb_status_string(s); }

// ---- the model ----------------------------------------------------------------------------------

struct MBlock {
  int ref = 0;
  bool has_hash = false;  // holds a committed full block (kvb_block_hash answers)
  uint64_t hash = 0;
  uint64_t key = 0;           // index key (= hash unless keyed)
  std::vector<int64_t> toks;  // the block's tokens when it was hashed
  bool has_extra = false;
  uint64_t extra = 0;
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
  std::set<int64_t> nc;
  std::vector<MBlock> blk;
  std::list<int32_t> freeq;  // front = head
  std::map<uint64_t, int32_t> index;
  std::map<int64_t, MSeq> seqs;
  std::vector<MBlock> host;  // content descriptions of host blocks
  std::set<int32_t> host_free;
  std::vector<std::pair<int32_t, int32_t>> pending;  // copy-on-write (src, dst)
  uint64_t query = 0, hit = 0, computed = 0, evictions = 0, cow = 0, sw_out = 0, sw_in = 0;
  uint64_t window_released = 0;

  void init(uint32_t block_size, uint32_t num_blocks, uint32_t num_host, float watermark,
            const std::vector<int64_t>& non_cacheable, bool keyed_index) {
    keyed = keyed_index;
    bs = block_size;
    N = num_blocks;
    H = num_host;
    wm = static_cast<uint32_t>(std::floor(static_cast<double>(watermark) * num_blocks));
    nc.insert(non_cacheable.begin(), non_cacheable.end());
    blk.assign(N, MBlock{});
    for (uint32_t b = 0; b < N; ++b) freeq.push_back(static_cast<int32_t>(b));
    host.assign(H, MBlock{});
    for (uint32_t h = 0; h < H; ++h) host_free.insert(static_cast<int32_t>(h));
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

  int32_t take_free() {  // queue head; a cached block there is evicted
    int32_t b = freeq.front();
    freeq.pop_front();
    if (indexed(b)) {
      index.erase(blk[b].key);
      ++evictions;
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
    if (indexed(b)) index.erase(blk[b].key);
    blk[b].has_hash = false;
    blk[b].has_extra = false;
  }

  struct Lookup {
    size_t nb = 0;
    std::vector<int32_t> hits;
    std::vector<uint64_t> hashes, keys;
    size_t free_hits = 0;
  };
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
      if (it == index.end()) break;
      const MBlock& m = blk[it->second];
      if (!std::equal(m.toks.begin(), m.toks.end(), bt) || m.toks.size() != bs) break;
      if (m.has_extra != hx || (hx && m.extra != xv)) break;
      r.hits.push_back(it->second);
      r.hashes.push_back(h);
      r.keys.push_back(key);
      if (m.ref == 0) ++r.free_hits;
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
    size_t needed = lk.nb - lk.hits.size() + lk.free_hits;
    return freeq.size() >= needed + wm ? KVB_OK : KVB_ERR_OUT_OF_BLOCKS;
  }

  kvb_status allocate(int64_t id, const std::vector<int64_t>& t, const Opts& o, size_t* cached) {
    if (t.empty() || !opts_valid(o)) return KVB_ERR_INVALID_ARGUMENT;
    if (find(id)) return KVB_ERR_SEQUENCE_EXISTS;
    Lookup lk = lookup(t, o);
    size_t needed = lk.nb - lk.hits.size() + lk.free_hits;
    if (freeq.size() < needed + wm) return KVB_ERR_OUT_OF_BLOCKS;
    MSeq& s = seqs[id];
    for (int32_t b : lk.hits) {
      acquire(b);
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
        index[key] = b;  // overwrites an older entry for the same hash
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
      for (size_t i = s->host_table.size(); i-- > 0;)
        if (s->host_table[i] >= 0) host_free.insert(s->host_table[i]);
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

  kvb_status can_swap_out(int64_t id, kvb_availability* a) {
    MSeq* s = find(id);
    if (!s) return KVB_ERR_NO_SUCH_SEQUENCE;
    if (s->swapped) return KVB_ERR_BAD_STATE;
    size_t need = held(s->table);
    *a = need > H ? KVB_AVAIL_NEVER : host_free.size() >= need ? KVB_AVAIL_OK : KVB_AVAIL_LATER;
    return KVB_OK;
  }
  kvb_status check_swap_out(int64_t id, size_t cap, size_t* need) {
    MSeq* s = find(id);
    if (!s) return KVB_ERR_NO_SUCH_SEQUENCE;
    if (s->swapped) return KVB_ERR_BAD_STATE;
    *need = held(s->table);
    if (cap < *need) return KVB_ERR_BUFFER_TOO_SMALL;
    if (host_free.size() < *need) return KVB_ERR_OUT_OF_BLOCKS;
    for (const auto& p : pending)
      if (std::find(s->table.begin(), s->table.end(), p.second) != s->table.end()) return KVB_ERR_BAD_STATE;
    return KVB_OK;
  }
  // Applies a swap-out whose host block choice came from the library (validated here).
  std::string apply_swap_out(int64_t id, const int32_t* pairs, size_t np) {
    MSeq& s = seqs[id];
    s.host_table.assign(s.table.size(), -1);
    size_t k = 0;
    for (size_t i = 0; i < s.table.size(); ++i) {
      int32_t b = s.table[i];
      if (b < 0) continue;
      if (k >= np) return "swap out returned too few pairs";
      if (pairs[2 * k] != b) return fmt("swap out pair %zu: device src %d, want %d", k, pairs[2 * k], b);
      int32_t h = pairs[2 * k + 1];
      if (!host_free.count(h)) return fmt("swap out pair %zu: host block %d is not free (or out of range)", k, h);
      host_free.erase(h);
      host[h] = blk[b];
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
      // Back in the index where no other block holds its hash (and its parent is known).
      if (m.has_hash && parent_known && !index.count(m.key)) index[m.key] = b;
      parent_known = m.has_hash;
      s->table[i] = b;
      pairs->push_back(h);
      pairs->push_back(b);
      ++sw_in;
    }
    for (size_t i = s->host_table.size(); i-- > 0;)
      if (s->host_table[i] >= 0) host_free.insert(s->host_table[i]);
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
    return KVB_OK;
  }
};

// ---- configurations -----------------------------------------------------------------------------

struct Config {
  const char* name;
  uint32_t bs, N, host;
  bool nc;        // non-cacheable token configured (and used in prompts)
  float wm;       // watermark
  uint32_t flags; // kvb_config_flags
  int vocab;
  int steps;
  int seed_weight;  // seeds per configuration = weight * base seeds / 4
};

const Config kConfigs[] = {
    {"bs1_tiny", 1, 6, 4, false, 0.0f, 0, 3, 200, 12},
    {"bs1_small_nc", 1, 40, 16, true, 0.0f, 0, 4, 200, 4},
    {"bs1_large_wm", 1, 2000, 300, false, 0.05f, 0, 3, 250, 1},
    {"bs2_tiny", 2, 4, 3, false, 0.0f, 0, 3, 200, 12},
    {"bs2_small_wm_nc", 2, 24, 12, true, 0.1f, 0, 3, 200, 4},
    {"bs2_medium_keyed", 2, 200, 64, false, 0.0f, KVB_CONFIG_KEYED_INDEX, 4, 250, 2},
    {"bs4_tiny", 4, 5, 2, false, 0.0f, 0, 3, 200, 12},
    {"bs4_tiny_nc", 4, 8, 8, true, 0.0f, 0, 3, 200, 12},
    {"bs4_small", 4, 32, 16, false, 0.0f, 0, 3, 250, 4},
    {"bs4_small_wm", 4, 48, 0, true, 0.1f, 0, 4, 250, 4},
    {"bs4_large", 4, 3000, 500, true, 0.02f, 0, 3, 250, 1},
    {"bs16_tiny", 16, 6, 4, false, 0.0f, 0, 2, 200, 12},
    {"bs16_small_nc", 16, 24, 16, true, 0.0f, 0, 2, 200, 4},
    {"bs16_medium_wm", 16, 128, 64, false, 0.05f, KVB_CONFIG_KEYED_INDEX, 3, 250, 2},
    {"bs32_tiny", 32, 4, 4, false, 0.0f, 0, 2, 200, 12},
    {"bs32_small_nc_wm", 32, 20, 10, true, 0.1f, 0, 2, 200, 4},
    {"bs32_large", 32, 1024, 256, false, 0.0f, 0, 2, 250, 1},
};

constexpr int64_t kNC = 1000;  // the non-cacheable (image placeholder) token

// Activity over a configuration's runs (printed with its result line, so a reader sees what was exercised).
struct Activity {
  uint64_t seeds = 0, steps = 0, allocs = 0, alloc_oob = 0, hit_tokens = 0, commits = 0, appends = 0, forks = 0,
           cow = 0, rollbacks = 0, released = 0, swaps_out = 0, swaps_in = 0, evictions = 0, errors = 0;
};
Activity g_act;

// ---- one run: library + model + simulated KV store -----------------------------------------------

class Run {
 public:
  Run(const Config& c, uint64_t seed, bool verbose) : cfg_(c), rng_(seed), verbose_(verbose) {}
  ~Run() { kvb_manager_destroy(m_); }

  void go() {
    kvb_config kc;
    kvb_config_init(&kc);
    kc.block_size = cfg_.bs;
    kc.num_blocks = cfg_.N;
    kc.num_host_blocks = cfg_.host;
    kc.watermark = cfg_.wm;
    std::vector<int64_t> ncv;
    if (cfg_.nc) ncv = {kNC, kNC + 1};
    kc.non_cacheable_tokens = ncv.empty() ? nullptr : ncv.data();
    kc.num_non_cacheable_tokens = ncv.size();
    kc.flags = cfg_.flags;
    kc.index_seed = cfg_.flags & KVB_CONFIG_KEYED_INDEX ? 12345 : 0;
    expect(kvb_manager_create(&kc, &m_), KVB_OK, "manager_create");
    model_.init(cfg_.bs, cfg_.N, cfg_.host, cfg_.wm, ncv, (cfg_.flags & KVB_CONFIG_KEYED_INDEX) != 0);
    content_.assign(static_cast<size_t>(cfg_.N) * cfg_.bs, -1);
    host_content_.assign(static_cast<size_t>(cfg_.host) * cfg_.bs, -1);
    // Shared prefixes over a small vocabulary: prompts collide often.
    for (int i = 0; i < 6; ++i) prefixes_.push_back(gen_tokens(rng_.range(1, 5 * cfg_.bs)));
    compare();
    for (step_ = 1; step_ <= cfg_.steps; ++step_) {
      one_step();
      compare();
    }
    g_act.seeds++;
    g_act.steps += static_cast<uint64_t>(cfg_.steps);
    g_act.hit_tokens += model_.hit;
    g_act.cow += model_.cow;
    g_act.evictions += model_.evictions;
    g_act.released += model_.window_released;
    // Tear down through the API: everything must come back.
    std::vector<int64_t> ids;
    for (const auto& kv : model_.seqs) ids.push_back(kv.first);
    for (int64_t id : ids) {
      note(fmt("final free %" PRId64, id));
      expect(kvb_seq_free(m_, id), model_.free_seq(id), "free");
    }
    compare();
    size_t nf = 0;
    expect(kvb_num_free_blocks(m_, &nf), KVB_OK, "num_free_blocks");
    if (nf != cfg_.N) fail(fmt("after freeing everything %zu of %u blocks are free", nf, cfg_.N));
  }

  int step() const { return step_; }
  // Model state, printed with a failure.
  void dump() const {
    for (const auto& kv : model_.seqs) {
      const MSeq& s = kv.second;
      printf("    seq %" PRId64 "%s: %zu tokens, %zu computed, %zu hashed, unc %ld, window %u sink %u, table %s%s\n",
             kv.first, s.swapped ? " (swapped)" : "", s.tokens.size(), s.computed, s.hashed, s.unc, s.window, s.sink,
             vec_str(s.swapped ? s.host_table : s.table).c_str(), s.has_salt ? " salted" : "");
    }
    std::string fq;
    for (int32_t b : model_.freeq) fq += std::to_string(b) + (model_.indexed(b) ? "* " : " ");
    printf("    free queue (* = cached): %s\n", fq.c_str());
    std::string pc;
    for (const auto& p : model_.pending) pc += fmt("(%d,%d) ", p.first, p.second);
    if (!pc.empty()) printf("    pending copies: %s\n", pc.c_str());
  }
  const std::deque<std::string>& history() const { return history_; }

 private:
  const Config& cfg_;
  Rng rng_;
  bool verbose_;
  kvb_manager* m_ = nullptr;
  Model model_;
  std::vector<int64_t> content_, host_content_;  // simulated K/V: the token id written at each slot
  std::vector<std::vector<int64_t>> prefixes_;
  std::deque<std::string> history_;
  int step_ = 0;
  int64_t next_id_ = 0;

  [[noreturn]] void fail(const std::string& msg) { throw Divergence(msg); }

  static void count(kvb_status st, const char* what) {
    if (st != KVB_OK) {
      ++g_act.errors;
      if (st == KVB_ERR_OUT_OF_BLOCKS && !strcmp(what, "allocate")) ++g_act.alloc_oob;
      return;
    }
    if (!strcmp(what, "allocate")) ++g_act.allocs;
    else if (!strcmp(what, "commit")) ++g_act.commits;
    else if (!strcmp(what, "append")) ++g_act.appends;
    else if (!strcmp(what, "fork") || !strcmp(what, "fork_at")) ++g_act.forks;
    else if (!strcmp(what, "rollback")) ++g_act.rollbacks;
    else if (!strcmp(what, "swap_out")) ++g_act.swaps_out;
    else if (!strcmp(what, "swap_in")) ++g_act.swaps_in;
  }

  void note(const std::string& s) {
    if (verbose_) printf("  [%d] %s\n", step_, s.c_str());
    history_.push_back(fmt("[%d] ", step_) + s);
    if (history_.size() > 40) history_.pop_front();
  }

  void expect(kvb_status got, kvb_status want, const char* what) {
    count(got, what);
    if (got != want)
      fail(fmt("%s returned %s, model says %s (%s)", what, sname(got), sname(want), kvb_last_error()));
    if (got != KVB_OK && kvb_last_error()[0] == '\0') fail(fmt("%s failed with an empty kvb_last_error()", what));
  }

  // ---- random inputs ----
  int64_t gen_token() {
    if (cfg_.nc && rng_.chance(0.04)) return kNC + static_cast<int64_t>(rng_.below(2));
    return static_cast<int64_t>(rng_.below(static_cast<size_t>(cfg_.vocab)));
  }
  std::vector<int64_t> gen_tokens(size_t n) {
    std::vector<int64_t> t(n);
    for (auto& x : t) x = gen_token();
    return t;
  }
  int64_t new_id() {  // caller-chosen ids: negative and large ones too
    int64_t k = next_id_++;
    switch (k % 3) {
      case 0: return k;
      case 1: return -k - 1;
      default: return k * 1000003LL + (INT64_C(1) << 40);
    }
  }
  int64_t unknown_id() {
    for (;;) {
      int64_t id = rng_.chance(0.5) ? static_cast<int64_t>(rng_.below(100)) - 50 : static_cast<int64_t>(rng_.next());
      if (!model_.find(id)) return id;
    }
  }
  bool pick(int64_t* id, int which) {  // which: 0 any, 1 device, 2 swapped
    std::vector<int64_t> c;
    for (const auto& kv : model_.seqs)
      if (which == 0 || (which == 1) == !kv.second.swapped) c.push_back(kv.first);
    if (c.empty()) return false;
    *id = c[rng_.below(c.size())];
    return true;
  }
  uint64_t extra_key_for(const int64_t* t) {  // mostly a content hash (so equal images match)
    if (rng_.chance(0.2)) return 7 + rng_.below(2);
    uint64_t h = 0;
    for (uint32_t i = 0; i < cfg_.bs; ++i) h = h * 31 + static_cast<uint64_t>(t[i]);
    return h % 5;
  }
  std::vector<int64_t> gen_prompt() {
    std::vector<int64_t> t;
    double r = static_cast<double>(rng_.below(100)) / 100.0;
    if (r < 0.15 && !model_.seqs.empty()) {  // an existing sequence's tokens (or a prefix of them)
      auto it = model_.seqs.begin();
      std::advance(it, static_cast<long>(rng_.below(model_.seqs.size())));
      t = it->second.tokens;
      if (rng_.chance(0.5)) t.resize(rng_.range(1, t.size()));
      else for (size_t k = rng_.below(3); k-- > 0;) t.push_back(gen_token());
    } else {
      t = prefixes_[rng_.below(prefixes_.size())];
      size_t tail = rng_.below(3 * cfg_.bs + 1);
      for (size_t k = 0; k < tail; ++k) t.push_back(gen_token());
    }
    if (cfg_.N >= 1000 && rng_.chance(0.2)) {  // large pools: some long prompts
      size_t more = rng_.below(20 * cfg_.bs);
      for (size_t k = 0; k < more; ++k) t.push_back(gen_token());
    }
    if (t.empty()) t.push_back(gen_token());
    return t;
  }
  Opts gen_opts(const std::vector<int64_t>& t) {
    Opts o;
    if (rng_.chance(0.3)) {
      o.has_salt = true;
      o.salt = 1 + rng_.below(2);
    }
    if (rng_.chance(0.3)) {
      size_t nb = model_.nblocks(t.size());
      for (uint32_t i = 0; i < nb; ++i) {
        bool full = (i + 1) * cfg_.bs <= t.size();
        bool has_nc = false;
        if (full)
          for (uint32_t k = 0; k < cfg_.bs; ++k) has_nc |= t[i * cfg_.bs + k] >= kNC;
        if ((has_nc && rng_.chance(0.7)) || rng_.chance(0.1)) {
          o.ek_blocks.push_back(i);
          o.ek_vals.push_back(full ? extra_key_for(&t[i * cfg_.bs]) : 9);
        }
      }
    }
    if (rng_.chance(0.15)) {
      o.window = static_cast<uint32_t>(rng_.range(1, 4 * cfg_.bs));
      o.sink = rng_.chance(0.5) ? static_cast<uint32_t>(rng_.below(2 * cfg_.bs + 1)) : 0;
    }
    return o;
  }
  static kvb_seq_options to_c(const Opts& o) {
    kvb_seq_options so;
    kvb_seq_options_init(&so);
    so.has_cache_salt = o.has_salt;
    so.cache_salt = o.salt;
    so.extra_key_blocks = o.ek_blocks.empty() ? nullptr : o.ek_blocks.data();
    so.extra_keys = o.ek_vals.empty() ? nullptr : o.ek_vals.data();
    so.num_extra_keys = o.ek_blocks.size();
    so.window_tokens = o.window;
    so.sink_tokens = o.sink;
    return so;
  }
  static std::string opts_str(const Opts& o) {
    std::string s;
    if (o.has_salt) s += fmt(" salt=%" PRIu64, o.salt);
    for (size_t i = 0; i < o.ek_blocks.size(); ++i) s += fmt(" ek[%u]=%" PRIu64, o.ek_blocks[i], o.ek_vals[i]);
    if (o.window) s += fmt(" window=%u sink=%u", o.window, o.sink);
    return s;
  }

  // ---- the engine side: KV store ----
  void drain_and_run_copies() {
    size_t np = 0;
    std::vector<int32_t> pairs(2 * model_.pending.size() + 2, -7);
    expect(kvb_drain_copies(m_, pairs.data(), model_.pending.size() + 1, &np), KVB_OK, "drain_copies");
    if (np != model_.pending.size()) fail(fmt("drain_copies gave %zu pairs, model has %zu", np, model_.pending.size()));
    for (size_t i = 0; i < np; ++i) {
      if (pairs[2 * i] != model_.pending[i].first || pairs[2 * i + 1] != model_.pending[i].second)
        fail(fmt("drained copy %zu is (%d,%d), model (%d,%d)", i, pairs[2 * i], pairs[2 * i + 1],
                 model_.pending[i].first, model_.pending[i].second));
      int32_t src = pairs[2 * i], dst = pairs[2 * i + 1];
      std::copy(&content_[static_cast<size_t>(src) * cfg_.bs], &content_[static_cast<size_t>(src + 1) * cfg_.bs],
                &content_[static_cast<size_t>(dst) * cfg_.bs]);
    }
    // Drained copies release the references they held on their sources, in order.
    std::vector<std::pair<int32_t, int32_t>> taken;
    taken.swap(model_.pending);
    for (const auto& p : taken) model_.release(p.first);
  }

  // Model expectation of kvb_batch_export for ids (all on device).
  struct BatchWant {
    kvb_status st = KVB_OK;
    size_t slots = 0;
    uint32_t max_blocks = 0;
  };
  BatchWant batch_want(const std::vector<int64_t>& ids, uint32_t cols, bool tables, size_t slot_cap, bool slots) {
    BatchWant w;
    for (int64_t id : ids) {
      MSeq* s = model_.find(id);
      if (!s) return BatchWant{KVB_ERR_NO_SUCH_SEQUENCE, 0, 0};
      if (s->swapped) return BatchWant{KVB_ERR_BAD_STATE, 0, 0};
      w.slots += s->tokens.size() - s->computed;
      w.max_blocks = std::max(w.max_blocks, static_cast<uint32_t>(s->table.size()));
    }
    if ((tables && w.max_blocks > cols) || (slots && w.slots > slot_cap)) w.st = KVB_ERR_BUFFER_TOO_SMALL;
    return w;
  }

  // Calls kvb_batch_export with the given buffer sizes and checks every output against the model.
  // Returns the slot mapping on success.
  std::vector<int64_t> batch_export(const std::vector<int64_t>& ids, uint32_t cols, size_t slot_cap, bool tables,
                                    bool lens, bool qs, bool slots) {
    std::vector<int32_t> bt(static_cast<size_t>(cols) * ids.size() + 1, -9), sl(ids.size() + 1, -9),
        q(ids.size() + 2, -9);
    std::vector<int64_t> sm(slot_cap + 1, -9);
    kvb_batch b;
    kvb_batch_init(&b);
    b.max_blocks_per_seq = cols;
    b.block_tables = tables ? bt.data() : nullptr;
    b.seq_lens = lens ? sl.data() : nullptr;
    b.query_start = qs ? q.data() : nullptr;
    b.slot_mapping = slots ? sm.data() : nullptr;
    b.slot_capacity = slot_cap;
    BatchWant w = batch_want(ids, cols, tables, slot_cap, slots);
    kvb_status st = kvb_batch_export(m_, ids.empty() ? nullptr : ids.data(), ids.size(), &b);
    expect(st, w.st, "batch_export");
    if (st == KVB_OK || st == KVB_ERR_BUFFER_TOO_SMALL) {
      if (b.num_slots != w.slots || b.max_blocks_needed != w.max_blocks)
        fail(fmt("batch_export num_slots %zu max_blocks_needed %u, model %zu %u", b.num_slots, b.max_blocks_needed,
                 w.slots, w.max_blocks));
    }
    if (st != KVB_OK) {  // a failed call writes nothing
      for (int32_t v : bt) if (v != -9) fail("failed batch_export wrote block_tables");
      for (int32_t v : sl) if (v != -9) fail("failed batch_export wrote seq_lens");
      for (int32_t v : q) if (v != -9) fail("failed batch_export wrote query_start");
      for (int64_t v : sm) if (v != -9) fail("failed batch_export wrote slot_mapping");
      return {};
    }
    std::vector<int64_t> want_sm;
    int32_t qacc = 0;
    if (qs && q[0] != 0) fail("query_start[0] != 0");
    for (size_t i = 0; i < ids.size(); ++i) {
      const MSeq& s = *model_.find(ids[i]);
      if (tables)
        for (uint32_t c = 0; c < cols; ++c) {
          int32_t want = c < s.table.size() ? s.table[c] : -1;
          if (bt[i * cols + c] != want)
            fail(fmt("batch block_tables[%zu][%u] = %d, model %d", i, c, bt[i * cols + c], want));
        }
      if (lens && sl[i] != static_cast<int32_t>(s.tokens.size()))
        fail(fmt("batch seq_lens[%zu] = %d, model %zu", i, sl[i], s.tokens.size()));
      for (size_t p = s.computed; p < s.tokens.size(); ++p)
        want_sm.push_back(static_cast<int64_t>(s.table[p / cfg_.bs]) * cfg_.bs + static_cast<int64_t>(p % cfg_.bs));
      qacc += static_cast<int32_t>(s.tokens.size() - s.computed);
      if (qs && q[i + 1] != qacc) fail(fmt("batch query_start[%zu] = %d, model %d", i + 1, q[i + 1], qacc));
    }
    if (tables && bt[static_cast<size_t>(cols) * ids.size()] != -9) fail("batch_export wrote past block_tables");
    if (lens && sl[ids.size()] != -9) fail("batch_export wrote past seq_lens");
    if (qs && q[ids.size() + 1] != -9) fail("batch_export wrote past query_start");
    if (slots) {
      for (size_t k = 0; k < slot_cap; ++k) {
        int64_t want = k < want_sm.size() ? want_sm[k] : -1;
        if (sm[k] != want) fail(fmt("batch slot_mapping[%zu] = %" PRId64 ", model %" PRId64, k, sm[k], want));
      }
      if (sm[slot_cap] != -9) fail("batch_export wrote past slot_capacity");
    }
    return want_sm;
  }

  // One engine step: run pending copies, export the batch, write K/V of the tokens to commit at their
  // slots, commit.
  void engine_step() {
    std::vector<int64_t> cand, ids;
    for (const auto& kv : model_.seqs)
      if (!kv.second.swapped && kv.second.computed < kv.second.tokens.size()) cand.push_back(kv.first);
    if (cand.empty()) return;
    for (int64_t id : cand)
      if (rng_.chance(0.5) || ids.empty()) ids.push_back(id);
    while (ids.size() > 4) ids.erase(ids.begin() + static_cast<long>(rng_.below(ids.size())));
    note("step: drain copies, export " + vec_str(ids));
    drain_and_run_copies();
    size_t slots = 0;
    uint32_t cols = 0;
    for (int64_t id : ids) {
      slots += model_.seqs[id].tokens.size() - model_.seqs[id].computed;
      cols = std::max(cols, static_cast<uint32_t>(model_.seqs[id].table.size()));
    }
    std::vector<int64_t> sm = batch_export(ids, cols + static_cast<uint32_t>(rng_.below(2)), slots + rng_.below(3),
                                           true, true, true, true);
    size_t off = 0;
    for (int64_t id : ids) {
      MSeq& s = model_.seqs[id];
      size_t unc = s.tokens.size() - s.computed;
      size_t k = rng_.chance(0.6) ? unc : rng_.below(unc + 1);
      for (size_t j = 0; j < k; ++j) {
        int64_t slot = sm[off + j];
        if (slot < 0 || slot >= static_cast<int64_t>(content_.size())) fail(fmt("slot %" PRId64 " out of range", slot));
        content_[static_cast<size_t>(slot)] = s.tokens[s.computed + j];
      }
      off += unc;
      note(fmt("commit %" PRId64 " %zu", id, k));
      expect(kvb_seq_commit(m_, id, k), model_.commit(id, k), "commit");
    }
  }

  // ---- operations ----
  void op_allocate() {
    std::vector<int64_t> t = gen_prompt();
    bool ex = rng_.chance(0.5);
    Opts o = ex ? gen_opts(t) : Opts{};
    kvb_seq_options so = to_c(o);
    int64_t id = new_id();
    note(fmt("allocate%s %" PRId64 " %s%s", ex ? "_ex" : "", id, vec_str(t).c_str(), opts_str(o).c_str()));
    size_t want_c = 0, got_c = 99999;
    kvb_status want = model_.can_allocate(t, o, &want_c);
    kvb_status st = ex ? kvb_seq_can_allocate_ex(m_, t.data(), t.size(), &so, &got_c)
                       : kvb_seq_can_allocate(m_, t.data(), t.size(), &got_c);
    expect(st, want, "can_allocate");
    if (got_c != want_c) fail(fmt("can_allocate cached %zu, model %zu", got_c, want_c));
    got_c = 99999;
    want = model_.allocate(id, t, o, &want_c);
    st = ex ? kvb_seq_allocate_ex(m_, id, t.data(), t.size(), &so, &got_c)
            : kvb_seq_allocate(m_, id, t.data(), t.size(), &got_c);
    expect(st, want, "allocate");
    if (st == KVB_OK && got_c != want_c) fail(fmt("allocate cached %zu, model %zu", got_c, want_c));
  }

  void op_append() {
    int64_t id;
    if (!pick(&id, 1)) return;
    size_t n = rng_.chance(0.6) ? 1 : rng_.range(1, cfg_.bs + 3);
    std::vector<int64_t> t = gen_tokens(n);
    note(fmt("append %" PRId64 " %s", id, vec_str(t).c_str()));
    expect(kvb_seq_can_append(m_, id, n), model_.can_append(id, n), "can_append");
    expect(kvb_seq_append(m_, id, t.data(), n), model_.append(id, t), "append");
  }

  void op_free() {
    int64_t id;
    if (!pick(&id, 0)) return;
    note(fmt("free %" PRId64, id));
    expect(kvb_seq_free(m_, id), model_.free_seq(id), "free");
  }

  void op_fork() {
    int64_t pid;
    if (!pick(&pid, 0)) return;
    int64_t cid = new_id();
    bool at = rng_.chance(0.6);
    const MSeq& p = *model_.find(pid);
    size_t pos = 0;
    if (at) pos = rng_.chance(0.85) ? rng_.range(1, std::max<size_t>(1, p.computed)) : rng_.below(p.tokens.size() + 2);
    note(at ? fmt("fork_at %" PRId64 " -> %" PRId64 " %zu", pid, cid, pos) : fmt("fork %" PRId64 " -> %" PRId64, pid, cid));
    kvb_status want = model_.fork(pid, cid, pos, at);
    kvb_status st = at ? kvb_seq_fork_at(m_, pid, cid, pos) : kvb_seq_fork(m_, pid, cid);
    expect(st, want, at ? "fork_at" : "fork");
  }

  void op_rollback() {
    int64_t id;
    if (!pick(&id, 1)) return;
    size_t L = model_.find(id)->tokens.size();
    size_t n = rng_.chance(0.9) ? rng_.below(std::min<size_t>(L, 2 * cfg_.bs + 2)) : rng_.below(L + 2);
    note(fmt("rollback %" PRId64 " %zu", id, n));
    expect(kvb_seq_rollback(m_, id, n), model_.rollback(id, n), "rollback");
  }

  void op_spec_decode() {  // append k speculative tokens, commit them, reject some
    int64_t id;
    if (!pick(&id, 1)) return;
    if (model_.find(id)->computed != model_.find(id)->tokens.size()) return;
    size_t k = rng_.range(1, 4);
    std::vector<int64_t> t = gen_tokens(k);
    note(fmt("spec append %" PRId64 " %s", id, vec_str(t).c_str()));
    kvb_status st = kvb_seq_append(m_, id, t.data(), k);
    expect(st, model_.append(id, t), "append");
    if (st != KVB_OK) return;
    drain_and_run_copies();
    std::vector<int64_t> sm = batch_export({id}, 0, k, false, false, false, true);
    for (size_t j = 0; j < k; ++j) content_[static_cast<size_t>(sm[j])] = t[j];
    note(fmt("spec commit %" PRId64 " %zu", id, k));
    expect(kvb_seq_commit(m_, id, k), model_.commit(id, k), "commit");
    size_t r = rng_.below(k + 1);
    note(fmt("spec rollback %" PRId64 " %zu", id, r));
    expect(kvb_seq_rollback(m_, id, r), model_.rollback(id, r), "rollback");
  }

  void op_window() {
    int64_t id;
    if (!pick(&id, 1)) return;
    uint32_t w = rng_.chance(0.15) ? 0 : static_cast<uint32_t>(rng_.range(1, 4 * cfg_.bs));
    // Sinks grow and shrink: blocks kept only by a larger earlier sink must be released by a smaller one.
    uint32_t sk = 0;
    if (w) sk = rng_.chance(0.5) ? static_cast<uint32_t>(rng_.below(2 * cfg_.bs + 1)) : 0;
    if (w == 0 && rng_.chance(0.3)) sk = 1 + static_cast<uint32_t>(rng_.below(3));  // sink without window: invalid
    note(fmt("set_window %" PRId64 " %u %u", id, w, sk));
    expect(kvb_seq_set_window(m_, id, w, sk), model_.set_window(id, w, sk), "set_window");
  }

  void op_swap_out() {
    int64_t id;
    if (!pick(&id, 0)) return;
    note(fmt("swap_out %" PRId64, id));
    kvb_availability a = KVB_AVAIL_NEVER, wa = KVB_AVAIL_NEVER;
    kvb_status want = model_.can_swap_out(id, &wa);
    expect(kvb_seq_can_swap_out(m_, id, &a), want, "can_swap_out");
    if (want == KVB_OK && a != wa) fail(fmt("can_swap_out answered %d, model %d", a, wa));
    size_t need = 0;
    size_t cap = rng_.chance(0.1) ? rng_.below(3) : 4096;
    want = model_.check_swap_out(id, cap, &need);
    std::vector<int32_t> pairs(2 * std::max<size_t>(need, 1) + 2 * cap, -3);
    size_t np = 77777;
    kvb_status st = kvb_seq_swap_out(m_, id, pairs.data(), cap, &np);
    expect(st, want, "swap_out");
    if ((st == KVB_OK || st == KVB_ERR_BUFFER_TOO_SMALL) && np != need)
      fail(fmt("swap_out num_pairs %zu, model %zu", np, need));
    if (st != KVB_OK) return;
    std::string err = model_.apply_swap_out(id, pairs.data(), np);
    if (!err.empty()) fail(err);
    for (size_t k = 0; k < np; ++k) {  // run the pairs: device -> host
      int32_t b = pairs[2 * k], h = pairs[2 * k + 1];
      std::copy(&content_[static_cast<size_t>(b) * cfg_.bs], &content_[static_cast<size_t>(b + 1) * cfg_.bs],
                &host_content_[static_cast<size_t>(h) * cfg_.bs]);
    }
  }

  void op_swap_in() {
    int64_t id;
    if (!pick(&id, rng_.chance(0.9) ? 2 : 0)) return;
    note(fmt("swap_in %" PRId64, id));
    kvb_availability a = KVB_AVAIL_NEVER, wa = KVB_AVAIL_NEVER;
    kvb_status want = model_.can_swap_in(id, &wa);
    expect(kvb_seq_can_swap_in(m_, id, &a), want, "can_swap_in");
    if (want == KVB_OK && a != wa) fail(fmt("can_swap_in answered %d, model %d", a, wa));
    if (want == KVB_OK && wa != KVB_AVAIL_OK && rng_.chance(0.7)) return;  // a scheduler would wait
    // The engine runs pending copies before the swap-in overwrites device blocks (a freed CoW source
    // may be among them).
    drain_and_run_copies();
    size_t cap = rng_.chance(0.1) ? rng_.below(3) : 4096, need = 0, np = 77777;
    std::vector<int32_t> want_pairs;
    want = model_.swap_in(id, cap, &need, &want_pairs);
    std::vector<int32_t> pairs(2 * std::max<size_t>(need, 1) + 2 * cap, -3);
    kvb_status st = kvb_seq_swap_in(m_, id, pairs.data(), cap, &np);
    expect(st, want, "swap_in");
    if ((st == KVB_OK || st == KVB_ERR_BUFFER_TOO_SMALL) && np != need)
      fail(fmt("swap_in num_pairs %zu, model %zu", np, need));
    if (st != KVB_OK) return;
    for (size_t k = 0; k < 2 * np; ++k)
      if (pairs[k] != want_pairs[k]) fail(fmt("swap_in pairs %s, model %s", vec_str(std::vector<int32_t>(pairs.begin(), pairs.begin() + static_cast<long>(2 * np))).c_str(), vec_str(want_pairs).c_str()));
    for (size_t k = 0; k < np; ++k) {  // run the pairs: host -> device
      int32_t h = pairs[2 * k], b = pairs[2 * k + 1];
      std::copy(&host_content_[static_cast<size_t>(h) * cfg_.bs], &host_content_[static_cast<size_t>(h + 1) * cfg_.bs],
                &content_[static_cast<size_t>(b) * cfg_.bs]);
    }
  }

  void op_drain() {
    if (rng_.chance(0.3) && !model_.pending.empty()) {  // too small: nothing is drained
      size_t np = 0;
      std::vector<int32_t> pairs(2 * model_.pending.size(), -5);
      note("drain_copies (too small)");
      expect(kvb_drain_copies(m_, pairs.data(), model_.pending.size() - 1, &np), KVB_ERR_BUFFER_TOO_SMALL,
             "drain_copies");
      if (np != model_.pending.size()) fail(fmt("drain_copies needed %zu, model %zu", np, model_.pending.size()));
      for (int32_t v : pairs) if (v != -5) fail("failed drain_copies wrote pairs");
      return;
    }
    note("drain_copies");
    drain_and_run_copies();
  }

  void op_batch() {
    std::vector<int64_t> ids;
    for (const auto& kv : model_.seqs)
      if (rng_.chance(0.4)) ids.push_back(kv.first);
    if (rng_.chance(0.05)) ids.insert(ids.begin() + static_cast<long>(rng_.below(ids.size() + 1)), unknown_id());
    size_t slots = 0;
    uint32_t cols = 0;
    for (int64_t id : ids) {
      const MSeq* s = model_.find(id);
      if (!s) continue;
      slots += s->tokens.size() - s->computed;
      cols = std::max(cols, static_cast<uint32_t>(s->table.size()));
    }
    if (rng_.chance(0.2) && cols) cols -= static_cast<uint32_t>(rng_.range(1, cols));
    else cols += static_cast<uint32_t>(rng_.below(3));
    if (rng_.chance(0.2) && slots) slots -= rng_.range(1, slots);
    else slots += rng_.below(4);
    note(fmt("batch_export %s cols=%u slots=%zu", vec_str(ids).c_str(), cols, slots));
    batch_export(ids, cols, slots, rng_.chance(0.8), rng_.chance(0.8), rng_.chance(0.8), rng_.chance(0.8));
  }

  void op_reset() {
    note("reset_prefix_cache");
    expect(kvb_reset_prefix_cache(m_), model_.reset_prefix_cache(), "reset_prefix_cache");
  }

  void op_extra_key() {
    int64_t id;
    if (!pick(&id, 0)) return;
    const MSeq& s = *model_.find(id);
    uint32_t bi = static_cast<uint32_t>(rng_.below(model_.nblocks(s.tokens.size()) + 2));
    uint64_t key = rng_.below(5);
    note(fmt("set_extra_key %" PRId64 " block %u key %" PRIu64, id, bi, key));
    expect(kvb_seq_set_extra_key(m_, id, bi, key), model_.set_extra_key(id, bi, key), "set_extra_key");
  }

  void op_invalid() {
    int64_t id = unknown_id(), known = 0;
    bool have = pick(&known, 0);
    int64_t tok = 1;
    size_t n = 0, cached = 0;
    int32_t buf[4];
    kvb_availability a;
    switch (rng_.below(14)) {
      case 0:
        note(fmt("commit unknown %" PRId64, id));
        expect(kvb_seq_commit(m_, id, 1), KVB_ERR_NO_SUCH_SEQUENCE, "commit(unknown)");
        break;
      case 1:
        note(fmt("append unknown %" PRId64, id));
        expect(kvb_seq_append(m_, id, &tok, 1), KVB_ERR_NO_SUCH_SEQUENCE, "append(unknown)");
        expect(kvb_seq_can_append(m_, id, 1), KVB_ERR_NO_SUCH_SEQUENCE, "can_append(unknown)");
        break;
      case 2:
        note(fmt("free/table/info/rollback/window/swap unknown %" PRId64, id));
        expect(kvb_seq_free(m_, id), KVB_ERR_NO_SUCH_SEQUENCE, "free(unknown)");
        expect(kvb_seq_block_table(m_, id, buf, 4, &n), KVB_ERR_NO_SUCH_SEQUENCE, "block_table(unknown)");
        expect(kvb_seq_rollback(m_, id, 1), KVB_ERR_NO_SUCH_SEQUENCE, "rollback(unknown)");
        expect(kvb_seq_set_window(m_, id, 4, 0), KVB_ERR_NO_SUCH_SEQUENCE, "set_window(unknown)");
        expect(kvb_seq_can_swap_out(m_, id, &a), KVB_ERR_NO_SUCH_SEQUENCE, "can_swap_out(unknown)");
        expect(kvb_seq_can_swap_in(m_, id, &a), KVB_ERR_NO_SUCH_SEQUENCE, "can_swap_in(unknown)");
        expect(kvb_seq_swap_out(m_, id, buf, 2, &n), KVB_ERR_NO_SUCH_SEQUENCE, "swap_out(unknown)");
        expect(kvb_seq_swap_in(m_, id, buf, 2, &n), KVB_ERR_NO_SUCH_SEQUENCE, "swap_in(unknown)");
        expect(kvb_seq_set_extra_key(m_, id, 0, 1), KVB_ERR_NO_SUCH_SEQUENCE, "set_extra_key(unknown)");
        {
          kvb_seq_info info;
          kvb_seq_info_init(&info);
          expect(kvb_seq_get_info(m_, id, &info), KVB_ERR_NO_SUCH_SEQUENCE, "get_info(unknown)");
        }
        break;
      case 3:
        note(fmt("fork unknown %" PRId64, id));
        expect(kvb_seq_fork(m_, id, new_id()), KVB_ERR_NO_SUCH_SEQUENCE, "fork(unknown)");
        expect(kvb_seq_fork_at(m_, id, new_id(), 1), KVB_ERR_NO_SUCH_SEQUENCE, "fork_at(unknown)");
        break;
      case 4:
        if (!have) break;
        note(fmt("allocate existing %" PRId64, known));
        expect(kvb_seq_allocate(m_, known, &tok, 1, &cached), KVB_ERR_SEQUENCE_EXISTS, "allocate(existing)");
        break;
      case 5:
        if (!have) break;
        note(fmt("commit too much %" PRId64, known));
        {
          const MSeq& s = *model_.find(known);
          size_t too = s.tokens.size() - s.computed + 1 + rng_.below(3);
          expect(kvb_seq_commit(m_, known, too), model_.commit(known, too), "commit(too much)");
        }
        break;
      case 6:
        note("allocate / can_allocate of 0 tokens, NULL tokens");
        expect(kvb_seq_allocate(m_, new_id(), &tok, 0, &cached), KVB_ERR_INVALID_ARGUMENT, "allocate(n=0)");
        expect(kvb_seq_can_allocate(m_, &tok, 0, &cached), KVB_ERR_INVALID_ARGUMENT, "can_allocate(n=0)");
        expect(kvb_seq_allocate(m_, new_id(), nullptr, 3, &cached), KVB_ERR_INVALID_ARGUMENT, "allocate(NULL)");
        expect(kvb_seq_can_allocate(m_, &tok, 1, nullptr), KVB_ERR_INVALID_ARGUMENT, "can_allocate(NULL out)");
        break;
      case 7: {
        note("allocate_ex with bad options");
        kvb_seq_options so;
        kvb_seq_options_init(&so);
        uint32_t blocks[2] = {1, 1};
        uint64_t keys[2] = {1, 2};
        so.extra_key_blocks = blocks;
        so.extra_keys = keys;
        so.num_extra_keys = 2;  // not strictly increasing
        std::vector<int64_t> t(3 * cfg_.bs, 1);
        expect(kvb_seq_allocate_ex(m_, new_id(), t.data(), t.size(), &so, &cached), KVB_ERR_INVALID_ARGUMENT,
               "allocate_ex(bad extra keys)");
        kvb_seq_options_init(&so);
        so.sink_tokens = 3;  // sink without a window
        expect(kvb_seq_allocate_ex(m_, new_id(), t.data(), t.size(), &so, &cached), KVB_ERR_INVALID_ARGUMENT,
               "allocate_ex(sink without window)");
        kvb_seq_options_init(&so);
        so.has_cache_salt = 2;
        expect(kvb_seq_allocate_ex(m_, new_id(), t.data(), t.size(), &so, &cached), KVB_ERR_INVALID_ARGUMENT,
               "allocate_ex(has_cache_salt=2)");
        kvb_seq_options_init(&so);
        so.struct_size = 4;
        expect(kvb_seq_allocate_ex(m_, new_id(), t.data(), t.size(), &so, &cached), KVB_ERR_INVALID_ARGUMENT,
               "allocate_ex(struct_size 4)");
        break;
      }
      case 8: {
        note("block_hash out of range");
        uint64_t h;
        expect(kvb_block_hash(m_, -1, &h), KVB_ERR_INVALID_ARGUMENT, "block_hash(-1)");
        expect(kvb_block_hash(m_, static_cast<int32_t>(cfg_.N), &h), KVB_ERR_INVALID_ARGUMENT, "block_hash(N)");
        expect(kvb_block_hash(m_, 0, nullptr), KVB_ERR_INVALID_ARGUMENT, "block_hash(NULL)");
        break;
      }
      case 9: {
        int64_t d;
        if (!pick(&d, 1)) break;
        const MSeq& s = *model_.find(d);
        note(fmt("block_table too small %" PRId64, d));
        std::vector<int32_t> small(s.table.size(), -4);
        n = 0;
        expect(kvb_seq_block_table(m_, d, small.data(), s.table.size() - 1, &n), KVB_ERR_BUFFER_TOO_SMALL,
               "block_table(too small)");
        if (n != s.table.size()) fail(fmt("block_table too small reported %zu, want %zu", n, s.table.size()));
        for (int32_t v : small) if (v != -4) fail("failed block_table wrote entries");
        break;
      }
      case 10: {
        if (!have) break;
        note(fmt("fork onto itself / existing %" PRId64, known));
        expect(kvb_seq_fork(m_, known, known), model_.fork(known, known, 0, false), "fork(self)");
        int64_t other;
        if (pick(&other, 0) && other != known)
          expect(kvb_seq_fork_at(m_, known, other, 1), model_.fork(known, other, 1, true), "fork_at(existing)");
        break;
      }
      case 11: {
        int64_t d;
        if (!pick(&d, 1)) break;
        note(fmt("swap_in of device seq / rollback everything %" PRId64, d));
        expect(kvb_seq_swap_in(m_, d, buf, 2, &n), KVB_ERR_BAD_STATE, "swap_in(on device)");
        expect(kvb_seq_can_swap_in(m_, d, &a), KVB_ERR_BAD_STATE, "can_swap_in(on device)");
        size_t L = model_.find(d)->tokens.size();
        expect(kvb_seq_rollback(m_, d, L), KVB_ERR_INVALID_ARGUMENT, "rollback(all)");
        break;
      }
      case 12: {
        int64_t s;
        if (!pick(&s, 2)) break;
        note(fmt("device ops on swapped seq %" PRId64, s));
        expect(kvb_seq_block_table(m_, s, buf, 4, &n), KVB_ERR_BAD_STATE, "block_table(swapped)");
        expect(kvb_seq_commit(m_, s, 0), KVB_ERR_BAD_STATE, "commit(swapped)");
        expect(kvb_seq_append(m_, s, &tok, 1), KVB_ERR_BAD_STATE, "append(swapped)");
        expect(kvb_seq_can_append(m_, s, 1), KVB_ERR_BAD_STATE, "can_append(swapped)");
        expect(kvb_seq_rollback(m_, s, 1), KVB_ERR_BAD_STATE, "rollback(swapped)");
        expect(kvb_seq_set_window(m_, s, 4, 0), KVB_ERR_BAD_STATE, "set_window(swapped)");
        expect(kvb_seq_fork(m_, s, new_id()), KVB_ERR_BAD_STATE, "fork(swapped)");
        expect(kvb_seq_can_swap_out(m_, s, &a), KVB_ERR_BAD_STATE, "can_swap_out(swapped)");
        expect(kvb_seq_swap_out(m_, s, buf, 2, &n), KVB_ERR_BAD_STATE, "swap_out(swapped)");
        break;
      }
      default: {
        note("NULL arguments");
        expect(kvb_num_free_blocks(m_, nullptr), KVB_ERR_INVALID_ARGUMENT, "num_free_blocks(NULL)");
        expect(kvb_num_free_blocks(nullptr, &n), KVB_ERR_INVALID_ARGUMENT, "num_free_blocks(NULL manager)");
        expect(kvb_drain_copies(m_, buf, 2, nullptr), KVB_ERR_INVALID_ARGUMENT, "drain_copies(NULL)");
        if (have) expect(kvb_seq_append(m_, known, nullptr, 2), KVB_ERR_INVALID_ARGUMENT, "append(NULL)");
        break;
      }
    }
  }

  void one_step() {
    size_t r = rng_.below(100);
    if (model_.seqs.empty() || r < 16) op_allocate();
    else if (r < 36) engine_step();
    else if (r < 50) op_append();
    else if (r < 56) op_free();
    else if (r < 62) op_fork();
    else if (r < 65) op_drain();
    else if (r < 69) op_rollback();
    else if (r < 73) op_spec_decode();
    else if (r < 76) op_window();
    else if (r < 80) op_swap_out();
    else if (r < 84) op_swap_in();
    else if (r < 87) op_batch();
    else if (r < 89) op_reset();
    else if (r < 91) op_extra_key();
    else op_invalid();
    // Keep the population bounded so that tiny pools keep cycling.
    if (model_.seqs.size() > 12) op_free();
  }

  // ---- full comparison ----
  int64_t read_slot(const std::map<int32_t, std::vector<int64_t>>& overlay, int32_t b, size_t off) const {
    auto it = overlay.find(b);
    if (it != overlay.end()) return it->second[off];
    return content_[static_cast<size_t>(b) * cfg_.bs + off];
  }

  void compare() {
    size_t nf = 0;
    expect(kvb_num_free_blocks(m_, &nf), KVB_OK, "num_free_blocks");
    if (nf != model_.freeq.size()) fail(fmt("free blocks %zu, model %zu", nf, model_.freeq.size()));

    // Pending copies not yet run: read destinations through their sources (what kvb_copy_blocks would do).
    std::map<int32_t, std::vector<int64_t>> overlay;
    for (const auto& p : model_.pending) {
      std::vector<int64_t> row(cfg_.bs);
      for (size_t o = 0; o < cfg_.bs; ++o) row[o] = read_slot(overlay, p.first, o);
      overlay[p.second] = row;
    }

    std::vector<int32_t> tab;
    for (const auto& kv : model_.seqs) {
      const int64_t id = kv.first;
      const MSeq& s = kv.second;
      tab.assign(s.table.size() + 1, -8);
      size_t len = 0;
      kvb_status st = kvb_seq_block_table(m_, id, tab.data(), tab.size(), &len);
      expect(st, s.swapped ? KVB_ERR_BAD_STATE : KVB_OK, "block_table");
      if (!s.swapped) {
        tab.resize(len);
        if (tab != s.table)
          fail(fmt("block table of %" PRId64 ": %s, model %s", id, vec_str(tab).c_str(), vec_str(s.table).c_str()));
      }
      kvb_seq_info info;
      kvb_seq_info_init(&info);
      expect(kvb_seq_get_info(m_, id, &info), KVB_OK, "get_info");
      const std::vector<int32_t>& t = s.swapped ? s.host_table : s.table;
      if (info.location != (s.swapped ? KVB_SEQ_SWAPPED_OUT : KVB_SEQ_ON_DEVICE) ||
          info.num_tokens != s.tokens.size() || info.num_computed != s.computed || info.num_cached != s.cached ||
          info.num_blocks != t.size() || info.num_held_blocks != Model::held(t) || info.window_tokens != s.window ||
          info.sink_tokens != s.sink)
        fail(fmt("info of %" PRId64 ": loc %u tokens %" PRIu64 " computed %" PRIu64 " cached %" PRIu64
                 " blocks %" PRIu64 " held %" PRIu64 " window %u sink %u; model loc %d tokens %zu computed %zu "
                 "cached %zu blocks %zu held %zu window %u sink %u",
                 id, info.location, info.num_tokens, info.num_computed, info.num_cached, info.num_blocks,
                 info.num_held_blocks, info.window_tokens, info.sink_tokens, s.swapped, s.tokens.size(), s.computed,
                 s.cached, t.size(), Model::held(t), s.window, s.sink));
      // Data is never lost: every computed token reads back through the table (device or host).
      for (size_t p = 0; p < s.computed; ++p) {
        int32_t b = t[p / cfg_.bs];
        if (b < 0) continue;
        int64_t got = s.swapped ? host_content_[static_cast<size_t>(b) * cfg_.bs + p % cfg_.bs]
                                : read_slot(overlay, b, p % cfg_.bs);
        if (got != s.tokens[p])
          fail(fmt("KV of seq %" PRId64 " token %zu (%s block %d slot %zu) holds %" PRId64 ", want %" PRId64, id, p,
                   s.swapped ? "host" : "device", b, p % cfg_.bs, got, s.tokens[p]));
      }
    }

    // The hash of every block. A BAD_STATE answer costs the library an exception and a message, so for
    // large pools a step checks the blocks the model gives a hash, the blocks in tables and a rotating
    // slice of 32, and every 32nd step (and the last) all of them.
    std::vector<char> want(cfg_.N, 0);
    bool sweep = cfg_.N <= 64 || step_ % 32 == 0 || step_ >= cfg_.steps;
    if (!sweep) {
      for (uint32_t b = 0; b < cfg_.N; ++b) want[b] = model_.blk[b].has_hash;
      for (const auto& kv : model_.seqs)
        for (int32_t b : kv.second.table)
          if (b >= 0) want[static_cast<size_t>(b)] = 1;
      for (uint32_t k = 0; k < 32; ++k) want[(static_cast<uint32_t>(step_) * 32 + k) % cfg_.N] = 1;
    }
    for (uint32_t b = 0; b < cfg_.N; ++b) {
      if (!sweep && !want[b]) continue;
      uint64_t h = 0;
      const MBlock& mb = model_.blk[b];
      kvb_status st = kvb_block_hash(m_, static_cast<int32_t>(b), &h);
      if (mb.has_hash) {
        if (st != KVB_OK || h != mb.hash)
          fail(fmt("block_hash(%u) = %s %016" PRIx64 ", model %016" PRIx64, b, sname(st), h, mb.hash));
      } else if (st != KVB_ERR_BAD_STATE) {
        fail(fmt("block_hash(%u) = %s %016" PRIx64 ", model: no committed full block (BAD_STATE)", b, sname(st), h));
      }
    }

    kvb_stats st;
    kvb_stats_init(&st);
    expect(kvb_get_stats(m_, &st), KVB_OK, "get_stats");
    struct F { const char* name; uint64_t got, want; } fields[] = {
        {"block_size", st.block_size, cfg_.bs},
        {"num_blocks", st.num_blocks, cfg_.N},
        {"free_blocks", st.free_blocks, model_.freeq.size()},
        {"used_blocks", st.used_blocks, cfg_.N - model_.freeq.size()},
        {"cached_free_blocks", st.cached_free_blocks, model_.cached_free()},
        {"num_seqs", st.num_seqs, model_.seqs.size()},
        {"query_tokens", st.query_tokens, model_.query},
        {"hit_tokens", st.hit_tokens, model_.hit},
        {"computed_tokens", st.computed_tokens, model_.computed},
        {"evictions", st.evictions, model_.evictions},
        {"cow_copies", st.cow_copies, model_.cow},
        {"swapped_out_blocks", st.swapped_out_blocks, model_.sw_out},
        {"swapped_in_blocks", st.swapped_in_blocks, model_.sw_in},
        {"num_host_blocks", st.num_host_blocks, cfg_.host},
        {"free_host_blocks", st.free_host_blocks, model_.host_free.size()},
        {"events_dropped", st.events_dropped, 0},
    };
    for (const F& f : fields)
      if (f.got != f.want) fail(fmt("stats.%s = %" PRIu64 ", model %" PRIu64, f.name, f.got, f.want));

    if (kvb_check_invariants(m_) != KVB_OK) fail(fmt("kvb_check_invariants: %s", kvb_last_error()));
  }
};

// ---- driver -------------------------------------------------------------------------------------


int g_seeds = 60;
long g_only_seed = -1;
bool g_verbose = false;

uint64_t seed_of(size_t config_index, long s) { return config_index * 1000003ULL + static_cast<uint64_t>(s); }

bool run_config(size_t ci) {
  const Config& c = kConfigs[ci];
  long nseeds = g_only_seed >= 0 ? 1 : std::max<long>(1, static_cast<long>(g_seeds) * c.seed_weight / 4);
  for (long k = 0; k < nseeds; ++k) {
    long s = g_only_seed >= 0 ? g_only_seed : k;
    Run run(c, seed_of(ci, s), g_verbose);
    try {
      run.go();
    } catch (const Divergence& d) {
      printf("differential %s: seed %ld, step %d: %s\n", c.name, s, run.step(), d.what());
      printf("  reproduce: KVB_DIFF_CONFIG=%s KVB_DIFF_SEED=%ld [KVB_DIFF_VERBOSE=1] <this binary>\n", c.name, s);
      printf("  last operations:\n");
      for (const std::string& h : run.history()) printf("    %s\n", h.c_str());
      printf("  model state:\n");
      run.dump();
      return false;
    }
  }
  return true;
}

void hash_compat() {  // the model's hash is the library's kvb_hash_tokens (and nano-vllm's)
  Rng r(99);
  for (size_t n : {1, 2, 4, 16, 32}) {
    std::vector<int64_t> t(n);
    for (auto& x : t) x = static_cast<int64_t>(r.next());
    uint64_t p = r.next();
    CHECK(kvb_hash_tokens(nullptr, t.data(), n) == model_hash(false, 0, t.data(), n, false, 0));
    CHECK(kvb_hash_tokens(&p, t.data(), n) == model_hash(true, p, t.data(), n, false, 0));
  }
}

}  // namespace

int main() {
  if (const char* e = getenv("KVB_DIFF_SEEDS")) g_seeds = std::max(1, atoi(e));
  if (const char* e = getenv("KVB_DIFF_SEED")) g_only_seed = atol(e);
  if (const char* e = getenv("KVB_DIFF_VERBOSE")) g_verbose = atoi(e) != 0;
  const char* only = getenv("KVB_DIFF_CONFIG");

  RUN_TEST(hash_compat);
  for (size_t ci = 0; ci < sizeof kConfigs / sizeof kConfigs[0]; ++ci) {
    if (only && strcmp(only, kConfigs[ci].name) != 0) continue;
    g_act = Activity{};
    bool ok = run_config(ci);
    printf("     %s: %" PRIu64 " seeds, %" PRIu64 " steps; %" PRIu64 " allocations (%" PRIu64 " out of blocks), %" PRIu64
           " hit tokens, %" PRIu64 " commits, %" PRIu64 " appends, %" PRIu64 " forks, %" PRIu64 " CoW copies, %" PRIu64
           " rollbacks, %" PRIu64 " window releases, %" PRIu64 "/%" PRIu64 " swaps out/in, %" PRIu64 " evictions, %" PRIu64
           " expected errors\n",
           kConfigs[ci].name, g_act.seeds, g_act.steps, g_act.allocs, g_act.alloc_oob, g_act.hit_tokens, g_act.commits,
           g_act.appends, g_act.forks, g_act.cow, g_act.rollbacks, g_act.released, g_act.swaps_out, g_act.swaps_in,
           g_act.evictions, g_act.errors);
    if (ok) kvbt_passed++;
    else kvbt_failed++;
    printf("%s differential_%s\n", ok ? "ok  " : "FAIL", kConfigs[ci].name);
    fflush(stdout);
  }
  TEST_SUMMARY();
}
