// The fuzz target's model of the manager (tests/fuzz/fuzz_capi.cpp): per sequence its tokens, computed
// count and options; per device block the content descriptor of its committed K/V, and with the host
// cache the K/V store the engine keeps. Also what one step of the run works on (Step), whose op handlers
// are in fuzz_ops_*.h. Included only by fuzz_capi.cpp.
#pragma once
#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <vector>

#include "fuzz_harness.h"
#include "kvblock.h"

namespace kvbfuzz {

inline uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h *= 0xbf58476d1ce4e5b9ULL;
  return h ^ (h >> 29);
}

// A sliding window (the per-sequence one without groups, a group's spec with groups); off = full attention.
struct Window {
  bool on = false;
  uint32_t tokens = 0, sinks = 0;
};

// kvblock.h's window rule, block by block: with `computed` tokens computed, is block i still needed by a
// coming query (positions >= computed attend back `tokens`), as a sink, or as the last computed block?
inline bool window_keeps(const Window& w, uint32_t bs, uint64_t computed, uint32_t i) {
  if (!w.on || computed == 0) return true;
  if (i == (computed - 1) / bs) return true;
  if (static_cast<uint64_t>(i) * bs < w.sinks) return true;
  const uint64_t first_needed = computed + 1 > w.tokens ? computed + 1 - w.tokens : 0;
  return static_cast<uint64_t>(i + 1) * bs > first_needed;
}

struct MSeq {
  std::vector<int64_t> toks;
  uint64_t computed = 0;
  bool swapped = false;
  bool has_salt = false;
  uint64_t salt = 0;
  std::map<uint32_t, uint64_t> extra;
  uint32_t window = 0, sink = 0;  // as kvb_seq_info reports them (group 0's with groups)
  // Per block table (one per group), the block indices the window released. Releases accumulate (a
  // rollback of committed tokens brings none back), so the model replays each release point.
  std::vector<std::set<uint32_t>> released;
};

struct Model {
  uint32_t bs = 16, nblocks = 0, nhost = 0;
  bool noncache7 = false;
  bool host_cache = false;
  std::vector<Window> groups;  // the config's KV cache groups; empty: none (one table, per-sequence windows)
  std::map<int64_t, MSeq> seqs;
  // Per device block: descriptor of the committed content (of its group: see descriptors), 0 = none.
  std::vector<uint64_t> content;
  // Host cache: the K/V the engine's store holds (descriptors) per device and host block, and host hits
  // not yet checked (device block, descriptor the prompt needs): their loads are pending.
  std::vector<uint64_t> kv, host_kv;
  std::vector<std::pair<int32_t, uint64_t>> unverified;
  // Events: the (medium, group, public hash) set the drained events describe (kvblock.h: per medium and
  // group each hash alternates STORED, REMOVED; ALL_CLEARED empties both media). Unknown once an event
  // was dropped, or drained without its group from a manager with several groups.
  bool events_known = true;
  std::set<std::tuple<uint32_t, uint32_t, uint64_t>> stored_hashes;

  uint32_t num_tables() const { return groups.empty() ? 1 : static_cast<uint32_t>(groups.size()); }
  Window window_of(const MSeq& q, uint32_t g) const {
    if (!groups.empty()) return groups[g];
    Window w;
    w.on = q.window > 0;
    w.tokens = q.window;
    w.sinks = q.sink;
    return w;
  }
  // A release point (allocate, commit, fork, set_window): every block the rule no longer needs goes.
  void release(MSeq& q) const {
    q.released.resize(num_tables());
    const uint32_t nb = static_cast<uint32_t>((q.toks.size() + bs - 1) / bs);
    for (uint32_t g = 0; g < num_tables(); ++g)
      for (uint32_t i = 0; i < nb; ++i)
        if (!window_keeps(window_of(q, g), bs, q.computed, i)) q.released[g].insert(i);
  }
  // Would a rollback or fork_at leaving len tokens, `computed` of them computed, need a block that a
  // window released in any group: its last block, or one the next query (at computed) attends?
  bool needs_released(const MSeq& q, uint64_t len, uint64_t computed) const {
    const uint32_t nb = static_cast<uint32_t>((len + bs - 1) / bs);
    for (uint32_t g = 0; g < q.released.size(); ++g) {
      const Window w = window_of(q, g);
      uint64_t first = nb - 1;
      if (w.on && w.tokens > 0) first = std::min<uint64_t>(first, (computed + 1 > w.tokens ? computed + 1 - w.tokens : 0) / bs);
      for (uint64_t i = first; i < nb; ++i)
        if (q.released[g].count(static_cast<uint32_t>(i))) return true;
    }
    return false;
  }

