// kvb_batch_export's prefix groups (kvb_prefix_groups) over random operation sequences: shared system
// prompts (prefix hits), forks and fork_at, appends with copy-on-write of partial blocks, partial commits,
// sliding windows, frees; with and without KV cache groups. After every operation the invariants hold
// and the description of a random sub-batch equals a brute-force grouping of the block tables (an O(n^2)
// restatement of the rule in kvblock.h); a too-small buffer gets BUFFER_TOO_SMALL with the sizes and no
// write. Then the exported description drives the CPU decode kernel, which must equal the plain one.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels_util.h"

using namespace kt;

namespace {

constexpr uint32_t kBs = 4, kBlocks = 160;

struct Want {
  std::vector<int32_t> group_start{0}, members, shared;
};

// The rule of kvblock.h restated over whole tables: a row's shareable blocks are its full, computed,
// held leading blocks; rows with >= k of them are keyed by column k - 1; a row belongs to the candidate
// of the first row with its key when their first k columns agree; a candidate of >= 2 rows is a group
// sharing the longest prefix common to all (bounded by each shareable count).
Want brute_force(const std::vector<std::vector<int32_t>>& tab, const std::vector<uint64_t>& computed, uint32_t k) {
  const size_t n = tab.size();
  std::vector<uint32_t> share(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t lim = uint32_t(std::min<uint64_t>(computed[i] / kBs, tab[i].size())), s = 0;
    while (s < lim && tab[i][s] >= 0) ++s;
    share[i] = s;
  }
  std::vector<int> first(n, -1);  // the candidate's first row, -1: none
  for (size_t i = 0; i < n; ++i) {
    if (share[i] < k) continue;
    size_t f = 0;
    while (!(share[f] >= k && tab[f][k - 1] == tab[i][k - 1])) ++f;
    if (std::equal(tab[i].begin(), tab[i].begin() + k, tab[f].begin())) first[i] = int(f);
  }
  Want w;
  for (size_t f = 0; f < n; ++f) {
    if (first[f] != int(f)) continue;
    std::vector<int32_t> mem;
    for (size_t i = 0; i < n; ++i)
      if (first[i] == int(f)) mem.push_back(int32_t(i));
    if (mem.size() < 2) continue;
    uint32_t common = UINT32_MAX;
    for (int32_t i : mem) {
      uint32_t c = 0;
      while (c < share[size_t(i)] && c < share[f] && tab[size_t(i)][c] == tab[f][c]) ++c;
      common = std::min(common, c);
    }
    for (int32_t i : mem) w.members.push_back(i);
    w.group_start.push_back(int32_t(w.members.size()));
    w.shared.push_back(int32_t(common));
  }
  return w;
}

struct World {
  kvb_manager* m = nullptr;
  uint32_t ngroups = 0;
  std::vector<int64_t> live;
  int64_t next_id = 1;
  std::mt19937_64 rng;
  std::vector<std::vector<int64_t>> prompts;
  size_t exports = 0, nonempty = 0;

  World(uint64_t seed, bool with_groups) : rng(seed) {
    kvb_config cfg;
    kvb_config_init(&cfg);
    cfg.block_size = kBs;
    cfg.num_blocks = kBlocks;
    std::vector<kvb_group_spec> gs(2);
    if (with_groups) {
      for (auto& g : gs) kvb_group_spec_init(&g);
      gs[1].kind = KVB_GROUP_WINDOW;
      gs[1].window_tokens = 9;
      gs[1].sink_tokens = 2;
      cfg.groups = gs.data();
      cfg.num_groups = 2;
      ngroups = 2;
    }
    CHECK_OK(kvb_manager_create(&cfg, &m));
    for (int p = 0; p < 3; ++p) {
      std::vector<int64_t> t;
      for (int i = 0; i < 9 + 6 * p; ++i) t.push_back(int64_t(1000 * (p + 1) + i));
      prompts.push_back(t);
    }
  }
  ~World() { kvb_manager_destroy(m); }

  int64_t pick() { return live[size_t(rng() % live.size())]; }
  uint64_t info_computed(int64_t id, uint64_t* tokens = nullptr) {
    kvb_seq_info in;
    kvb_seq_info_init(&in);
    CHECK_OK(kvb_seq_get_info(m, id, &in));
    if (tokens) *tokens = in.num_tokens;
    return in.num_computed;
  }

