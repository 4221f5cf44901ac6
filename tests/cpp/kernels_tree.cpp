// Tree-masked prefill (kvb_prefill_args.tree_mask): the CPU kernel against the float64 reference on
// random token trees (random parents, random committed prefixes) in ragged batches that mix trees,
// chains, decode rows, a plain prefill longer than 64 tokens (whose words must be ignored) and an empty
// sequence, over every dtype (fp8 caches with fp16 / bf16 / fp32 queries), GQA, soft cap, window + sinks
// and every CPU vector path; causal words give the unmasked result bit for bit; the refusals; then the
// CUDA kernels against the CPU on the same inputs (SKIP without a GPU).
#include <cstring>

#include "../../kernels/common/simd_cpu.h"
#include "prefill_problem.h"

using namespace kt;

namespace {

// Ancestor-or-self words of a random tree of n nodes: node i's parent is -1 (the committed prefix) or
// an earlier node; word i = bit i | word of the parent. With noise, bit i and the bits above it (which
// the kernel must not read) are random.
std::vector<uint64_t> random_tree(int32_t n, std::mt19937& rng, bool noise) {
  std::vector<uint64_t> w(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    const int32_t parent = int32_t(rng() % uint32_t(i + 1)) - 1;  // -1 .. i-1
    w[size_t(i)] = (uint64_t(1) << i) | (parent >= 0 ? w[size_t(parent)] : 0);
  }
  if (noise)
    for (int32_t i = 0; i < n; ++i) {
      const uint64_t below = (uint64_t(1) << i) - 1;  // bits 0 .. i-1
      w[size_t(i)] = (w[size_t(i)] & below) | ((uint64_t(rng()) << 32 | rng()) & ~below);
    }
  return w;
}

std::vector<uint64_t> causal_words(int32_t n) {
  std::vector<uint64_t> w(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) w[size_t(i)] = i == 63 ? ~uint64_t(0) : (uint64_t(2) << i) - 1;
  return w;
}

// A ragged batch: random trees (1..64 nodes, one of exactly 64) over random committed prefixes, a chain
// (causal words), decode rows, a plain prefill of 100 tokens with random words, an empty sequence.
struct Batch {
  std::vector<SeqSpec> seqs;
  std::vector<uint64_t> words;
};
Batch random_batch(std::mt19937& rng, bool small) {
  Batch b;
  auto add = [&](int32_t q_len, int32_t cached, std::vector<uint64_t> w) {
    b.seqs.push_back({q_len, cached});
    b.words.insert(b.words.end(), w.begin(), w.end());
  };
  const int trees = small ? 2 : 5;
  for (int i = 0; i < trees; ++i) {
    const int32_t n = i == 0 ? 64 : 1 + int32_t(rng() % 40);
    add(n, int32_t(rng() % 150), random_tree(n, rng, i % 2 == 1));
  }
  add(9, int32_t(rng() % 80), causal_words(9));
  add(1, 1 + int32_t(rng() % 120), {1});
  add(1, 0, {uint64_t(rng())});  // a decode row: its word is not read
  std::vector<uint64_t> noise(100);
  for (uint64_t& x : noise) x = uint64_t(rng()) << 32 | rng();
  add(small ? 70 : 100, int32_t(rng() % 40), noise);
  add(0, 5, {});
  // Shuffle whole sequences (their words travel with them).
  std::vector<size_t> order(b.seqs.size()), start(b.seqs.size() + 1, 0);
  for (size_t s = 0; s < b.seqs.size(); ++s) start[s + 1] = start[s] + size_t(b.seqs[s].q_len);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  Batch out;
  for (size_t s : order) {
    out.seqs.push_back(b.seqs[s]);
    out.words.insert(out.words.end(), b.words.begin() + long(start[s]), b.words.begin() + long(start[s + 1]));
  }
  return out;
}

struct TreeCase {
  Config cf;
  int q_dtype;  // -1: the cache's
};

std::vector<TreeCase> cases() {
  std::vector<TreeCase> out;
  const uint32_t dtypes[] = {KVB_DTYPE_FP16, KVB_DTYPE_BF16, KVB_DTYPE_FP32, KVB_DTYPE_FP8_E4M3, KVB_DTYPE_FP8_E5M2};
  const uint32_t dims[] = {64, 128, 256};
  const uint32_t groups[] = {1, 4, 6};
  unsigned i = 0;
  for (uint32_t dt : dtypes)
    for (uint32_t g : groups) {
      Config c{dt, dims[i % 3], i % 2 ? 16u : 8u, g == 6 ? 1u : 2u, g, 0, 0, 0.f, i % 4 == 3, 500 + i};
      if (i % 3 == 1) c.soft_cap = 8.f;
      if (i % 5 == 2) c.window = 40, c.sink = 3;  // windows cut into trees and prefixes alike
      const int qdt = dt == KVB_DTYPE_FP8_E4M3 ? int(i % 2 ? KVB_DTYPE_FP16 : KVB_DTYPE_FP32)
                      : dt == KVB_DTYPE_FP8_E5M2 ? int(KVB_DTYPE_BF16) : -1;
      out.push_back({c, qdt});
      ++i;
    }
  return out;
}

namespace simd = kvb::kern::cpu::simd;

void test_cpu_tree_against_reference() {
  const std::vector<TreeCase> all = cases();
  on_each_isa([&](simd::Isa isa) {
    int bad = 0, n = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      if (quick() && i % 4 != 0) continue;
      std::mt19937 rng(all[i].cf.seed + 7919u * unsigned(isa));
      Batch b = random_batch(rng, quick() || all[i].cf.head_dim == 256);
      Problem p(all[i].cf, b.seqs, b.words, all[i].q_dtype);
      kvb_prefill_args a = p.host_args();
      CHECK_OK(kvb_prefill_attention(&p.cache.desc, &a, nullptr));
      bad += p.compare_ref(p.out, path_name().c_str());
      ++n;
    }
    CHECK(bad == 0);
    CHECK(n > 0);
  }, quick());
}

