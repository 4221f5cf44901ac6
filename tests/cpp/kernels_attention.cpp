// Paged decode attention: the CPU kernel against a naive float64 reference over random shapes, ragged
// lengths, every dtype, GQA ratios, windows and soft caps; then the CUDA kernel against the CPU kernel
// on the same inputs (SKIP without a GPU).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>

#include "../../kernels/decode/decode.h"
#include "../../kernels/common/amx_cpu.h"
#include "../../kernels/common/simd_cpu.h"
#include "kernels_util.h"

using namespace kt;

namespace {

struct Case {
  uint32_t dtype, head_dim, block_size, num_kv_heads, group;
  uint32_t window, sink;
  float soft_cap;
  bool strided;  // padded q / out strides
  unsigned seed;
  bool hnd = false;  // head-major cache: a head's rows of a block contiguous (CPU only)
};

// Inputs of one attention call on the CPU, plus the expected output.
struct Problem {
  Case cs;
  HostCache cache;
  uint32_t num_q_heads, max_blocks;
  std::vector<int32_t> lens, tables;
  Tensor q, out;
  int64_t q_hs, q_ss, o_hs, o_ss;
  std::vector<double> ref;  // [seq][head][d]

  explicit Problem(const Case& c)
      : cs(c), cache(c.dtype, 1, c.block_size, c.num_kv_heads, c.head_dim) {
    std::mt19937 rng(c.seed);
    const uint32_t bs = c.block_size;
    lens = {0, 1, int32_t(bs - 1), int32_t(bs), int32_t(bs + 1), 300 + int32_t(rng() % 500)};
    if (bs == 1) lens[2] = 2;
    num_q_heads = c.num_kv_heads * c.group;
    const int32_t longest = *std::max_element(lens.begin(), lens.end());
    max_blocks = uint32_t((longest + bs - 1) / bs + 1);  // one spare padded column
    uint32_t total_blocks = 0;
    for (int32_t L : lens) total_blocks += uint32_t((L + bs - 1) / bs);
    total_blocks += 7;  // never-used blocks
    cache = HostCache(c.dtype, total_blocks, bs, c.num_kv_heads, c.head_dim);
    if (c.hnd) {  // the same bytes per block, addressed [head][token][dim]
      cache.desc.head_stride = int64_t(bs) * c.head_dim;
      cache.desc.token_stride = c.head_dim;
    }
    cache.k.fill_random(rng);
    cache.v.fill_random(rng);
    std::vector<int32_t> ids(total_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    tables.assign(size_t(lens.size()) * max_blocks, -1);
    size_t next = 0;
    for (size_t s = 0; s < lens.size(); ++s) {
      const int32_t L = lens[s];
      for (int32_t b = 0; b * int32_t(bs) < L; ++b) {
        const int32_t first = b * int32_t(bs), last = std::min(L, first + int32_t(bs)) - 1;
        const bool released = c.window > 0 && last < L - int32_t(c.window) && first >= int32_t(c.sink);
        // Blocks a sliding window released read -1, as the manager exports them.
        tables[s * max_blocks + size_t(b)] = released ? -1 : ids[next];
        next++;
      }
    }
    const int64_t pad = c.strided ? 8 : 0;
    q_hs = c.head_dim + pad;
    q_ss = int64_t(num_q_heads) * q_hs + (c.strided ? 24 : 0);
    o_hs = c.head_dim + pad;
    o_ss = int64_t(num_q_heads) * o_hs + (c.strided ? 40 : 0);
    q = Tensor(c.dtype, size_t(q_ss) * lens.size());
    q.fill_random(rng, -2.f, 2.f);
    out = Tensor(c.dtype, size_t(o_ss) * lens.size());
    out.poison();
    reference();
  }

  double scale() const { return 1.0 / std::sqrt(double(cs.head_dim)); }

  // Written for clarity: logits for the attended tokens, float64 softmax, weighted sum of V.
  void reference() {
    const uint32_t D = cs.head_dim, bs = cs.block_size;
    ref.assign(lens.size() * num_q_heads * D, 0.0);
    for (size_t s = 0; s < lens.size(); ++s) {
      const int32_t L = lens[s];
      for (uint32_t h = 0; h < num_q_heads; ++h) {
        const uint32_t kvh = h / cs.group;
        std::vector<int32_t> toks;
        for (int32_t t = 0; t < L; ++t)
          if (cs.window == 0 || t >= L - int32_t(cs.window) || t < int32_t(cs.sink)) toks.push_back(t);
        if (toks.empty()) continue;
        std::vector<double> logit(toks.size());
        for (size_t i = 0; i < toks.size(); ++i) {
          const int32_t t = toks[i];
          const int32_t blk = tables[s * max_blocks + size_t(t) / bs];
          double dot = 0;
          for (uint32_t d = 0; d < D; ++d)
            dot += double(q.get(size_t(int64_t(s) * q_ss + h * q_hs + d))) *
                   double(cache.k.get(cache.offset(blk, t % bs, kvh, d)));
          double x = scale() * dot;
          if (cs.soft_cap > 0) x = cs.soft_cap * std::tanh(x / cs.soft_cap);
          logit[i] = x;
        }
        const double mx = *std::max_element(logit.begin(), logit.end());
        double sum = 0;
        for (double& x : logit) sum += (x = std::exp(x - mx));
        for (size_t i = 0; i < toks.size(); ++i) {
          const int32_t t = toks[i];
          const int32_t blk = tables[s * max_blocks + size_t(t) / bs];
          for (uint32_t d = 0; d < D; ++d)
            ref[(s * num_q_heads + h) * D + d] += logit[i] / sum * double(cache.v.get(cache.offset(blk, t % bs, kvh, d)));
        }
      }
    }
  }

  kvb_attention_args args(void* q_ptr, void* out_ptr, const int32_t* tab, const int32_t* len, void* ws, size_t ws_size) const {
    kvb_attention_args a;
    kvb_attention_args_init(&a);
    set_paged(a, uint32_t(lens.size()), num_q_heads, max_blocks, q_ptr, out_ptr, tab, len);
    set_mask(a, cs.soft_cap, cs.window, cs.sink);
    a.q_seq_stride = q_ss;
    a.q_head_stride = q_hs;
    a.out_seq_stride = o_ss;
    a.out_head_stride = o_hs;
    a.scale = float(scale());
    a.workspace = ws;
    a.workspace_size = ws_size;
    return a;
  }

  // Every output element matches `want(s, h, d)`; padding between rows still holds the poison.
  // worst: if not null, raised to the largest |got - want|.
  template <class Want>
  int compare(const Tensor& got, Want want, const char* what, double* worst = nullptr) const {
    int bad = 0;
    std::vector<bool> logical(got.n, false);
    for (size_t s = 0; s < lens.size(); ++s)
      for (uint32_t h = 0; h < num_q_heads; ++h)
        for (uint32_t d = 0; d < cs.head_dim; ++d) {
          const size_t i = size_t(int64_t(s) * o_ss + h * o_hs + d);
          logical[i] = true;
          const double w = want(s, h, d), g = got.get(i);
          if (worst) *worst = std::max(*worst, std::fabs(g - w));
          if (!close(g, w, cs.dtype) && bad++ < 3)
            fprintf(stderr, "  %s %s D=%u bs=%u G=%u win=%u cap=%g: seq %zu (len %d) head %u d %u: got %g want %g\n", what,
                    dname(cs.dtype), cs.head_dim, cs.block_size, cs.group, cs.window, (double)cs.soft_cap, s, lens[s], h,
                    d, g, w);
        }
    return padding_overwritten(got, logical, what, bad);
  }
};

std::vector<Case> cases() {
  std::vector<Case> out;
  sweep_shapes(out, 1000, [](unsigned i) { return 40 + i; });
  // Odd group sizes (query-head chunks on CUDA), MQA, block sizes 1 and 64, and a big window.
  out.push_back({KVB_DTYPE_FP16, 128, 16, 1, 12, 0, 0, 0.f, false, 77});
  out.push_back({KVB_DTYPE_BF16, 64, 64, 2, 3, 0, 0, 30.f, true, 78});
  out.push_back({KVB_DTYPE_FP32, 128, 1, 1, 16, 0, 0, 0.f, false, 79});
  out.push_back({KVB_DTYPE_FP16, 256, 32, 2, 6, 10000, 0, 0.f, false, 80});
  // Enough K/V (> 1 MiB) for the CPU kernel to share the items out over threads.
  out.push_back({KVB_DTYPE_FP16, 128, 16, 8, 4, 0, 0, 0.f, false, 81});
  out.push_back({KVB_DTYPE_BF16, 256, 16, 8, 2, 200, 3, 20.f, true, 82});
  // Many kv heads with large groups: the CPU kernel splits the kv heads of a sequence over work items.
  out.push_back({KVB_DTYPE_FP16, 256, 16, 16, 16, 0, 0, 0.f, false, 83});
  // A group above 16 query heads: two tensor-core chunks of 10 per kv head on CUDA.
  out.push_back({KVB_DTYPE_BF16, 64, 16, 2, 20, 300, 2, 0.f, true, 84});
  return out;
}

// Head-major caches, each dtype, both head blockings of the decode item (G <= 2 and G > 2).
std::vector<Case> hnd_cases() {
  return {{KVB_DTYPE_BF16, 128, 16, 2, 4, 0, 0, 0.f, false, 90, true},
          {KVB_DTYPE_BF16, 64, 32, 4, 1, 50, 4, 0.f, true, 91, true},
          {KVB_DTYPE_FP16, 256, 16, 2, 2, 0, 0, 10.f, false, 92, true},
          {KVB_DTYPE_FP32, 128, 8, 1, 8, 0, 0, 0.f, false, 93, true}};
}

void run_cpu(Problem& p) {
  size_t ws = 0;
  kvb_attention_args a = p.args(nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  CHECK_OK(kvb_paged_attention_workspace_size(&p.cache.desc, &a, &ws));
  std::vector<float> workspace(ws / 4 + 4);
  a = p.args(p.q.data(), p.out.data(), p.tables.data(), p.lens.data(), workspace.data(), ws);
  CHECK_OK(kvb_paged_attention(&p.cache.desc, &a, nullptr));
}

namespace simd = kvb::kern::cpu::simd;

// The path chosen at start-up: KVB_CPU_ISA when it names a supported path, else the widest supported.
void test_isa_selection() {
  simd::Isa want = simd::Isa::baseline, env_isa;
  for (int i = 0; i < simd::kNumIsas; ++i)
    if (simd::isa_supported(simd::Isa(i))) want = simd::Isa(i);
  const char* env = std::getenv("KVB_CPU_ISA");
  if (env && simd::parse_isa(env, &env_isa) && int(env_isa) < int(want)) want = env_isa;
  CHECK(simd::isa() == want);
  CHECK(simd::isa_supported(simd::Isa::baseline));
  simd::Isa x;
  CHECK(simd::parse_isa("avx2", &x) && x == simd::Isa::avx2);
  CHECK(!simd::parse_isa("sse9", &x));
  printf("   cpu paths:");
  for (int i = 0; i < simd::kNumIsas; ++i)
    printf(" %s%s", simd::isa_name(simd::Isa(i)), simd::isa_supported(simd::Isa(i)) ? "" : " (not here)");
  printf("; default %s\n", simd::isa_name(simd::isa()));
  const std::string name = std::string(simd::isa_name(simd::isa())) + (kvb::kern::cpu::amx::active() ? "+amx" : "");
  CHECK(name == kvb_cpu_isa());
}

// Every case (and head-major caches) on every code path this machine supports, each against the float64
// reference, checking that the path asked for ran (bf16 caches on avx512bf16: the pair dot products) and
// that no path's largest error per dtype exceeds the portable path's by more than half
// (KVB_TEST_QUICK=1, as under valgrind: the default path only).
void test_cpu_against_reference() {
  const simd::Isa initial = simd::isa();
  const char* quick = std::getenv("KVB_TEST_QUICK");
  const bool all = !(quick && std::strcmp(quick, "1") == 0);
  double worst[simd::kNumIsas][3] = {};  // [path][dtype]
  bool ran[simd::kNumIsas] = {};
  for (int i = 0; i < simd::kNumIsas; ++i) {
    if ((!all && simd::Isa(i) != initial) || !simd::force_isa(simd::Isa(i))) continue;
    ran[i] = true;
    int bad = 0, split = 0;
    std::vector<Case> all_cases = cases(), hnd = hnd_cases();
    all_cases.insert(all_cases.end(), hnd.begin(), hnd.end());
    for (const Case& c : all_cases) {
      Problem p(c);
      size_t ws = 0;
      kvb_attention_args a = p.args(nullptr, nullptr, nullptr, nullptr, nullptr, 0);
      CHECK_OK(kvb_paged_attention_workspace_size(&p.cache.desc, &a, &ws));
      split += ws > 0;
      run_cpu(p);
      const kvb::kern::cpu::DecodePath path = kvb::kern::cpu::last_decode_path();
      CHECK(path.isa == i);
      CHECK(path.pairs == (simd::Isa(i) == simd::Isa::avx512bf16 && c.dtype == KVB_DTYPE_BF16));
      const uint32_t D = c.head_dim, H = p.num_q_heads;
      bad += p.compare(p.out, [&](size_t s, uint32_t h, uint32_t d) { return p.ref[(s * H + h) * D + d]; },
                       simd::isa_name(simd::Isa(i)), &worst[i][c.dtype]);
    }
    CHECK(bad == 0);
    CHECK(split > 0);  // the long sequences exercise the split-K path
    printf("   %s: max |out - float64| fp16 %.3g, bf16 %.3g, fp32 %.3g\n", simd::isa_name(simd::Isa(i)),
           worst[i][KVB_DTYPE_FP16], worst[i][KVB_DTYPE_BF16], worst[i][KVB_DTYPE_FP32]);
  }
  for (int i = 1; i < simd::kNumIsas; ++i)
    for (int dt = 0; dt < 3 && ran[0] && ran[i]; ++dt) CHECK(worst[i][dt] <= 1.5 * worst[0][dt]);
  simd::force_isa(initial);
}

void test_cpu_zero_length_batch() {
  Case c{KVB_DTYPE_FP32, 64, 16, 2, 2, 0, 0, 0.f, false, 5};
  Problem p(c);
  std::fill(p.lens.begin(), p.lens.end(), 0);
  run_cpu(p);
  for (size_t s = 0; s < p.lens.size(); ++s)
    for (uint32_t i = 0; i < p.num_q_heads * 64; ++i) CHECK(p.out.get(s * size_t(p.o_ss) + i) == 0.f);
}

void test_cpu_failed_call_writes_nothing() {
  Case c{KVB_DTYPE_FP16, 64, 16, 2, 4, 0, 0, 0.f, false, 6};
  Problem p(c);
  p.tables[5 * p.max_blocks + 3] = int32_t(p.cache.desc.num_blocks);  // inside the used range
  size_t ws = 0;
  kvb_attention_args a = p.args(nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  CHECK_OK(kvb_paged_attention_workspace_size(&p.cache.desc, &a, &ws));
  std::vector<float> workspace(ws / 4 + 4);
  a = p.args(p.q.data(), p.out.data(), p.tables.data(), p.lens.data(), workspace.data(), ws);
  CHECK_STATUS(kvb_paged_attention(&p.cache.desc, &a, nullptr), KVB_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvb_last_error(), "block_tables[5][3]") != nullptr);
  for (size_t i = 0; i < p.out.n; ++i) CHECK(std::isnan(p.out.get(i)));
  p.tables[5 * p.max_blocks + 3] = -1;
  CHECK_STATUS(kvb_paged_attention(&p.cache.desc, &a, nullptr), KVB_ERR_INVALID_ARGUMENT);
  p.lens[5] = int32_t(p.max_blocks * 16 + 1);  // longer than the table
  CHECK_STATUS(kvb_paged_attention(&p.cache.desc, &a, nullptr), KVB_ERR_INVALID_ARGUMENT);
  p.lens[5] = -1;
  CHECK_STATUS(kvb_paged_attention(&p.cache.desc, &a, nullptr), KVB_ERR_INVALID_ARGUMENT);
}

#if KVB_WITH_CUDA
// The CUDA kernel on the same inputs as the CPU kernel, optionally captured in a CUDA graph.
int run_cuda_case(Problem& p, bool graph) {
  run_cpu(p);
  const Tensor cpu_out = p.out;
  const DeviceCache dev_cache(p.cache);
  Tensor out(p.cs.dtype, p.out.n);
  out.poison();
  DeviceBuffer q(p.q.data(), p.q.bytes()), o(out.data(), out.bytes());
  DeviceBuffer tab(p.tables.data(), p.tables.size() * 4), len(p.lens.data(), p.lens.size() * 4);
  attend_cuda(dev_cache.desc, p.args(q.p, o.p, static_cast<int32_t*>(tab.p), static_cast<int32_t*>(len.p), nullptr, 0),
              graph);
  o.to_host(out.data());
  return p.compare(out, [&](size_t s, uint32_t h, uint32_t d) {
    return double(cpu_out.get(size_t(int64_t(s) * p.o_ss + h * p.o_hs + d)));
  }, graph ? "cuda-graph" : "cuda");
}

void test_cuda_against_cpu() {
  int bad = 0, i = 0;
  for (const Case& c : cases()) {
    Problem p(c);
    bad += run_cuda_case(p, (i++ % 7) == 3);
  }
  CHECK(bad == 0);
}

void test_cuda_rejects_host_pointers() {
  Case c{KVB_DTYPE_FP16, 64, 16, 2, 2, 0, 0, 0.f, false, 9};
  Problem p(c);
  const DeviceCache dev_cache(p.cache);
  size_t ws = 0;
  kvb_attention_args a = p.args(nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  CHECK_OK(kvb_paged_attention_workspace_size(&dev_cache.desc, &a, &ws));
  DeviceBuffer work(ws);
  a = p.args(p.q.data(), p.out.data(), p.tables.data(), p.lens.data(), work.p, ws);
  CHECK_STATUS(kvb_paged_attention(&dev_cache.desc, &a, nullptr), KVB_ERR_INVALID_ARGUMENT);
}
#endif

}  // namespace

int main() {
  RUN_TEST(test_isa_selection);
  RUN_TEST(test_cpu_against_reference);
  RUN_TEST(test_cpu_zero_length_batch);
  RUN_TEST(test_cpu_failed_call_writes_nothing);
  RUN_CUDA_TEST(test_cuda_against_cpu);
  RUN_CUDA_TEST(test_cuda_rejects_host_pointers);
  TEST_SUMMARY();
}