  // q commits up to `computed` tokens; `tables` were read before the call (a window may release the
  // blocks this very commit completes): the blocks that became full hold q's K/V of their group.
  void commit(MSeq& q, const std::vector<std::vector<int32_t>>& tables, uint64_t computed) {
    const uint64_t old = q.computed;
    q.computed = computed;
    for (uint32_t g = 0; g < tables.size(); ++g) {
      const std::vector<uint64_t> d = descriptors(q, g);
      const std::vector<int32_t>& t = tables[g];
      for (uint64_t i = old / bs; i < computed / bs; ++i) {
        if (t[i] >= 0) kv[t[i]] = d[i];
        if (t[i] >= 0 && d[i]) content[t[i]] = d[i];
      }
    }
    release(q);
  }
  // q's tables after an append of tokens not yet in q.toks: new or copied blocks, and the partial last
  // block written in place, hold no committed K/V.
  void appended(const MSeq& q, const std::vector<std::vector<int32_t>>& tables) {
    for (const std::vector<int32_t>& t : tables)
      for (size_t i = q.toks.size() / bs; i < t.size(); ++i)
        if (t[i] >= 0) content[t[i]] = 0;
  }

  bool cacheable_block(const std::vector<int64_t>& t, uint32_t i, bool has_extra) const {
    if (has_extra || !noncache7) return true;
    for (uint32_t k = 0; k < bs; ++k)
      if (t[static_cast<size_t>(i) * bs + k] == 7) return false;
    return true;
  }
  // Descriptors of the full blocks of t in group g (chain: salt, tokens, extra keys, and the group, so
  // that a block holding another group's K/V never matches); 0 from the first block that cannot be
  // cached on.
  std::vector<uint64_t> descriptors(const std::vector<int64_t>& t, bool has_salt, uint64_t salt,
                                    const std::map<uint32_t, uint64_t>& extra, uint32_t g = 0) const {
    std::vector<uint64_t> d;
    uint64_t h = mix(mix(1, has_salt), has_salt ? salt : 0);
    bool ok = true;
    for (uint32_t i = 0; (static_cast<size_t>(i) + 1) * bs <= t.size(); ++i) {
      auto e = extra.find(i);
      bool has_extra = e != extra.end();
      ok = ok && cacheable_block(t, i, has_extra);
      for (uint32_t k = 0; k < bs; ++k) h = mix(h, static_cast<uint64_t>(t[static_cast<size_t>(i) * bs + k]));
      h = mix(mix(h, has_extra), has_extra ? e->second : 0);
      d.push_back(ok ? ((g ? mix(h, 0x67000 + g) : h) | 1) : 0);
    }
    return d;
  }
  std::vector<uint64_t> descriptors(const MSeq& q, uint32_t g) const {
    return descriptors(q.toks, q.has_salt, q.salt, q.extra, g);
  }
};

inline std::vector<int32_t> table_of(kvb_manager* m, int64_t id, uint32_t g = 0) {
  std::vector<int32_t> t(1024);
  size_t len = 0;
  kvb_status s = kvb_seq_block_table_group(m, id, g, t.data(), t.size(), &len);
  REQUIRE(s == KVB_OK, "block table %u of live seq %" PRId64 ": %s", g, id, kvb_status_string(s));
  t.resize(len);
  return t;
}

// Every table of a sequence on device, one per group.
inline std::vector<std::vector<int32_t>> tables_of(kvb_manager* m, const Model& md, int64_t id) {
  std::vector<std::vector<int32_t>> t;
  for (uint32_t g = 0; g < md.num_tables(); ++g) t.push_back(table_of(m, id, g));
  return t;
}

