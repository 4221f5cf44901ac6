// Shared-prefix attention (kvb_prefix_groups) on the CPU: decode and prefill with a description against
// the plain kernels on the same inputs and against a float64 reference, over random batches: several
// groups with members spread over the batch, sequences in no group, a group of one, queries inside the
// shared prefix, windows (+ sinks, -1 entries outside every window) and soft caps, every dtype, head
// dims 64 / 128 / 256, GQA group sizes 1 / 4 / 8 / 12, on every CPU vector path; then the description's
// validation (nothing written on a refusal).
#include <cstdlib>
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "cascade_batch.h"
#include "../../kernels/cascade/cascade_cost.h"
#include "../../kernels/common/amx_cpu.h"
#include "../../kernels/common/simd_cpu.h"

using namespace kt;

namespace {

struct Config {
  uint32_t dtype, head_dim, block_size, num_kv_heads, group, window, sink;
  float soft_cap;
  bool prefill;
  unsigned seed;
};

bool g_big = false;  // one group of 12 sharing 80 blocks: threads, and the shared keys split in partitions
// Block ids are drawn from this many (shuffled): a batch uses at most about 145 (the big one), and every
// block of the cache is filled with random values, which is most of a small batch's cost under valgrind.
constexpr int32_t kCacheBlocks = 160;

struct Batch : GroupedTables {
  Config cf;
  uint32_t num_q_heads = 0;
  int32_t total_q = 0;
  std::vector<int32_t> qstart;
  HostCache cache;
  Tensor q, out;
  std::vector<double> ref;  // [row][head][d]

  explicit Batch(const Config& c)
      : cf(c), cache(c.dtype, uint32_t(kCacheBlocks), c.block_size, c.num_kv_heads, c.head_dim) {
    std::mt19937 rng(c.seed);
    num_q_heads = c.num_kv_heads * c.group;
    const int32_t bs = int32_t(c.block_size);
    std::vector<int32_t> free_ids(static_cast<size_t>(kCacheBlocks));
    for (int32_t i = 0; i < kCacheBlocks; ++i) free_ids[size_t(i)] = i;
    std::shuffle(free_ids.begin(), free_ids.end(), rng);
    size_t next_id = 0;
    auto take = [&] {
      if (next_id == free_ids.size()) {
        fprintf(stderr, "cascade_attention: a batch needs more than %d blocks\n", kCacheBlocks);
        abort();
      }
      return free_ids[next_id++];
    };
    // Groups (one of them a group of one), then ordinary sequences; rows are shuffled afterwards.
    std::vector<GroupedSeq> seqs;
    const int ngroups = g_big ? 1 : int(rng() % 4);
    std::vector<std::vector<int32_t>> heads;
    std::vector<int32_t> nshared;
    for (int g = 0; g < ngroups; ++g) {
      const int32_t nb = g_big ? 80 : 1 + int32_t(rng() % 6);
      std::vector<int32_t> head;
      for (int32_t b = 0; b < nb; ++b) head.push_back(take());
      heads.push_back(head);
      nshared.push_back(nb);
      const int nm = g_big ? 12 : g == 2 ? 1 : 2 + int(rng() % 4);
      for (int k = 0; k < nm; ++k) {
        GroupedSeq s{g, 0, 0, head};
        const int32_t own = int32_t(rng() % (3 * bs + 2));  // 0: the whole sequence is shared
        s.len = nb * bs + own;
        seqs.push_back(s);
      }
    }
    const int nplain = 1 + int(rng() % 3);
    for (int k = 0; k < nplain; ++k) seqs.push_back(GroupedSeq{-1, 1 + int32_t(rng() % (5 * bs)), 0, {}});
    std::shuffle(seqs.begin(), seqs.end(), rng);
    num_seqs = uint32_t(seqs.size());
    for (GroupedSeq& s : seqs) {
      while (int32_t(s.table.size()) * bs < s.len) s.table.push_back(take());
      // Prefill: up to 20 new tokens (some reach back into the shared prefix); decode: one.
      s.q_len = c.prefill ? 1 + int32_t(rng() % std::min<int32_t>(s.len, 20)) : 1;
      if (c.prefill && rng() % 7 == 0) s.q_len = 0;
      max_blocks = std::max(max_blocks, uint32_t(s.table.size()));
    }
    tables.assign(size_t(num_seqs) * max_blocks, -1);
    qstart.push_back(0);
    for (uint32_t i = 0; i < num_seqs; ++i) {
      const GroupedSeq& s = seqs[i];
      lens.push_back(s.len);
      qstart.push_back(qstart.back() + s.q_len);
      for (size_t b = 0; b < s.table.size(); ++b) tables[i * max_blocks + b] = s.table[b];
      // Own blocks wholly outside every row's window and past the sinks read -1, as a window leaves them.
      if (c.window > 0) {
        const int64_t lo = std::max<int64_t>(0, s.len - s.q_len - int64_t(c.window) + 1);
        const int64_t first_own = s.group >= 0 ? nshared[size_t(s.group)] : 0;
        for (int64_t b = first_own; b < int64_t(s.table.size()); ++b)
          if ((b + 1) * bs <= lo && b * bs >= int64_t(c.sink)) tables[i * max_blocks + size_t(b)] = -1;
      }
    }
    total_q = qstart.back();
    describe_groups(seqs, nshared);
    cache.k.fill_random(rng);
    cache.v.fill_random(rng);
    const size_t rows = size_t(c.prefill ? total_q : int32_t(num_seqs));
    q = Tensor(c.dtype, rows * num_q_heads * c.head_dim);
    q.fill_random(rng, -2.f, 2.f);
    out = Tensor(c.dtype, q.n);
    reference();
  }