// Causal words (and NULL, and a caller whose struct_size predates tree_mask) give the plain causal
// output bit for bit; a tree changes the rows it should and no other.
void test_causal_words_exact() {
  Config c{KVB_DTYPE_BF16, 128, 16, 2, 4, 0, 0, 0.f, false, 61};
  std::vector<SeqSpec> seqs = {{17, 30}, {64, 0}, {1, 200}, {90, 5}};
  std::vector<uint64_t> words;
  for (const SeqSpec& s : seqs) {
    std::vector<uint64_t> w = causal_words(std::min(s.q_len, 64));
    w.resize(size_t(s.q_len), 0);  // the 90-token prefill's words are 0 past 64: not read
    words.insert(words.end(), w.begin(), w.end());
  }
  Problem plain(c, seqs), causal(c, seqs, words), old(c, seqs);
  kvb_prefill_args a = plain.host_args();
  CHECK_OK(kvb_prefill_attention(&plain.cache.desc, &a, nullptr));
  a = causal.host_args();
  CHECK_OK(kvb_prefill_attention(&causal.cache.desc, &a, nullptr));
  CHECK(std::memcmp(plain.out.data(), causal.out.data(), plain.out.bytes()) == 0);
  a = old.host_args();
  a.struct_size = uint32_t(offsetof(kvb_prefill_args, tree_mask));
  a.tree_mask = reinterpret_cast<const uint64_t*>(uintptr_t(16));  // beyond struct_size: never read
  CHECK_OK(kvb_prefill_attention(&old.cache.desc, &a, nullptr));
  CHECK(std::memcmp(plain.out.data(), old.out.data(), plain.out.bytes()) == 0);
  CHECK(plain.compare_ref(plain.out, "causal") == 0);
  // Node 3 of the first sequence sees only itself among the new keys: its rows change, no other row does.
  words[3] = uint64_t(1) << 3;
  Problem tree(c, seqs, words);
  a = tree.host_args();
  CHECK_OK(kvb_prefill_attention(&tree.cache.desc, &a, nullptr));
  CHECK(tree.compare_ref(tree.out, "one node") == 0);
  const size_t row_bytes = size_t(tree.o_ts) * esize(c.dtype);
  const char* x = static_cast<const char*>(tree.out.data());
  const char* y = static_cast<const char*>(plain.out.data());
  for (int32_t r = 0; r < tree.total_q; ++r)
    CHECK((std::memcmp(x + size_t(r) * row_bytes, y + size_t(r) * row_bytes, row_bytes) != 0) == (r == 3));
}

// A row always sees itself: with an empty prefix and zero words each row's output is its own V row.
void test_self_always_seen() {
  Config c{KVB_DTYPE_FP32, 64, 8, 1, 2, 0, 0, 0.f, false, 62};
  Problem p(c, {{3, 0}}, {0, 0, 0});
  kvb_prefill_args a = p.host_args();
  CHECK_OK(kvb_prefill_attention(&p.cache.desc, &a, nullptr));
  CHECK(p.compare_ref(p.out, "self only") == 0);
  for (int32_t r = 0; r < 3; ++r)
    for (uint32_t h = 0; h < p.num_q_heads; ++h)
      for (uint32_t d = 0; d < c.head_dim; ++d)
        CHECK(std::fabs(p.out.get(size_t(r * p.o_ts + h * p.o_hs + d)) -
                        p.cache.v.get(p.cache.offset(p.tables[0], r, 0, d))) < 1e-6);
}

