// KV cache groups: random operations on managers with several groups (full and window, with
// sinks, one shared pool) against a simple model, with kvb_check_invariants after every step. The model
// keeps each sequence's tokens and computed count, and the set of (medium, group, public hash) the device
// and host indexes hold as the group events report it. Some managers have a host tier for swapping, some
// also the host prefix cache (KVB_CONFIG_HOST_CACHE). After every step:
//   - every group's table has one entry per block; full groups hold every block; window groups hold
//     exactly the blocks a coming query can reach (positions p >= num_computed attend back window_tokens,
//     plus the sinks and the block of the last computed token) and nothing before that;
//   - every held computed full block carries the public hash of the model's tokens (so hits and copies
//     put the right content in the right group); no block is in two groups;
//   - a failed call changed nothing (every table of every group, the infos and the free count);
//   - allocate reports the hit that the rule of kvblock.h gives on the model's cached set (a needed block
//     may be on the device or on the host);
//   - swapping moves every group's held blocks: the pairs list group 0's held blocks then group 1's ...,
//     swap-in reads back the host blocks swap-out wrote, in the same order, and the tables come back
//     with the same released slots and the same content (hashes).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "harness.h"
#include "splitmix.h"

namespace {

struct Rng : SplitMix64 {
  explicit Rng(uint64_t seed) : SplitMix64(seed, 17) {}
  uint32_t below(uint32_t n) { return static_cast<uint32_t>(next() % n); }
};

struct Spec {
  bool window;
  uint32_t w, s;
};

struct MSeq {
  std::vector<int64_t> tokens;
  uint64_t computed = 0;
  // Per group, the block indices the window released. Releases accumulate (a rollback of committed
  // tokens brings none back), so the model replays each release rather than deriving it from the state.
  std::vector<std::set<uint32_t>> rel;
  bool swapped = false;
  std::vector<int32_t> host;  // while swapped: the host blocks swap-out wrote, in pair order
};

struct World {
  kvb_manager* m = nullptr;
  uint32_t bs = 0;
  std::vector<Spec> specs;
  std::map<int64_t, MSeq> seqs;
  std::set<std::tuple<uint32_t, uint32_t, uint64_t>> cached;  // (medium, group, public hash)
  bool host_cache = false;
  uint32_t host_blocks = 0;
  uint64_t hits = 0, window_cuts = 0, failures = 0, swaps = 0;
};

uint64_t chain_hash(const std::vector<int64_t>& t, uint32_t bs, uint32_t upto_block) {
  uint64_t h = 0;
  for (uint32_t i = 0; i <= upto_block; ++i) h = kvb_hash_tokens(i ? &h : nullptr, t.data() + static_cast<size_t>(i) * bs, bs);
  return h;
}

void drain(World& w) {
  kvb_event ev[32];
  uint32_t grp[32];
  static int64_t toks[32 * 8];
  size_t n;
  do {
    CHECK_OK(kvb_drain_events_group(w.m, ev, grp, 32, toks, 32 * 8, &n, nullptr));
    for (size_t i = 0; i < n; ++i) {
      auto key = std::make_tuple(ev[i].medium, grp[i], ev[i].block_hash);
      CHECK(ev[i].medium == KVB_MEDIUM_DEVICE || (w.host_cache && ev[i].medium == KVB_MEDIUM_HOST));
      CHECK(grp[i] < w.specs.size());
      if (ev[i].type == KVB_EVENT_BLOCK_STORED) CHECK(w.cached.insert(key).second);
      else if (ev[i].type == KVB_EVENT_BLOCK_REMOVED) CHECK(w.cached.erase(key) == 1);
      else w.cached.clear();
    }
  } while (n > 0);
}

std::vector<int32_t> table(World& w, int64_t id, uint32_t g) {
  std::vector<int32_t> t(256);
  size_t len = 0;
  CHECK_OK(kvb_seq_block_table_group(w.m, id, g, t.data(), t.size(), &len));
  t.resize(len);
  return t;
}

// The held blocks of every group, group 0's first (the order of swap pairs).
std::vector<int32_t> held_blocks(World& w, int64_t id) {
  std::vector<int32_t> out;
  for (uint32_t g = 0; g < w.specs.size(); ++g)
    for (int32_t b : table(w, id, g))
      if (b >= 0) out.push_back(b);
  return out;
}

// Everything a failed call must leave unchanged.
std::vector<int64_t> snapshot(World& w) {
  std::vector<int64_t> out;
  size_t f = 0;
  CHECK_OK(kvb_num_free_blocks(w.m, &f));
  out.push_back(static_cast<int64_t>(f));
  for (auto& e : w.seqs) {
    kvb_seq_info info;
    kvb_seq_info_init(&info);
    CHECK_OK(kvb_seq_get_info(w.m, e.first, &info));
    out.push_back(static_cast<int64_t>(info.num_tokens));
    out.push_back(static_cast<int64_t>(info.num_computed));
    out.push_back(static_cast<int64_t>(info.num_held_blocks));
    out.push_back(static_cast<int64_t>(info.location));
    if (!e.second.swapped)
      for (uint32_t g = 0; g < w.specs.size(); ++g)
        for (int32_t b : table(w, e.first, g)) out.push_back(b);
  }
  return out;
}

// The window rule of kvblock.h (kvb_seq_set_window), written out per block: with `computed` tokens
// computed, block i is still needed if a coming query (at positions >= computed) can reach it.
bool window_keeps(const Spec& sp, uint32_t bs, uint64_t computed, uint32_t i) {
  if (!sp.window || computed == 0) return true;
  if (i == (computed - 1) / bs) return true;                 // the block of the last computed token
  if (static_cast<uint64_t>(i) * bs < sp.s) return true;     // holds a sink token
  const uint64_t first_needed = computed + 1 > sp.w ? computed + 1 - sp.w : 0;
  return static_cast<uint64_t>(i + 1) * bs > first_needed;   // not wholly before the coming window
}

// A release point (allocate, commit, fork): every block the rule no longer needs is released.
void release(const World& w, MSeq& s) {
  s.rel.resize(w.specs.size());
  const uint32_t nb = static_cast<uint32_t>((s.tokens.size() + w.bs - 1) / w.bs);
  for (uint32_t g = 0; g < w.specs.size(); ++g)
    for (uint32_t i = 0; i < nb; ++i)
      if (!window_keeps(w.specs[g], w.bs, s.computed, i)) s.rel[g].insert(i);
}

void check_all(World& w) {
  CHECK_OK(kvb_check_invariants(w.m));
  drain(w);
  std::map<int32_t, uint32_t> group_of;
  for (auto& e : w.seqs) {
    const MSeq& s = e.second;
    kvb_seq_info info;
    kvb_seq_info_init(&info);
    CHECK_OK(kvb_seq_get_info(w.m, e.first, &info));
    CHECK(info.num_tokens == s.tokens.size() && info.num_computed == s.computed);
    CHECK(info.location == (s.swapped ? KVB_SEQ_SWAPPED_OUT : KVB_SEQ_ON_DEVICE));
    const uint32_t nb = static_cast<uint32_t>((s.tokens.size() + w.bs - 1) / w.bs);
    uint64_t held = 0;
    if (s.swapped) {
      for (uint32_t g = 0; g < w.specs.size(); ++g) held += nb - s.rel[g].size();
      CHECK(info.num_held_blocks == held && s.host.size() == held);
      int32_t t[4];
      size_t len = 0;
      CHECK(kvb_seq_block_table_group(w.m, e.first, 0, t, 4, &len) == KVB_ERR_BAD_STATE);
      continue;
    }
    for (uint32_t g = 0; g < w.specs.size(); ++g) {
      std::vector<int32_t> t = table(w, e.first, g);
      CHECK(t.size() == nb);
      for (uint32_t i = 0; i < t.size(); ++i) {
        const bool keep = !s.rel[g].count(i);
        if ((t[i] >= 0) != keep) {
          fprintf(stderr, "  seq %lld group %u block %u: held %d, rule says %d (tokens %zu computed %llu)\n",
                  static_cast<long long>(e.first), g, i, t[i] >= 0, keep, s.tokens.size(),
                  static_cast<unsigned long long>(s.computed));
          CHECK(false);
        }
        if (t[i] < 0) continue;
        ++held;
        auto it = group_of.emplace(t[i], g).first;
        CHECK(it->second == g);
        if (static_cast<uint64_t>(i + 1) * w.bs <= s.computed) {
          uint64_t h = 0;
          CHECK_OK(kvb_block_hash(w.m, t[i], &h));
          CHECK(h == chain_hash(s.tokens, w.bs, i));
        }
      }
    }
    CHECK(info.num_held_blocks == held);
  }
}

uint32_t expected_hit(World& w, const std::vector<int64_t>& p) {
  const uint32_t nb = static_cast<uint32_t>((p.size() + w.bs - 1) / w.bs);
  const uint32_t M = nb - 1;
  std::vector<uint64_t> h(M);
  for (uint32_t i = 0; i < M; ++i) h[i] = kvb_hash_tokens(i ? &h[i - 1] : nullptr, p.data() + static_cast<size_t>(i) * w.bs, w.bs);
  for (uint32_t k = M; k > 0; --k) {
    bool ok = true;
    for (uint32_t g = 0; g < w.specs.size() && ok; ++g)
      for (uint32_t i = 0; i < k && ok; ++i) {
        // Needed: every block for a full group; for a window group what it keeps with k blocks computed.
        bool need = window_keeps(w.specs[g], w.bs, static_cast<uint64_t>(k) * w.bs, i);
        if (need && !w.cached.count(std::make_tuple(uint32_t{KVB_MEDIUM_DEVICE}, g, h[i])) &&
            !w.cached.count(std::make_tuple(uint32_t{KVB_MEDIUM_HOST}, g, h[i])))
          ok = false;
      }
    if (ok) return k;
  }
  return 0;
}

void run(uint64_t seed, int steps) {
  Rng r(seed);
  World w;
  static const uint32_t kBs[] = {1, 2, 4};
  w.bs = kBs[r.below(3)];
  const uint32_t ng = 1 + r.below(3);
  for (uint32_t g = 0; g < ng; ++g) {
    Spec sp{r.below(3) != 0 || g + 1 == ng, 0, 0};
    if (g == 0 && ng > 1) sp.window = r.below(2) != 0;
    if (sp.window) {
      sp.w = 1 + r.below(3 * w.bs + 2);
      sp.s = r.below(3) == 0 ? r.below(2 * w.bs + 1) : 0;
    }
    w.specs.push_back(sp);
  }
  std::vector<kvb_group_spec> gs(ng);
  for (uint32_t g = 0; g < ng; ++g) {
    kvb_group_spec_init(&gs[g]);
    gs[g].kind = w.specs[g].window ? KVB_GROUP_WINDOW : KVB_GROUP_FULL;
    gs[g].window_tokens = w.specs[g].w;
    gs[g].sink_tokens = w.specs[g].s;
  }
  kvb_config cfg;
  kvb_config_init(&cfg);
  cfg.block_size = w.bs;
  cfg.flags = KVB_CONFIG_EVENTS | (r.below(2) ? KVB_CONFIG_KEYED_INDEX : 0);
  cfg.groups = gs.data();
  cfg.num_groups = ng;
  w.host_blocks = r.below(3) == 0 ? 0 : 8 + r.below(40);
  cfg.num_host_blocks = w.host_blocks;
  w.host_cache = w.host_blocks > 0 && r.below(2) == 0;
  if (w.host_cache) cfg.flags |= KVB_CONFIG_HOST_CACHE;
  cfg.num_blocks = w.host_cache ? 16 + r.below(20) : 24 + r.below(40);  // a small device level evicts more
  CHECK_OK(kvb_manager_create(&cfg, &w.m));
  if (!w.m) return;
  // Prompts share prefixes so that hits happen; tokens come from a small alphabet.
  std::vector<std::vector<int64_t>> prefixes(3);
  for (auto& p : prefixes)
    for (int i = 0; i < 24; ++i) p.push_back(static_cast<int64_t>(r.below(5)));
  int64_t next_id = 1;
  for (int step = 0; step < steps; ++step) {
    std::vector<int64_t> before = snapshot(w);
    kvb_status st = KVB_OK;
    std::vector<int64_t> ids, dev;
    for (auto& e : w.seqs) {
      ids.push_back(e.first);
      if (!e.second.swapped) dev.push_back(e.first);
    }
    const int64_t id = ids.empty() ? 0 : ids[r.below(static_cast<uint32_t>(ids.size()))];
    MSeq* s = ids.empty() ? nullptr : &w.seqs[id];
    const uint32_t op = r.below(105);  // 95..99: swap (with a host tier), else batch export
    if (op < 22 || !s) {
      std::vector<int64_t> p = prefixes[r.below(3)];
      p.resize(1 + r.below(static_cast<uint32_t>(p.size())));
      for (uint32_t i = 0, x = r.below(2 * w.bs + 2); i < x; ++i) p.push_back(100 + r.below(3));
      drain(w);
      const uint32_t k = expected_hit(w, p);
      size_t cached = 0;
      kvb_status can = kvb_seq_can_allocate(w.m, p.data(), p.size(), &cached);
      CHECK(cached == static_cast<size_t>(k) * w.bs);
      st = kvb_seq_allocate(w.m, next_id, p.data(), p.size(), &cached);
      CHECK(st == can);
      if (st == KVB_OK) {
        CHECK(cached == static_cast<size_t>(k) * w.bs);
        w.hits += k > 0;
        MSeq ns;
        ns.tokens = p;
        ns.computed = cached;
        release(w, ns);
        w.seqs[next_id++] = ns;
      }
    } else if (op < 40) {
      const uint32_t n = 1 + r.below(w.bs + 2);
      std::vector<int64_t> t;
      for (uint32_t i = 0; i < n; ++i) t.push_back(r.below(5));
      st = kvb_seq_append(w.m, id, t.data(), n);
      if (st == KVB_OK) s->tokens.insert(s->tokens.end(), t.begin(), t.end());
    } else if (op < 60) {
      const uint64_t unc = s->tokens.size() - s->computed;
      const uint64_t n = r.below(4) == 0 ? unc + 1 : (unc ? r.below(static_cast<uint32_t>(unc)) + 1 : 0);
      st = kvb_seq_commit(w.m, id, static_cast<size_t>(n));
      if (st == KVB_OK) {
        s->computed += n;
        release(w, *s);
      }
    } else if (op < 68) {
      const uint32_t n = r.below(static_cast<uint32_t>(std::min<size_t>(s->tokens.size(), 2 * w.bs + 2)) + 1);
      st = kvb_seq_rollback(w.m, id, n);
      if (st == KVB_OK) {
        s->tokens.resize(s->tokens.size() - n);
        s->computed = std::min<uint64_t>(s->computed, s->tokens.size());
        const uint32_t nb = static_cast<uint32_t>((s->tokens.size() + w.bs - 1) / w.bs);
        for (auto& r2 : s->rel) r2.erase(r2.lower_bound(nb), r2.end());
      }
    } else if (op < 76) {
      const size_t pos = 1 + r.below(static_cast<uint32_t>(s->tokens.size()));
      st = kvb_seq_fork_at(w.m, id, next_id, pos);
      if (st == KVB_OK) {
        MSeq c;
        c.tokens.assign(s->tokens.begin(), s->tokens.begin() + static_cast<long>(pos));
        c.computed = pos;
        const uint32_t nb = static_cast<uint32_t>((pos + w.bs - 1) / w.bs);
        c.rel = s->rel;
        for (auto& r2 : c.rel) r2.erase(r2.lower_bound(nb), r2.end());
        release(w, c);
        w.seqs[next_id++] = c;
      }
    } else if (op < 84) {
      st = kvb_seq_free(w.m, id);
      if (st == KVB_OK) w.seqs.erase(id);
    } else if (op < 90) {
      if (!dev.empty() && r.below(4) != 0) ids = dev;  // mostly on-device sequences; else a swapped one refuses
      std::vector<int64_t> t;
      for (size_t i = 0; i < ids.size(); ++i) t.push_back(r.below(5));
      st = kvb_batch_append(w.m, ids.data(), t.data(), ids.size());
      if (st == KVB_OK)
        for (size_t i = 0; i < ids.size(); ++i) w.seqs[ids[i]].tokens.push_back(t[i]);
    } else if (op < 95) {
      if (!dev.empty() && r.below(4) != 0) ids = dev;
      st = kvb_batch_commit(w.m, ids.data(), nullptr, ids.size());
      if (st == KVB_OK)
        for (int64_t i : ids) {
          w.seqs[i].computed = w.seqs[i].tokens.size();
          release(w, w.seqs[i]);
        }
    } else if (op < 100 && w.host_blocks > 0) {
      std::vector<int32_t> pairs(512);
      size_t np = 0;
      if (!s->swapped) {
        const std::vector<int32_t> held = held_blocks(w, id);
        const size_t cap = r.below(8) == 0 && !held.empty() ? held.size() - 1 : 256;
        st = kvb_seq_swap_out(w.m, id, pairs.data(), cap, &np);
        if (st == KVB_OK || st == KVB_ERR_BUFFER_TOO_SMALL) CHECK(np == held.size());
        if (st == KVB_OK) {
          s->swapped = true;
          s->host.clear();
          std::set<int32_t> dst;
          for (size_t i = 0; i < np && i < held.size(); ++i) {
            CHECK(pairs[2 * i] == held[i]);
            CHECK(pairs[2 * i + 1] >= 0 && static_cast<uint32_t>(pairs[2 * i + 1]) < w.host_blocks);
            CHECK(dst.insert(pairs[2 * i + 1]).second);
            s->host.push_back(pairs[2 * i + 1]);
          }
          ++w.swaps;
        }
      } else {
        const size_t cap = r.below(8) == 0 && !s->host.empty() ? s->host.size() - 1 : 256;
        st = kvb_seq_swap_in(w.m, id, pairs.data(), cap, &np);
        if (st == KVB_OK || st == KVB_ERR_BUFFER_TOO_SMALL) CHECK(np == s->host.size());
        if (st == KVB_OK) {
          s->swapped = false;
          const std::vector<int32_t> held = held_blocks(w, id);
          CHECK(held.size() == np);
          for (size_t i = 0; i < np && i < held.size(); ++i)
            CHECK(pairs[2 * i] == s->host[i] && pairs[2 * i + 1] == held[i]);
          s->host.clear();
        }
      }
    } else {
      ids = dev;
      int32_t pairs[256];
      size_t np = 0;
      CHECK_OK(kvb_drain_copies(w.m, pairs, 128, &np));
      if (w.host_cache) {  // offloads into distinct host blocks, loads into distinct device blocks
        std::vector<int32_t> off(1024), load(1024);
        size_t noff = 0, nload = 0;
        CHECK_OK(kvb_drain_host_transfers(w.m, off.data(), 512, &noff, load.data(), 512, &nload));
        std::set<int32_t> hd, dd;
        for (size_t i = 0; i < noff; ++i) CHECK(hd.insert(off[2 * i + 1]).second);
        for (size_t i = 0; i < nload; ++i) CHECK(dd.insert(load[2 * i + 1]).second);
      }
      // Every group's batch export: slots are the group's own blocks.
      for (uint32_t g = 0; g < ng; ++g) {
        std::vector<int32_t> tabs(ids.size() * 64), lens(ids.size());
        std::vector<int64_t> slots(4096);
        kvb_batch b;
        kvb_batch_init(&b);
        b.group = g;
        b.max_blocks_per_seq = 64;
        b.block_tables = tabs.data();
        b.seq_lens = lens.data();
        b.slot_mapping = slots.data();
        b.slot_capacity = slots.size();
        CHECK_OK(kvb_batch_export(w.m, ids.data(), ids.size(), &b));
        size_t k = 0;
        for (size_t i = 0; i < ids.size(); ++i) {
          std::vector<int32_t> t = table(w, ids[i], g);
          CHECK(std::equal(t.begin(), t.end(), tabs.begin() + static_cast<long>(i * 64)));
          const MSeq& q = w.seqs[ids[i]];
          for (uint64_t pos = q.computed; pos < q.tokens.size(); ++pos, ++k)
            CHECK(slots[k] == static_cast<int64_t>(t[pos / w.bs]) * w.bs + static_cast<int64_t>(pos % w.bs));
        }
      }
    }
    if (st != KVB_OK) {
      ++w.failures;
      CHECK(st == KVB_ERR_OUT_OF_BLOCKS || st == KVB_ERR_INVALID_ARGUMENT || st == KVB_ERR_BAD_STATE ||
            st == KVB_ERR_BUFFER_TOO_SMALL);
      CHECK(snapshot(w) == before);
    }
    check_all(w);
    if (w.seqs.size() > 6) {  // keep the pool turning over
      CHECK_OK(kvb_seq_free(w.m, w.seqs.begin()->first));
      w.seqs.erase(w.seqs.begin());
    }
  }
  static uint64_t total_hits, total_fail, total_swaps, total_host_hits;
  kvb_stats st;
  kvb_stats_init(&st);
  CHECK_OK(kvb_get_stats(w.m, &st));
  CHECK(st.device_hit_tokens + st.host_hit_tokens == st.hit_tokens);
  total_host_hits += st.host_hit_tokens;
  total_hits += w.hits;
  total_fail += w.failures;
  total_swaps += w.swaps;
  if (seed % 16 == 15) {
    printf("  seeds to %llu: %llu allocations with hits, %llu refused calls, %llu swaps out, %llu host-hit tokens\n",
           static_cast<unsigned long long>(seed), static_cast<unsigned long long>(total_hits),
           static_cast<unsigned long long>(total_fail), static_cast<unsigned long long>(total_swaps),
           static_cast<unsigned long long>(total_host_hits));
    CHECK(total_swaps > 0 && total_host_hits > 0);
  }
  kvb_manager_destroy(w.m);
}

void random_groups() {
  const bool quick = getenv("KVB_TEST_QUICK") != nullptr;
  for (uint64_t seed = 0; seed < (quick ? 16u : 64u); ++seed) run(seed, quick ? 80 : 300);
}

}  // namespace

int main() {
  RUN_TEST(random_groups);
  TEST_SUMMARY();
}