  double scale() const { return 1.0 / std::sqrt(double(cf.head_dim)); }
  int32_t rows_of(uint32_t s) const { return cf.prefill ? qstart[s + 1] - qstart[s] : 1; }
  int32_t row0(uint32_t s) const { return cf.prefill ? qstart[s] : int32_t(s); }

  void reference() {
    const uint32_t D = cf.head_dim, H = num_q_heads, bs = cf.block_size;
    ref.assign(q.n, 0.0);
    for (uint32_t s = 0; s < num_seqs; ++s)
      for (int32_t j = 0; j < rows_of(s); ++j) {
        const int64_t pos = lens[s] - rows_of(s) + j, row = row0(s) + j;
        std::vector<int64_t> keys;
        for (int64_t t = 0; t <= pos; ++t)
          if (cf.window == 0 || t > pos - int64_t(cf.window) || t < int64_t(cf.sink)) keys.push_back(t);
        for (uint32_t h = 0; h < H; ++h) {
          const uint32_t kvh = h / cf.group;
          std::vector<double> w(keys.size());
          for (size_t i = 0; i < keys.size(); ++i) {
            const int32_t blk = tables[s * max_blocks + size_t(keys[i] / bs)];
            double dot = 0;
            for (uint32_t d = 0; d < D; ++d)
              dot += double(q.get((size_t(row) * H + h) * D + d)) * double(cache.k.get(cache.offset(blk, keys[i] % bs, kvh, d)));
            double x = scale() * dot;
            if (cf.soft_cap > 0.f) x = cf.soft_cap * std::tanh(x / cf.soft_cap);
            w[i] = x;
          }
          if (keys.empty()) continue;
          const double mx = *std::max_element(w.begin(), w.end());
          double sum = 0;
          for (double& x : w) sum += (x = std::exp(x - mx));
          for (size_t i = 0; i < keys.size(); ++i) {
            const int32_t blk = tables[s * max_blocks + size_t(keys[i] / bs)];
            for (uint32_t d = 0; d < D; ++d)
              ref[(size_t(row) * H + h) * D + d] += w[i] / sum * double(cache.v.get(cache.offset(blk, keys[i] % bs, kvh, d)));
          }
        }
      }
  }