  void step() {
    const unsigned op = unsigned(rng() % 100);
    if (live.empty() || op < 20) {  // a request: a shared system prompt (prefix hits) + its own tokens
      std::vector<int64_t> t = prompts[size_t(rng() % prompts.size())];
      const int extra = int(rng() % 12);
      for (int i = 0; i < extra; ++i) t.push_back(int64_t(rng() % 50));
      if (kvb_seq_allocate(m, next_id, t.data(), t.size(), nullptr) == KVB_OK) {
        if (ngroups == 0 && rng() % 5 == 0) kvb_seq_set_window(m, next_id, 6 + uint32_t(rng() % 8), uint32_t(rng() % 3));
        live.push_back(next_id);
      }
      ++next_id;
    } else if (op < 45) {  // commit some or all uncomputed tokens
      const int64_t id = pick();
      uint64_t tokens = 0;
      const uint64_t done = info_computed(id, &tokens);
      if (tokens > done) kvb_seq_commit(m, id, size_t(1 + rng() % (tokens - done)));
    } else if (op < 65) {  // decode append (copy-on-write where a partial block is shared)
      const int64_t id = pick();
      const int64_t tok = int64_t(rng() % 50);
      kvb_seq_append(m, id, &tok, 1);
    } else if (op < 75) {
      const int64_t id = pick();
      if (kvb_seq_fork(m, id, next_id) == KVB_OK) live.push_back(next_id);
      ++next_id;
    } else if (op < 83) {
      const int64_t id = pick();
      const uint64_t done = info_computed(id);
      if (done > 0 && kvb_seq_fork_at(m, id, next_id, size_t(1 + rng() % done)) == KVB_OK) live.push_back(next_id);
      ++next_id;
    } else if (op < 93 && live.size() > 1) {
      const size_t i = size_t(rng() % live.size());
      CHECK_OK(kvb_seq_free(m, live[i]));
      live.erase(live.begin() + long(i));
    } else {
      int32_t pairs[64];
      size_t np = 0;
      kvb_drain_copies(m, pairs, 32, &np);
    }
    CHECK_OK(kvb_check_invariants(m));
  }

  // A random sub-batch in random order, exported for a random group with a random minimum.
  void check_export() {
    std::vector<int64_t> ids = live;
    std::shuffle(ids.begin(), ids.end(), rng);
    ids.resize(1 + size_t(rng() % ids.size()));
    const uint32_t grp = ngroups ? uint32_t(rng() % ngroups) : 0;
    const uint32_t k = 1 + uint32_t(rng() % 3);
    std::vector<std::vector<int32_t>> tab;
    std::vector<uint64_t> computed;
    for (int64_t id : ids) {
      std::vector<int32_t> t(256);
      size_t len = 0;
      CHECK_OK(kvb_seq_block_table_group(m, id, grp, t.data(), t.size(), &len));
      t.resize(len);
      tab.push_back(t);
      computed.push_back(info_computed(id));
    }
    const Want want = brute_force(tab, computed, k);
    const size_t n = ids.size();
    std::vector<int32_t> gs(n + 1, -7), mem(n, -7), sh(n, -7);
    kvb_prefix_groups pg;
    kvb_prefix_groups_init(&pg);
    CHECK(pg.min_shared_blocks == 2);
    pg.min_shared_blocks = k;
    pg.group_start = gs.data();
    pg.members = mem.data();
    pg.shared_blocks = sh.data();
    kvb_batch b;
    kvb_batch_init(&b);
    b.group = grp;
    b.prefix_groups = &pg;
    const uint32_t ng = uint32_t(want.shared.size()), nm = uint32_t(want.members.size());
    if (ng > 0) {  // too small: sizes reported, nothing written
      pg.group_capacity = ng - 1;
      pg.member_capacity = uint32_t(n);
      CHECK_STATUS(kvb_batch_export(m, ids.data(), n, &b), KVB_ERR_BUFFER_TOO_SMALL);
      CHECK(pg.num_groups == ng && pg.num_members == nm && gs[0] == -7);
      pg.group_capacity = ng;
      pg.member_capacity = nm - 1;
      CHECK_STATUS(kvb_batch_export(m, ids.data(), n, &b), KVB_ERR_BUFFER_TOO_SMALL);
      CHECK(pg.num_groups == ng && pg.num_members == nm && gs[0] == -7);
    }
    pg.group_capacity = ng;
    pg.member_capacity = nm;
    CHECK_OK(kvb_batch_export(m, ids.data(), n, &b));
    CHECK(pg.num_groups == ng && pg.num_members == nm);
    CHECK(std::equal(want.group_start.begin(), want.group_start.end(), gs.begin()));
    CHECK(std::equal(want.members.begin(), want.members.end(), mem.begin()));
    CHECK(std::equal(want.shared.begin(), want.shared.end(), sh.begin()));
    ++exports;
    nonempty += ng > 0;
  }
};

void test_random_operations() {
  for (bool with_groups : {false, true})
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      World w(seed * 7919 + with_groups, with_groups);
      for (int i = 0; i < 400; ++i) {
        w.step();
        if (!w.live.empty()) w.check_export();
      }
      CHECK(w.nonempty * 4 > w.exports);  // the scenario really shares
    }
}

