// FP8 KV caches on CUDA. On every build: the software fp8 -> fp16 conversion the
// CUDA kernels use on sm_80 (kernels/common/fp8.h, the same __host__ __device__ function) checked for all 256
// codes of both formats in every byte position against the reference decoder, NaN codes included.
// With a GPU: CUDA decode attention on fp8 caches against the float64 reference on the dequantized
// cache (the q dtype's tolerance: the kernel adds no error beyond quantization), against the CPU
// kernel on the same cache bytes, and within the documented tolerance of the unquantized values;
// both formats, fp16 / bf16 queries, per-tensor and per-head scales, GQA groups 1 to 20 (4 and more on
// the tensor-core kernel), soft cap, window + sinks, split and single-partition launches, empty
// sequences. CUDA prefill / extend on fp8
// caches against the CPU kernel on the same cache bytes (the fp16 / bf16 CUDA-vs-CPU tolerance): ragged
// batches of prompts, chunks over a cached prefix, short queries (1 to 4 tokens) and empty sequences,
// GQA groups 1 to 8 (packed tiles over 128 rows), head dims 64 / 128 / 256, window + sinks, soft cap,
// key splits, per-head scales, both formats, fp16 / bf16 queries, graph capture. SKIP without a device.
#include <cmath>
#include <cstdio>
#include <cstring>

#include "../../kernels/common/fp8.h"
#include "fp8_problem.h"
#include "kernels_util.h"

using namespace kt;
using namespace fp8t;
namespace fp8 = kvb::kern::fp8;

namespace {

// fp16 bits -> double, from the format's definition.
double half_value(uint16_t h) {
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 31) return m ? std::numeric_limits<double>::quiet_NaN() : sign * std::numeric_limits<double>::infinity();
  if (e == 0) return sign * std::ldexp(double(m), -24);
  return sign * std::ldexp(1.0 + double(m) / 1024.0, e - 15);
}

// Codes b0..b3 through the software conversion; each fp16 (times 256 for e4m3) must equal the code's
// value exactly (same sign for zeros), or be NaN exactly when the code is; counts failures in *bad.
void check_four(const Format& f, const uint8_t (&b)[4], int* bad) {
  const uint32_t x = uint32_t(b[0]) | uint32_t(b[1]) << 8 | uint32_t(b[2]) << 16 | uint32_t(b[3]) << 24;
  uint32_t lo = 0, hi = 0;
  if (f.e5m2)
    fp8::e5m2x4_to_half2x2(x, &lo, &hi);
  else
    fp8::e4m3x4_to_half2x2(x, &lo, &hi);
  const uint16_t h[4] = {uint16_t(lo), uint16_t(lo >> 16), uint16_t(hi), uint16_t(hi >> 16)};
  for (int i = 0; i < 4; ++i) {
    const double got = half_value(h[i]) * (f.e5m2 ? 1.0 : double(fp8::kE4m3ViaHalfFactor));
    const double want = ref_decode(f, b[i]);
    const float lib = f.e5m2 ? fp8::e5m2_to_float(b[i]) : fp8::e4m3_to_float(b[i]);
    const bool ok = std::isnan(want) ? std::isnan(got) && std::isnan(lib)
                                     : got == want && double(lib) == want && std::signbit(got) == std::signbit(want);
    if (!ok && (*bad)++ < 3)
      fprintf(stderr, "  %s code 0x%02x (byte %d): fp16 0x%04x = %g, want %g\n", f.e5m2 ? "e5m2" : "e4m3", b[i], i,
              h[i], got, want);
  }
}

void test_half_trick_every_code() {
  for (const Format* f : {&kE4m3, &kE5m2}) {
    int bad = 0;
    for (int c = 0; c < 256; ++c)
      for (int pos = 0; pos < 4; ++pos) {
        // the code in one byte, neighbours that set every other bit pattern around it
        uint8_t b[4] = {uint8_t(c * 7 + 1), uint8_t(c * 13 + 0x7f), uint8_t(255 - c), uint8_t(c ^ 0x80)};
        b[pos] = uint8_t(c);
        check_four(*f, b, &bad);
      }
    CHECK(bad == 0);
  }
}

