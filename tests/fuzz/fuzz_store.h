// The fuzz target's store tier (tests/fuzz/fuzz_capi.cpp): a store registered on host-cache managers
// (kvb_manager_set_store) that keeps, per store key, the content descriptor of the bytes put under it, and
// the failures the input injects: a key removed or its bytes corrupted between lookup and get, gets that
// take several polls, puts refused, a store that vanishes (every callback fails). What it checks:
//   - a put reads a host block that holds committed, cacheable K/V, and one store key never names two
//     different contents (the namespace fold and the whole-history keys keep blocks apart);
//   - a good get writes the stored content into its host block, a failed one writes nothing loadable, so a
//     load of it trips drain_host's check;
//   - store hits (the last blocks of an allocation's hit, counted by store_hit_tokens) are held until their
//     gets resolve; then each block below the sequence's computed count (failed gets cut it, read back with
//     kvb_seq_store_state) must hold the prompt's K/V once the loads have run: nothing wrong is attended.
// The driver settles the store (polls until no get is in flight, then drains) before every operation that
// would run, extend or move a sequence, so the model's status predictions hold; allocate, free, the
// read-only calls and OP_STORE_POLL run with gets in flight. Included only by fuzz_capi.cpp.
#pragma once
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <map>
#include <utility>
#include <vector>

#include "fuzz_harness.h"
#include "fuzz_model.h"
#include "kvblock.h"

namespace kvbfuzz {

struct FuzzStore {
  Model* md = nullptr;
  bool on = false;
  bool vanished = false, refuse_puts = false;
  int delay = 0;  // polls the next gets wait
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> blocks;  // store key -> descriptor put
  std::map<std::pair<uint64_t, uint64_t>, bool> corrupt;     // keys whose bytes no longer check out
  struct Get {
    kvb_store_key key;
    int32_t host;
    uint64_t ticket;
    int polls_left;
  };
  std::vector<Get> gets;
  std::vector<kvb_store_key> last_lookup;
  // Store hits not yet checked: (sequence, block index, device block, the prompt's descriptor).
  struct Pending {
    int64_t seq;
    uint32_t index;
    int32_t device;
    uint64_t want;
  };
  std::vector<Pending> pending;

  static std::pair<uint64_t, uint64_t> k(const kvb_store_key& key) { return {key.lo, key.hi}; }