// The export's description drives the decode kernel: the same outputs as the plain kernel. The pool is
// a real cache whose K/V are random; a forked family of 5 and a prompt hit by 3 requests share blocks.
void test_export_drives_decode() {
  World w(99, false);
  std::vector<int64_t> prompt(37);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int64_t(i + 7);
  CHECK_OK(kvb_seq_allocate(w.m, 1, prompt.data(), prompt.size(), nullptr));
  CHECK_OK(kvb_seq_commit(w.m, 1, prompt.size()));
  for (int64_t c = 2; c <= 5; ++c) CHECK_OK(kvb_seq_fork(w.m, 1, c));  // share 9 full blocks and a partial one
  CHECK_OK(kvb_seq_fork_at(w.m, 1, 6, 20));
  for (int64_t id = 7; id <= 9; ++id) {  // hits on the committed prompt of 1 (36 tokens, 9 blocks)
    std::vector<int64_t> t = prompt;
    t.push_back(100 + id);
    size_t cached = 0;
    CHECK_OK(kvb_seq_allocate(w.m, id, t.data(), t.size(), &cached));
    CHECK(cached == 36);
  }
  std::vector<int64_t> ids = {3, 7, 1, 6, 2, 8, 5, 9, 4};
  std::vector<int64_t> toks(ids.size(), 11);
  CHECK_OK(kvb_batch_append(w.m, ids.data(), toks.data(), ids.size()));  // copy-on-write of the partial block
  const uint32_t maxb = 16;
  std::vector<int32_t> tables(ids.size() * maxb), lens(ids.size()), gs(ids.size() + 1), mem(ids.size()), sh(ids.size());
  kvb_prefix_groups pg;
  kvb_prefix_groups_init(&pg);
  pg.group_start = gs.data();
  pg.members = mem.data();
  pg.shared_blocks = sh.data();
  pg.group_capacity = pg.member_capacity = uint32_t(ids.size());
  kvb_batch b;
  kvb_batch_init(&b);
  b.max_blocks_per_seq = maxb;
  b.block_tables = tables.data();
  b.seq_lens = lens.data();
  b.prefix_groups = &pg;
  CHECK_OK(kvb_batch_export(w.m, ids.data(), ids.size(), &b));
  // Every sequence but 6 (forked at 20 tokens: 5 blocks) shares the prompt's 9 full blocks; 6 joins
  // them for its first 5 (min_shared 2 keys by column 1), so the group shares 5.
  CHECK(pg.num_groups == 1 && pg.num_members == 9 && sh[0] == 5);
  pg.min_shared_blocks = 6;  // now 6 stays out and the rest share 9
  CHECK_OK(kvb_batch_export(w.m, ids.data(), ids.size(), &b));
  CHECK(pg.num_groups == 1 && pg.num_members == 8 && sh[0] == 9);

  for (uint32_t dtype : {KVB_DTYPE_FP16, KVB_DTYPE_FP32}) {
    HostCache cache(dtype, kBlocks, kBs, 2, 64);
    std::mt19937 rng(5);
    cache.k.fill_random(rng);
    cache.v.fill_random(rng);
    Tensor q(dtype, ids.size() * 8 * 64), plain(dtype, q.n), casc(dtype, q.n);
    q.fill_random(rng, -2.f, 2.f);
    kvb_attention_args a;
    kvb_attention_args_init(&a);
    a.num_seqs = uint32_t(ids.size());
    a.num_q_heads = 8;
    a.max_blocks_per_seq = maxb;
    a.q = q.data();
    a.block_tables = tables.data();
    a.seq_lens = lens.data();
    size_t ws = 0;
    CHECK_OK(kvb_paged_attention_workspace_size(&cache.desc, &a, &ws));
    std::vector<float> work(ws / 4 + 16);
    a.workspace = work.data();
    a.workspace_size = ws;
    a.out = plain.data();
    CHECK_OK(kvb_paged_attention(&cache.desc, &a, nullptr));
    a.out = casc.data();
    a.prefix_groups = &pg;
    CHECK_OK(kvb_paged_attention(&cache.desc, &a, nullptr));
    int bad = 0;
    for (size_t i = 0; i < q.n; ++i)
      if (!close(casc.get(i), plain.get(i), dtype) && bad++ < 3)
        fprintf(stderr, "  %s element %zu: cascade %g plain %g\n", dname(dtype), i, double(casc.get(i)), double(plain.get(i)));
    CHECK(bad == 0);
  }
}

}  // namespace

int main() {
  RUN_TEST(test_random_operations);
  RUN_TEST(test_export_drives_decode);
  TEST_SUMMARY();
}