#if KVB_WITH_CUDA
const AttnCase kCudaCases[] = {
    {KVB_DTYPE_FP8_E4M3, KVB_DTYPE_FP16, 2, 1, 64, false, 0, 0, 0.f},
    {KVB_DTYPE_FP8_E4M3, KVB_DTYPE_FP16, 2, 4, 128, true, 0, 0, 0.f},
    {KVB_DTYPE_FP8_E4M3, KVB_DTYPE_BF16, 1, 8, 64, false, 40, 4, 0.f},
    {KVB_DTYPE_FP8_E4M3, KVB_DTYPE_BF16, 2, 2, 256, true, 0, 0, 5.f},
    {KVB_DTYPE_FP8_E4M3, KVB_DTYPE_FP16, 4, 6, 128, false, 0, 0, 0.f},
    {KVB_DTYPE_FP8_E5M2, KVB_DTYPE_FP16, 2, 3, 64, true, 0, 0, 0.f},
    {KVB_DTYPE_FP8_E5M2, KVB_DTYPE_FP16, 1, 1, 128, false, 33, 2, 8.f},
    {KVB_DTYPE_FP8_E5M2, KVB_DTYPE_BF16, 2, 4, 64, false, 0, 0, 0.f},
    {KVB_DTYPE_FP8_E5M2, KVB_DTYPE_BF16, 1, 8, 256, true, 0, 0, 0.f},
    // GQA groups of dtiles::kMinGroup (4) and more run the tensor-core kernel (decode_mma.cu): soft cap,
    // window + sinks, two head chunks (group 20), every head dim, both formats and query types
    {KVB_DTYPE_FP8_E4M3, KVB_DTYPE_FP16, 2, 4, 64, true, 0, 0, 6.f},
    {KVB_DTYPE_FP8_E4M3, KVB_DTYPE_BF16, 1, 20, 128, false, 100, 2, 0.f},
    {KVB_DTYPE_FP8_E5M2, KVB_DTYPE_FP16, 2, 5, 256, false, 0, 0, 12.f},
    {KVB_DTYPE_FP8_E5M2, KVB_DTYPE_BF16, 2, 16, 128, true, 64, 0, 0.f},
    {KVB_DTYPE_FP8_E4M3, KVB_DTYPE_FP16, 1, 4, 256, true, 300, 5, 0.f},
};

void test_cuda_decode_fp8() {
  for (const AttnCase& cs : kCudaCases) {
    // ragged; 600 and 3000 tokens split into partitions; an empty sequence writes zeros
    Fp8Problem p(cs.cd, cs.qd, cs.H, cs.G, cs.D, cs.per_head, {{0, 1}, {1, 1}, {17, 1}, {600, 1}, {3000, 1}},
                 11 + cs.D + cs.G);
    // CPU on the host cache
    Tensor cpu_out(cs.qd, p.q.n);
    cpu_out.poison();
    kvb_attention_args a = decode_args(p, cs, cpu_out.data());
    size_t ws = 0;
    CHECK_OK(kvb_paged_attention_workspace_size(&p.cache.desc, &a, &ws));
    std::vector<float> host_ws(ws / 4 + 4);
    a.workspace = host_ws.data();
    a.workspace_size = ws;
    CHECK_OK(kvb_paged_attention(&p.cache.desc, &a, nullptr));
    // CUDA on a device copy of the same bytes
    DeviceCache dc(p.cache);
    const kvb_cache_desc& g = dc.desc;
    Tensor out(cs.qd, p.q.n);
    out.poison();
    DeviceBuffer q(p.q.data(), p.q.bytes()), o(out.data(), out.bytes());
    DeviceBuffer tab(p.tables.data(), p.tables.size() * 4), len(p.lens.data(), p.lens.size() * 4);
    a.q = q.p;
    a.out = o.p;
    a.block_tables = static_cast<const int32_t*>(tab.p);
    a.seq_lens = static_cast<const int32_t*>(len.p);
    CHECK_OK(kvb_paged_attention_workspace_size(&g, &a, &ws));
    CHECK(ws > 0);
    DeviceBuffer work(ws);
    a.workspace = work.p;
    a.workspace_size = ws;
    CHECK_OK(kvb_paged_attention(&g, &a, nullptr));
    o.to_host(out.data());  // cudaMemcpy on the legacy default stream: after the kernels
    std::vector<std::pair<size_t, int32_t>> rows;
    for (size_t s = 0; s < p.seqs.size(); ++s) rows.push_back({s, p.seqs[s].len - 1});
    int bad = 0;
    const double raw =
        check_rows(p, out, rows, float(1.0 / std::sqrt(double(cs.D))), cs.cap, cs.window, cs.sink, &bad);
    for (size_t i = 0; i < out.n; ++i)
      if (!close(out.get(i), cpu_out.get(i), cs.qd) && bad++ < 3)
        fprintf(stderr, "  %s q %s element %zu: CUDA %.6f CPU %.6f\n", dname(cs.cd), dname(cs.qd), i, out.get(i),
                cpu_out.get(i));
    CHECK(bad == 0);
    if (raw > raw_tolerance(cs.cd)) {
      fprintf(stderr, "  CUDA %s: %.4f from the unquantized reference\n", dname(cs.cd), raw);
      CHECK(raw <= raw_tolerance(cs.cd));
    }
  }
}