inline void check_info(kvb_manager* m, const Model& md, int64_t id) {
  const MSeq& q = md.seqs.at(id);
  kvb_seq_info info;
  kvb_seq_info_init(&info);
  kvb_status s = kvb_seq_get_info(m, id, &info);
  REQUIRE(s == KVB_OK, "get_info of live seq %" PRId64 ": %s", id, kvb_status_string(s));
  REQUIRE(info.num_tokens == q.toks.size(), "seq %" PRId64 ": %" PRIu64 " tokens, model %zu", id, info.num_tokens,
          q.toks.size());
  REQUIRE(info.num_computed == q.computed, "seq %" PRId64 ": %" PRIu64 " computed, model %" PRIu64, id,
          info.num_computed, q.computed);
  REQUIRE(info.location == (q.swapped ? KVB_SEQ_SWAPPED_OUT : KVB_SEQ_ON_DEVICE), "seq %" PRId64 ": location", id);
  REQUIRE(info.num_blocks == (q.toks.size() + md.bs - 1) / md.bs, "seq %" PRId64 ": %" PRIu64 " blocks", id,
          info.num_blocks);
  REQUIRE(info.window_tokens == q.window && info.sink_tokens == q.sink, "seq %" PRId64 ": window %u sinks %u, model %u %u",
          id, info.window_tokens, info.sink_tokens, q.window, q.sink);
  if (q.swapped) return;
  uint64_t held = 0;
  for (uint32_t g = 0; g < md.num_tables(); ++g) {
    std::vector<int32_t> t = table_of(m, id, g);
    REQUIRE(t.size() == info.num_blocks, "seq %" PRId64 " group %u: table length %zu", id, g, t.size());
    REQUIRE(!t.empty() && t.back() >= 0, "seq %" PRId64 " group %u: last block released", id, g);
    for (uint32_t i = 0; i < t.size(); ++i) {
      REQUIRE(t[i] >= -1 && t[i] < static_cast<int32_t>(md.nblocks), "seq %" PRId64 ": block %d", id, t[i]);
      // Exactly the blocks the window rule released at some release point read -1 (full groups: none).
      REQUIRE((t[i] < 0) == (q.released.at(g).count(i) > 0),
              "seq %" PRId64 " group %u block index %u: %s, the window rule says %s (%zu tokens, %" PRIu64 " computed)",
              id, g, i, t[i] < 0 ? "released" : "held", q.released.at(g).count(i) ? "released" : "held", q.toks.size(),
              q.computed);
      held += t[i] >= 0;
    }
  }
  REQUIRE(info.num_held_blocks == held, "seq %" PRId64 ": %" PRIu64 " held blocks, the tables hold %" PRIu64, id,
          info.num_held_blocks, held);
}

// A block id belongs to one group at a time and sits at one block index of that group's tables (shared
// prefixes and forks share a block at the same index): checked over every sequence on device.
inline void check_block_owners(kvb_manager* m, const Model& md) {
  std::map<int32_t, std::pair<uint32_t, uint32_t>> owner;  // block -> (group, block index)
  for (const auto& e : md.seqs) {
    if (e.second.swapped) continue;
    for (uint32_t g = 0; g < md.num_tables(); ++g) {
      std::vector<int32_t> t = table_of(m, e.first, g);
      for (uint32_t i = 0; i < t.size(); ++i) {
        if (t[i] < 0) continue;
        auto it = owner.emplace(t[i], std::make_pair(g, i)).first;
        REQUIRE(it->second == std::make_pair(g, i), "block %d is at group %u index %u of seq %" PRId64
                " and at group %u index %u of another table", t[i], g, i, e.first, it->second.first, it->second.second);
      }
    }
  }
}