  static int lookup(void* u, const kvb_store_key* keys, size_t n, size_t* found) {
    FuzzStore& s = *static_cast<FuzzStore*>(u);
    if (s.vanished) return -1;
    s.last_lookup.assign(keys, keys + n);
    size_t i = 0;
    while (i < n && s.blocks.count(k(keys[i]))) ++i;
    *found = i;
    return 0;
  }
  static int put(void* u, const kvb_store_key* key, int32_t host) {
    FuzzStore& s = *static_cast<FuzzStore*>(u);
    REQUIRE(host >= 0 && host < static_cast<int32_t>(s.md->nhost), "store put of host block %d", host);
    const uint64_t d = s.md->host_kv[host];
    REQUIRE(d != 0, "store put of host block %d, which holds no committed cacheable K/V", host);
    if (s.vanished || s.refuse_puts) return -1;
    auto it = s.blocks.find(k(*key));
    REQUIRE(it == s.blocks.end() || it->second == d || s.corrupt.count(k(*key)),
            "store key %016" PRIx64 "%016" PRIx64 " put with content %" PRIx64 ", it holds %" PRIx64, key->hi, key->lo,
            d, it == s.blocks.end() ? 0 : it->second);
    s.blocks[k(*key)] = d;
    s.corrupt.erase(k(*key));
    return 0;
  }
  static int get(void* u, const kvb_store_key* key, int32_t host, uint64_t ticket) {
    FuzzStore& s = *static_cast<FuzzStore*>(u);
    REQUIRE(host >= 0 && host < static_cast<int32_t>(s.md->nhost), "store get into host block %d", host);
    if (s.vanished) return -1;
    s.md->host_kv[host] = 0;  // being filled: nothing loadable until the get completes good
    s.gets.push_back(Get{*key, host, ticket, s.delay});
    return 0;
  }
  static int poll(void* u, kvb_store_completion* done, size_t cap, size_t* num_done) {
    FuzzStore& s = *static_cast<FuzzStore*>(u);
    if (s.vanished) {
      s.gets.clear();  // kvblock.h: the manager fails them all and the store writes into none of them
      return -1;
    }
    size_t n = 0;
    for (size_t i = 0; i < s.gets.size() && n < cap;) {
      Get& g = s.gets[i];
      if (g.polls_left-- > 0) {
        ++i;
        continue;
      }
      auto it = s.blocks.find(k(g.key));
      const bool good = it != s.blocks.end() && !s.corrupt.count(k(g.key));
      s.md->host_kv[g.host] = good ? it->second : 0;
      done[n].ticket = g.ticket;
      done[n].status = good ? 0 : -1;
      done[n].reserved = 0;
      ++n;
      s.gets.erase(s.gets.begin() + static_cast<std::ptrdiff_t>(i));
    }
    *num_done = n;
    return 0;
  }
};

inline FuzzStore g_store;

// Registers the store on a host-cache manager (fuzz_config.h decides which inputs get one).
inline void store_register(kvb_manager* m, Model& md, uint8_t how) {
  g_store = FuzzStore();
  g_store.md = &md;
  kvb_store t;
  kvb_store_init(&t);
  t.flags = (how & 1) ? KVB_STORE_WRITE_THROUGH : 0;
  t.user = &g_store;
  t.lookup = FuzzStore::lookup;
  t.put = FuzzStore::put;
  t.get = FuzzStore::get;
  t.poll = FuzzStore::poll;
  kvb_store_namespace ns;
  kvb_store_namespace_init(&ns);
  ns.block_size = md.bs;
  ns.num_layers = ns.num_kv_heads = ns.head_dim = 1;
  ns.model_id = how >> 1;
  kvb_status s = kvb_manager_set_store(m, &t, &ns);
  REQUIRE(s == KVB_OK, "set_store: %s (%s)", kvb_status_string(s), kvb_last_error());
  g_store.on = true;
}

// After a successful allocate of q (hit tokens cached): its store hits, the last store_hit_tokens / bs
// blocks of the hit, wait for their gets; they are not the content their device blocks can be matched on.
inline void store_allocated(kvb_manager* m, Model& md, int64_t id, MSeq& q, uint64_t hit, uint64_t store_hit_tokens,
                            const std::vector<int32_t>& table) {
  const uint64_t nstore = store_hit_tokens / md.bs;
  REQUIRE(store_hit_tokens % md.bs == 0 && nstore <= hit / md.bs, "allocate: %" PRIu64 " store hit tokens of %" PRIu64,
          store_hit_tokens, hit);
  const std::vector<uint64_t> d = md.descriptors(q, 0);
  for (uint64_t i = hit / md.bs - nstore; i < hit / md.bs; ++i) {
    g_store.pending.push_back(FuzzStore::Pending{id, static_cast<uint32_t>(i), table[i], d[i]});
    md.content[table[i]] = 0;
  }
  size_t computed = 0, filling = 0;
  REQUIRE(kvb_seq_store_state(m, id, &computed, &filling) == KVB_OK, "store_state after allocate");
  REQUIRE(computed <= hit && computed % md.bs == 0, "allocate: computed %zu of %" PRIu64 " cached", computed, hit);
  q.computed = computed;  // a get refused at once already cut it
}

// One kvb_store_poll; then every sequence's computed count from kvb_seq_store_state (failures cut it).
// A sequence whose gets all ended has its good store blocks indexed (other prompts may hit them now): the
// model's content of those blocks is the prompt's, which store_settle checks once their loads have run.
inline void store_poll_once(kvb_manager* m, Model& md) {
  size_t filling = 0;
  kvb_status s = kvb_store_poll(m, &filling);
  REQUIRE(s == KVB_OK, "store_poll: %s", kvb_status_string(s));
  REQUIRE(filling == g_store.gets.size(), "store_poll: %zu gets in flight, the store holds %zu", filling,
          g_store.gets.size());
  for (auto& e : md.seqs) {
    if (e.second.swapped) continue;
    size_t computed = 0, f = 0;
    REQUIRE(kvb_seq_store_state(m, e.first, &computed, &f) == KVB_OK, "store_state");
    REQUIRE(computed == e.second.computed || (computed < e.second.computed && computed % md.bs == 0),
            "seq %" PRId64 ": store_state says %zu computed, the model %" PRIu64, e.first, computed, e.second.computed);
    e.second.computed = computed;
    if (f) continue;
    for (const FuzzStore::Pending& p : g_store.pending)
      if (p.seq == e.first && static_cast<uint64_t>(p.index) * md.bs < computed) md.content[p.device] = p.want;
  }
}

// Polls until no get is in flight, runs the loads, and checks every resolved store hit below its
// sequence's computed count holds the prompt's K/V (the others are recomputed: their blocks are new).
inline void store_settle(kvb_manager* m, Model& md) {
  if (!g_store.on) return;
  for (int i = 0; i < 64; ++i) {
    store_poll_once(m, md);
    if (g_store.gets.empty()) break;
  }
  REQUIRE(g_store.gets.empty(), "store: gets still in flight after 64 polls");
  drain_host_all(m, md);
  for (const FuzzStore::Pending& p : g_store.pending) {
    auto it = md.seqs.find(p.seq);
    if (it == md.seqs.end() || it->second.swapped) continue;  // freed (its blocks went back)
    const std::vector<int32_t> t = table_of(m, p.seq);
    if (p.index >= t.size() || t[p.index] != p.device) continue;  // the sequence was freed and the id reused
    if (static_cast<uint64_t>(p.index) * md.bs < it->second.computed) {
      REQUIRE(md.kv[p.device] == p.want, "seq %" PRId64 ": store hit block %u (device %d) is computed but its K/V "
              "is not the prompt's", p.seq, p.index, p.device);
      md.content[p.device] = p.want;
    }
  }
  g_store.pending.clear();
}

// A sequence freed: its store hits are no longer checked (its id may come back with other blocks).
inline void store_forget(int64_t id) {
  std::vector<FuzzStore::Pending>& p = g_store.pending;
  for (size_t i = 0; i < p.size();)
    if (p[i].seq == id) {
      p[i] = p.back();
      p.pop_back();
    } else {
      ++i;
    }
}

// OP_STORE_POLL: the input injects a failure, then one poll (gets may stay in flight).
inline void store_op(kvb_manager* m, Model& md, Reader& r, bool trace) {
  if (!g_store.on) return;
  const uint8_t b = r.u8();
  if ((b & 3) == 1 && !g_store.last_lookup.empty()) {  // a key of the last lookup is gone
    const kvb_store_key& key = g_store.last_lookup[r.u8() % g_store.last_lookup.size()];
    g_store.blocks.erase(FuzzStore::k(key));
  } else if ((b & 3) == 2 && !g_store.last_lookup.empty()) {  // ... or its bytes are corrupted
    const kvb_store_key& key = g_store.last_lookup[r.u8() % g_store.last_lookup.size()];
    if (g_store.blocks.count(FuzzStore::k(key))) g_store.corrupt[FuzzStore::k(key)] = true;
  }
  if (b & 4) g_store.refuse_puts = !g_store.refuse_puts;
  if ((b & 0x18) == 0x18) g_store.vanished = !g_store.vanished;
  g_store.delay = (b >> 5) & 3;
  if (trace)
    std::fprintf(stderr, "  store: fault %u, refuse puts %d, vanished %d, delay %d, %zu gets in flight\n", b & 3,
                 g_store.refuse_puts, g_store.vanished, g_store.delay, g_store.gets.size());
  store_poll_once(m, md);
}

}  // namespace kvbfuzz