// Scalar scales with more kv heads than the per-head array holds: every head reads k_scale / v_scale.
void test_cuda_decode_many_heads() {
  Fp8Problem p(KVB_DTYPE_FP8_E4M3, KVB_DTYPE_FP16, 160, 1, 64, false, {{40, 1}, {5, 1}}, 99);
  kvb_attention_args a;
  kvb_attention_args_init(&a);
  a.q_dtype = KVB_DTYPE_FP16;
  a.num_seqs = uint32_t(p.seqs.size());
  a.num_q_heads = 160;
  a.max_blocks_per_seq = p.max_blocks;
  DeviceCache dc(p.cache);
  const kvb_cache_desc& g = dc.desc;
  Tensor out(KVB_DTYPE_FP16, p.q.n);
  out.poison();
  DeviceBuffer q(p.q.data(), p.q.bytes()), o(out.data(), out.bytes());
  DeviceBuffer tab(p.tables.data(), p.tables.size() * 4), len(p.lens.data(), p.lens.size() * 4);
  a.q = q.p;
  a.out = o.p;
  a.block_tables = static_cast<const int32_t*>(tab.p);
  a.seq_lens = static_cast<const int32_t*>(len.p);
  CHECK_OK(kvb_paged_attention(&g, &a, nullptr));
  o.to_host(out.data());
  std::vector<std::pair<size_t, int32_t>> rows = {{0, 39}, {1, 4}};
  int bad = 0;
  check_rows(p, out, rows, 0.125f, 0.f, 0, 0, &bad);
  CHECK(bad == 0);
}

// Prefill on fp8 caches: CUDA against the CPU kernel on the same bytes (the CPU's fp8 prefill is checked
// against the float64 reference on the dequantized cache in kernels_fp8.cpp). Returns the cases with a
// split key range.
struct PrefillFp8Case {
  AttnCase a;
  std::vector<Seq> seqs;
  bool graph;
};