// Drains the host cache's transfers with the given capacities and, when that succeeds, runs them on the
// model's KV store: offloads, then loads (kvblock.h's order). Every pair moves committed content; every
// host hit of an earlier allocate now holds the prompt's K/V.
inline kvb_status drain_host(kvb_manager* m, Model& md, size_t off_cap, size_t load_cap, bool null_off, bool null_counts) {
  auto off = std::unique_ptr<int32_t[]>(new int32_t[2 * off_cap + 1]());
  auto ld = std::unique_ptr<int32_t[]>(new int32_t[2 * load_cap + 1]());
  size_t no = SIZE_MAX, nl = SIZE_MAX;
  kvb_status s = kvb_drain_host_transfers(m, null_off ? nullptr : off.get(), off_cap, null_counts ? nullptr : &no,
                                          ld.get(), load_cap, &nl);
  if (s != KVB_OK) return s;
  REQUIRE(md.host_cache || (no == 0 && nl == 0), "drain_host_transfers: %zu offloads, %zu loads without a host cache",
          no, nl);
  REQUIRE(no <= off_cap && nl <= load_cap, "drain_host_transfers: counts beyond capacity");
  for (size_t i = 0; i < no; ++i) {
    const int32_t b = off[2 * i], h = off[2 * i + 1];
    REQUIRE(b >= 0 && b < static_cast<int32_t>(md.nblocks) && h >= 0 && h < static_cast<int32_t>(md.nhost),
            "offload pair (%d,%d)", b, h);
    REQUIRE(md.kv[b] != 0, "offload of device block %d, which holds no committed cacheable K/V", b);
    md.host_kv[h] = md.kv[b];
  }
  for (size_t i = 0; i < nl; ++i) {
    const int32_t h = ld[2 * i], d = ld[2 * i + 1];
    REQUIRE(d >= 0 && d < static_cast<int32_t>(md.nblocks) && h >= 0 && h < static_cast<int32_t>(md.nhost),
            "load pair (%d,%d)", h, d);
    REQUIRE(md.host_kv[h] != 0, "load from host block %d, which holds no committed cacheable K/V", h);
    // The loaded block is indexed on the device with that content, also where the sequence's window
    // released it at once (allocate could not see its id, and a later prompt can hit it).
    md.kv[d] = md.content[d] = md.host_kv[h];
  }
  for (const auto& u : md.unverified) {
    bool loaded = false;
    for (size_t i = 0; i < nl; ++i) loaded = loaded || ld[2 * i + 1] == u.first;
    REQUIRE(loaded, "hit on device block %d whose K/V is not the prompt's, and no load into it", u.first);
    REQUIRE(md.kv[u.first] == u.second, "host hit on device block %d: after the loads its K/V is not the prompt's",
            u.first);
  }
  md.unverified.clear();
  return s;
}

// The engine runs every pending transfer before the step writes K/V (commit) or a swap-in overwrites blocks.
inline void drain_host_all(kvb_manager* m, Model& md) {
  if (!md.host_cache) return;
  kvb_status s = drain_host(m, md, 4096, 4096, false, false);
  REQUIRE(s == KVB_OK, "drain_host_transfers: %s", kvb_status_string(s));
}

// ---- decoding helpers -----------------------------------------------------------------------------

inline int64_t pick_id(Reader& r) {
  uint8_t b = r.u8();
  if (b < 240) return b % 6;
  switch (b % 4) {
    case 0: return -1;
    case 1: return INT64_MIN;
    case 2: return INT64_MAX;
    default: return static_cast<int64_t>(r.u64());
  }
}

inline size_t pick_len(Reader& r, const Model& md) {
  uint8_t b = r.u8();
  if (b >= 250) return (b & 1) ? 0 : static_cast<size_t>(md.nblocks + 1) * md.bs;  // empty or too long
  return b % (md.bs * 5 + 3);
}

inline void make_tokens(Reader& r, std::vector<int64_t>& t, size_t n) {
  // Prompts share prefixes often: a prefix of one of two fixed streams, then a few random tokens.
  uint8_t mode = r.u8();
  size_t shared = mode & 0x80 ? n : (mode & 0x40 ? n / 2 : 0);
  t.resize(n);
  for (size_t i = 0; i < n; ++i)
    t[i] = i < shared ? static_cast<int64_t>((i * 5 + (mode & 1)) % 11) : static_cast<int64_t>(r.u8() % 9);
}

// One step of the run: the call an op makes, decoded from the input, its status, and what the driver
// checks after it. The op handlers (fuzz_ops_*.h) predict the status where the model can and update the
// model where the call succeeded.
struct Step {
  kvb_manager* m;
  Model& md;
  Reader& r;
  std::vector<int64_t>& toks;  // the last decoded tokens (NULL-manager calls reuse them)
  const bool trace;
  const uint32_t bs;
  const char* what;             // the call, as the trace and failure messages name it
  kvb_status s = KVB_OK;
  bool predicted = false;       // the model checked the status itself

  // fuzz_ops_seq.h: the sequence lifecycle.
  void allocate(bool can);
  void commit();
  void append(bool can);
  void free_seq();
  void fork();
  void rollback();
  void set_window();
  void extra_key();
  // fuzz_ops_io.h: what the engine reads and drains, swapping, stats and control.
  void block_table();
  void block_hash();
  void drain_copies();
  void swap(bool in);
  void batch();
  void stats();
  void events();
  void reset();
  void info();
  void num_free();
  void null_manager();
  void drain_host_transfers();
  // fuzz_ops_tree.h: a token tree appended, checked, refusing plain calls, committed.
  void tree();
};

}  // namespace kvbfuzz