// tree_mask with prefix_groups is refused, and nothing is written.
void test_refusals() {
  Config c{KVB_DTYPE_FP16, 64, 16, 2, 4, 0, 0, 0.f, false, 63};
  std::mt19937 rng(5);
  Problem p(c, {{4, 40}, {4, 40}}, random_tree(8, rng, false));
  p.tables[p.max_blocks + 0] = p.tables[0];  // the two rows share their first two blocks
  p.tables[p.max_blocks + 1] = p.tables[1];
  int32_t gs[2] = {0, 2}, members[2] = {0, 1}, shared[1] = {2};
  kvb_prefix_groups g;
  kvb_prefix_groups_init(&g);
  g.group_start = gs;
  g.members = members;
  g.shared_blocks = shared;
  g.num_groups = 1;
  g.num_members = 2;
  kvb_prefill_args a = p.host_args();
  a.prefix_groups = &g;
  CHECK_STATUS(kvb_prefill_attention(&p.cache.desc, &a, nullptr), KVB_ERR_UNSUPPORTED);
  CHECK(strstr(kvb_last_error(), "tree_mask") != nullptr);
  for (size_t i = 0; i < p.out.n; ++i) CHECK(std::isnan(p.out.get(i)));
  g.num_groups = 0;  // an empty description is plain attention: the tree runs
  CHECK_OK(kvb_prefill_attention(&p.cache.desc, &a, nullptr));
}

#if KVB_WITH_CUDA
// The CUDA kernels on the CPU kernel's inputs (tree words in device memory), plain and graph-captured.
int run_cuda_tree(Problem& p, bool graph) {
  kvb_prefill_args a = p.host_args();
  CHECK_OK(kvb_prefill_attention(&p.cache.desc, &a, nullptr));
  const Tensor cpu_out = p.out;
  DeviceCache dev(p.cache);
  Tensor out(p.q_dtype, p.out.n);
  out.poison();
  DeviceBuffer q(p.q.data(), p.q.bytes()), o(out.data(), out.bytes());
  DeviceBuffer qs(p.qstart.data(), p.qstart.size() * 4), len(p.lens.data(), p.lens.size() * 4);
  DeviceBuffer tab(p.tables.data(), p.tables.size() * 4), words(p.tree.data(), p.tree.size() * 8);
  size_t ws = 0;
  CHECK_OK(kvb_prefill_attention_workspace_size(&dev.desc, &a, &ws));
  DeviceBuffer work(ws);
  a = p.args(q.p, o.p, static_cast<int32_t*>(qs.p), static_cast<int32_t*>(len.p), static_cast<int32_t*>(tab.p), work.p,
             ws, static_cast<const uint64_t*>(words.p));
  run_on_device(graph, [&](void* stream) { CHECK_OK(kvb_prefill_attention(&dev.desc, &a, stream)); });
  o.to_host(out.data());
  return p.compare(out, [&](int32_t r, uint32_t h, uint32_t d) {
    return double(cpu_out.get(size_t(r * p.o_ts + h * p.o_hs + d)));
  }, graph ? "cuda-graph tree" : "cuda tree");
}

void test_cuda_tree_against_cpu() {
  int bad = 0, i = 0;
  for (const TreeCase& tc : cases()) {
    if (tc.q_dtype == KVB_DTYPE_FP32) continue;  // CUDA fp8 prefill takes fp16 / bf16 queries
    std::mt19937 rng(tc.cf.seed);
    Batch b = random_batch(rng, quick());
    Problem p(tc.cf, b.seqs, b.words, tc.q_dtype);
    bad += run_cuda_tree(p, (i++ % 3) == 1);
  }
  // Few trees over long caches: the key range is split and merged.
  std::mt19937 rng(71);
  std::vector<uint64_t> w = random_tree(40, rng, true), w2 = random_tree(7, rng, false);
  w.insert(w.end(), w2.begin(), w2.end());
  Problem p({KVB_DTYPE_FP16, 128, 16, 2, 4, 0, 0, 0.f, false, 72}, {{40, 5000}, {7, 7000}}, w);
  bad += run_cuda_tree(p, false);
  Problem pf({KVB_DTYPE_FP32, 128, 16, 2, 4, 0, 0, 0.f, false, 73}, {{40, 5000}, {7, 700}}, w);
  pf.tf32 = true;
  bad += run_cuda_tree(pf, false);
  CHECK(bad == 0);
}
#endif

}  // namespace

int main() {
  RUN_TEST(test_cpu_tree_against_reference);
  RUN_TEST(test_causal_words_exact);
  RUN_TEST(test_self_always_seen);
  RUN_TEST(test_refusals);
  RUN_CUDA_TEST(test_cuda_tree_against_cpu);
  TEST_SUMMARY();
}