int run_prefill_case(const PrefillFp8Case& pc, int* bad) {
  const AttnCase& cs = pc.a;
  Fp8Problem p(cs.cd, cs.qd, cs.H, cs.G, cs.D, cs.per_head, pc.seqs, 7 + cs.D * 3 + cs.G);
  Tensor cpu_out(cs.qd, p.q.n);
  cpu_out.poison();
  kvb_prefill_args a = prefill_args(p, cs, cpu_out.data());
  CHECK_OK(kvb_prefill_attention(&p.cache.desc, &a, nullptr));

  DeviceCache dc(p.cache);
  const kvb_cache_desc& g = dc.desc;
  Tensor out(cs.qd, p.q.n);
  out.poison();
  DeviceBuffer q(p.q.data(), p.q.bytes()), o(out.data(), out.bytes());
  DeviceBuffer qs(p.qstart.data(), p.qstart.size() * 4), len(p.lens.data(), p.lens.size() * 4);
  DeviceBuffer tab(p.tables.data(), p.tables.size() * 4);
  a.q = q.p;
  a.out = o.p;
  a.query_start = static_cast<const int32_t*>(qs.p);
  a.seq_lens = static_cast<const int32_t*>(len.p);
  a.block_tables = static_cast<const int32_t*>(tab.p);
  size_t ws = 0;
  CHECK_OK(kvb_prefill_attention_workspace_size(&g, &a, &ws));
  DeviceBuffer work(ws);
  a.workspace = work.p;
  run_on_device(pc.graph, [&](void* stream) { CHECK_OK(kvb_prefill_attention(&g, &a, stream)); });
  o.to_host(out.data());
  const size_t rows_elems = size_t(p.total_q) * cs.H * cs.G * cs.D;  // q / out hold at least one row
  for (size_t i = 0; i < out.n; ++i) {
    const bool row = i < rows_elems;
    if (row ? !close(out.get(i), cpu_out.get(i), cs.qd) : !std::isnan(out.get(i))) {
      if ((*bad)++ < 3)
        fprintf(stderr, "  prefill %s q %s D %u G %u element %zu: CUDA %.6f CPU %.6f\n", dname(cs.cd), dname(cs.qd),
                cs.D, cs.G, i, out.get(i), cpu_out.get(i));
    }
  }
  return ws > 0;
}

void test_cuda_prefill_fp8() {
  // {len, q_len}: a prompt, chunks over a cached prefix, short queries (the decode path's shape for
  // 16-bit caches), an empty sequence, a prompt of several 128-row tiles.
  const std::vector<Seq> mixed = {{50, 50}, {130, 20}, {0, 0}, {77, 1}, {300, 140}, {9, 3}, {40, 4}};
  const std::vector<Seq> split = {{2300, 30}, {17, 2}, {700, 200}};  // 2300 keys: the key range splits
  const PrefillFp8Case cases[] = {
      {{KVB_DTYPE_FP8_E4M3, KVB_DTYPE_FP16, 2, 1, 64, false, 0, 0, 0.f}, mixed, false},
      {{KVB_DTYPE_FP8_E4M3, KVB_DTYPE_FP16, 2, 4, 128, true, 0, 0, 0.f}, mixed, true},
      {{KVB_DTYPE_FP8_E4M3, KVB_DTYPE_BF16, 1, 8, 64, false, 40, 4, 0.f}, mixed, false},
      {{KVB_DTYPE_FP8_E4M3, KVB_DTYPE_BF16, 2, 2, 256, true, 0, 0, 5.f}, mixed, false},
      {{KVB_DTYPE_FP8_E4M3, KVB_DTYPE_FP16, 4, 6, 128, false, 64, 0, 0.f}, split, false},
      {{KVB_DTYPE_FP8_E5M2, KVB_DTYPE_FP16, 2, 3, 64, true, 0, 0, 0.f}, split, true},
      {{KVB_DTYPE_FP8_E5M2, KVB_DTYPE_FP16, 1, 1, 128, false, 33, 2, 8.f}, mixed, false},
      {{KVB_DTYPE_FP8_E5M2, KVB_DTYPE_BF16, 2, 4, 64, false, 0, 0, 0.f}, mixed, false},
      {{KVB_DTYPE_FP8_E5M2, KVB_DTYPE_BF16, 1, 8, 256, true, 0, 0, 0.f}, split, false},
      {{KVB_DTYPE_FP8_E4M3, KVB_DTYPE_BF16, 2, 2, 128, true, 100, 3, 10.f}, split, false},
  };
  int bad = 0, splits = 0;
  for (const PrefillFp8Case& pc : cases) splits += run_prefill_case(pc, &bad);
  CHECK(bad == 0);
  CHECK(splits >= 3);  // the split cases did split (plan_prefill), and were merged
}
#endif

}  // namespace

int main() {
  RUN_TEST(test_half_trick_every_code);
  RUN_CUDA_TEST(test_cuda_decode_fp8);
  RUN_CUDA_TEST(test_cuda_decode_many_heads);
  RUN_CUDA_TEST(test_cuda_prefill_fp8);
  TEST_SUMMARY();
}