  // Runs the kernel (plain when pg is NULL) into out.
  kvb_status run(const kvb_prefix_groups* pg) {
    out.poison();
    if (cf.prefill) {
      kvb_prefill_args a;
      kvb_prefill_args_init(&a);
      set_paged(a, num_seqs, num_q_heads, max_blocks, q.data(), out.data(), tables.data(), lens.data());
      set_mask(a, cf.soft_cap, cf.window, cf.sink);
      a.total_q_tokens = uint32_t(total_q);
      a.query_start = qstart.data();
      a.scale = float(scale());
      a.prefix_groups = pg;
      return kvb_prefill_attention(&cache.desc, &a, nullptr);
    }
    kvb_attention_args a;
    kvb_attention_args_init(&a);
    set_paged(a, num_seqs, num_q_heads, max_blocks, q.data(), out.data(), tables.data(), lens.data());
    set_mask(a, cf.soft_cap, cf.window, cf.sink);
    a.scale = float(scale());
    size_t ws = 0;
    CHECK_OK(kvb_paged_attention_workspace_size(&cache.desc, &a, &ws));
    std::vector<float> work(ws / 4 + 16);
    a.workspace = work.data();
    a.workspace_size = ws;
    a.prefix_groups = pg;
    return kvb_paged_attention(&cache.desc, &a, nullptr);
  }

  // got against want (a host copy of another output, or the reference when want is NULL); the largest
  // |got - want| goes to *worst when given.
  int compare(const Tensor* want, const char* what, double* worst = nullptr) const {
    int bad = 0;
    for (size_t i = 0; i < out.n; ++i) {
      const double w = want ? double(want->get(i)) : ref[i], g = out.get(i);
      if (worst) *worst = std::max(*worst, std::isfinite(g) ? std::fabs(g - w) : INFINITY);
      if (!close(g, w, cf.dtype) && bad++ < 3)
        fprintf(stderr, "  %s %s %s D=%u bs=%u G=%u win=%u sink=%u cap=%g seed=%u: element %zu got %g want %g\n", what,
                cf.prefill ? "prefill" : "decode", dname(cf.dtype), cf.head_dim, cf.block_size, cf.group, cf.window,
                cf.sink, double(cf.soft_cap), cf.seed, i, g, w);
    }
    return bad;
  }
};

std::vector<Config> configs() {
  std::vector<Config> out;
  const uint32_t dtypes[] = {KVB_DTYPE_FP16, KVB_DTYPE_BF16, KVB_DTYPE_FP32};
  const uint32_t dims[] = {64, 128, 256};
  const uint32_t groups[] = {1, 4, 8};
  unsigned i = 0;
  for (bool prefill : {false, true})
    for (uint32_t dt : dtypes)
      for (uint32_t d : dims)
        for (uint32_t g : groups) {
          Config c{dt, d, i % 3 == 0 ? 8u : 16u, g == 8 ? 1u : 2u, g, 0, 0, 0.f, prefill, 500 + i};
          if (i % 3 == 1) c.window = 19 + i % 11, c.sink = i % 2 ? 4 : 0;
          if (i % 5 == 2) c.soft_cap = 6.f;
          out.push_back(c);
          ++i;
        }
  out.push_back({KVB_DTYPE_FP16, 128, 16, 2, 12, 0, 0, 0.f, false, 90});
  out.push_back({KVB_DTYPE_FP16, 128, 16, 2, 12, 40, 16, 0.f, true, 91});
  return out;
}

namespace simd = kvb::kern::cpu::simd;

// Cascade = plain = reference, on every vector path (AVX-512 twice where AMX is available: with and
// without the tiles), several random batches per configuration; the largest error against the float64
// reference per path and dtype is printed.
void test_against_plain_and_reference() {
  namespace amx = kvb::kern::cpu::amx;
  const simd::Isa start = simd::isa();
  const bool amx_start = amx::active();
  // KVB_TEST_QUICK (sanitizers, valgrind): one batch per configuration, the configurations dealt out
  // over the passes (each runs once; with two passes, as under valgrind, each dtype x head dim x group
  // runs on both paths, its decode on one and its prefill on the other), since a run under valgrind is
  // ~50x slower.
  const bool quick = kvbt_quick();
  if (!amx::supported()) printf("  AMX path not tested: %s\n", amx::why_not());
  struct Pass {
    int isa;
    bool tiles;
  };
  std::vector<Pass> passes;
  for (int isa = 0; isa < simd::kNumIsas; ++isa)
    for (bool tiles : {false, true})
      if (simd::isa_supported(simd::Isa(isa)) &&
          (!tiles || (simd::Isa(isa) == simd::Isa::avx512 && amx::supported())))
        passes.push_back({isa, tiles});
  int bad = 0;
  for (size_t pi = 0; pi < passes.size(); ++pi) {
    const int isa = passes[pi].isa;
    const bool tiles = passes[pi].tiles;
    CHECK(simd::force_isa(simd::Isa(isa)));
    amx::force(tiles);
    double worst_casc[3] = {0, 0, 0}, worst_plain[3] = {0, 0, 0};  // by dtype
    const std::vector<Config> all = configs();
    for (size_t ci = quick ? pi : 0; ci < all.size(); ci += quick ? passes.size() : 1)
      for (unsigned rep = 0, reps = quick ? 1 : 3; rep < reps; ++rep) {
        Config cf = all[ci];
        cf.seed = cf.seed * 7 + rep + 1000u * unsigned(isa);
        Batch b(cf);
        CHECK_OK(b.run(nullptr));
        Tensor plain = b.out;
        bad += b.compare(nullptr, "plain vs reference", &worst_plain[cf.dtype]);
        kvb_prefix_groups g = b.groups();
        CHECK_OK(b.run(&g));
        bad += b.compare(&plain, "cascade vs plain");
        bad += b.compare(nullptr, "cascade vs reference", &worst_casc[cf.dtype]);
        g.policy = KVB_PREFIX_GROUPS_AUTO;  // the cost model's choice: the same function
        CHECK_OK(b.run(&g));
        bad += b.compare(&plain, "auto vs plain");
      }
    printf("  %s%s: max |out - float64| fp16 %.3g, bf16 %.3g, fp32 %.3g (plain kernel: %.3g, %.3g, %.3g)\n",
           simd::isa_name(simd::Isa(isa)), tiles ? " + AMX" : "", worst_casc[KVB_DTYPE_FP16], worst_casc[KVB_DTYPE_BF16],
           worst_casc[KVB_DTYPE_FP32], worst_plain[KVB_DTYPE_FP16], worst_plain[KVB_DTYPE_BF16], worst_plain[KVB_DTYPE_FP32]);
  }
  simd::force_isa(start);
  amx::force(amx_start);
  CHECK(bad == 0);
}

// Large enough to run threaded and to split the shared keys into partitions.
void test_threaded_long_prefix() {
  for (bool prefill : {false, true}) {
    if (prefill && kvbt_quick()) continue;  // test_auto_policy runs a big prefill batch too
    Config cf{KVB_DTYPE_FP16, 128, 16, 2, 4, 0, 0, 0.f, prefill, 7};
    g_big = true;
    Batch b(cf);
    g_big = false;
    CHECK_OK(b.run(nullptr));
    Tensor plain = b.out;
    kvb_prefix_groups g = b.groups();
    CHECK_OK(b.run(&g));
    CHECK(b.compare(&plain, "threaded cascade vs plain") == 0);
    CHECK(b.compare(nullptr, "threaded cascade vs reference") == 0);
  }
}

// Policy AUTO through the C API, on every vector path: where the cost model keeps no group the call is
// the plain kernel's (bit for bit), where it keeps some the results agree with plain within the
// tolerance; small batches (groups dropped) and long shared prefixes (kept).
void test_auto_policy() {
  namespace amx = kvb::kern::cpu::amx;
  namespace kk = kvb::kern;
  const simd::Isa start = simd::isa();
  const bool amx_start = amx::active();
  const bool quick = kvbt_quick();
  int kept = 0, dropped = 0;
  for (int isa = 0; isa < simd::kNumIsas; ++isa) {
    if (!simd::force_isa(simd::Isa(isa))) continue;
    amx::force(simd::Isa(isa) == simd::Isa::avx512 && amx::supported());
    for (unsigned i = 0; i < 8; ++i) {
      // Quick: the small batches on every path (the cost model drops some of them), the big ones (kept)
      // one decode and one prefill on this machine's own path.
      if (quick && i >= 4 && (simd::Isa(isa) != start || (i != 4 && i != 7))) continue;
      const bool prefill = i % 2 == 1;
      Config cf{i % 4 < 2 ? KVB_DTYPE_FP16 : KVB_DTYPE_BF16, 128, 16, 2, 4, 0, 0, 0.f, prefill, 300 + i + 10 * unsigned(isa)};
      if (i == 5) cf.window = 600, cf.sink = 4;
      if (i == 6) cf.soft_cap = 8.f;
      g_big = i >= 4;
      Batch b(cf);
      g_big = false;
      CHECK_OK(b.run(nullptr));
      Tensor plain = b.out;
      kvb_prefix_groups g = b.groups();
      g.policy = KVB_PREFIX_GROUPS_AUTO;
      kk::BatchShape shape;
      shape.num_seqs = b.num_seqs;
      shape.block_size = cf.block_size;
      shape.max_len = int64_t(b.max_blocks) * cf.block_size;
      shape.seq_lens = b.lens.data();
      shape.query_start = prefill ? b.qstart.data() : nullptr;
      const kk::KeptGroups k(g, kk::cpu_group_cost(), shape);
      CHECK_OK(b.run(&g));
      if (!k.get()) {
        ++dropped;
        for (size_t e = 0; e < b.out.n; ++e)
          if (b.out.get(e) != plain.get(e)) {
            CHECK(!"AUTO with no group kept differs from the plain kernel");
            break;
          }
      } else {
        ++kept;
        CHECK(b.compare(&plain, "auto (groups kept) vs plain") == 0);
      }
      CHECK(b.compare(nullptr, "auto vs reference") == 0);
    }
  }
  simd::force_isa(start);
  amx::force(amx_start);
  printf("  AUTO: %d batches kept groups, %d ran the plain kernel\n", kept, dropped);
  CHECK(kept > 0 && dropped > 0);
}

// Bad descriptions are refused before anything is written, with a message naming the value.
void test_validation() {
  Config cf{KVB_DTYPE_FP32, 64, 16, 2, 2, 0, 0, 0.f, false, 4242};
  Batch b(cf);
  while (b.shared_blocks.size() < 2 || b.group_start[1] - b.group_start[0] < 2) b = Batch(cf = Config{cf.dtype, 64, 16, 2, 2, 0, 0, 0.f, false, cf.seed + 1});
  auto refused = [&](kvb_prefix_groups g, const char* needle) {
    CHECK_STATUS(b.run(&g), KVB_ERR_INVALID_ARGUMENT);
    CHECK(strstr(kvb_last_error(), needle) != nullptr);
    for (size_t i = 0; i < b.out.n; ++i)
      if (!std::isnan(b.out.get(i))) {
        CHECK(!"output written by a refused call");
        break;
      }
  };
  std::vector<int32_t> saved = b.members;
  b.members[1] = b.members[0];  // a row twice
  refused(b.groups(), "already a member");
  b.members = saved;
  b.members[0] = int32_t(b.num_seqs);
  refused(b.groups(), "is not a row");
  b.members = saved;
  const int32_t row = b.members[1];
  const int32_t old = b.tables[size_t(row) * b.max_blocks];
  b.tables[size_t(row) * b.max_blocks] = (old + 1) % kCacheBlocks;  // a member whose head differs
  refused(b.groups(), "differs from");
  b.tables[size_t(row) * b.max_blocks] = old;
  const int32_t shared0 = b.shared_blocks[0];
  b.shared_blocks[0] = int32_t(b.max_blocks) + 1;
  refused(b.groups(), "shared_blocks[0]");
  b.shared_blocks[0] = 1000;
  refused(b.groups(), "shared_blocks[0]");
  kvb_prefix_groups g = b.groups();
  g.struct_size = 8;
  refused(g, "struct_size");
  // AUTO checks the description before its cost model drops any group.
  b.shared_blocks[0] = shared0;
  b.members[1] = b.members[0];
  g = b.groups();
  g.policy = KVB_PREFIX_GROUPS_AUTO;
  refused(g, "already a member");
  b.members = saved;
  // No groups: the plain kernel.
  g = b.groups();
  g.num_groups = 0;
  CHECK_OK(b.run(&g));
}

}  // namespace

int main() {
  RUN_TEST(test_against_plain_and_reference);
  RUN_TEST(test_threaded_long_prefix);
  RUN_TEST(test_auto_policy);
  RUN_TEST(test_validation);
  TEST_SUMMARY();
}
