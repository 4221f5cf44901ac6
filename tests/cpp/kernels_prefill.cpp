// Paged prefill / extend attention: the CPU kernel against a float64 reference written for clarity over
// ragged batches (every q_len / cached-prefix combination, window + sinks, soft cap, GQA, every dtype,
// head_dim and several block sizes, random block permutations, poisoned outputs); whole-prompt ==
// chunked == token-by-token decode; every bad argument refused by name; then the CUDA kernels against
// the CPU kernel on the same inputs (SKIP without a GPU). KVB_TEST_QUICK=1 runs a subset (valgrind).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <string>

#include "../../kernels/cascade/cascade.h"
#include "../../kernels/common/simd_cpu.h"
#include "kernels_util.h"
#include "prefill_problem.h"

using namespace kt;

namespace {

std::vector<Config> configs() {
  std::vector<Config> out;
  sweep_shapes(out, 2000, [](unsigned i) { return 20 + 3 * i; });
  // Odd group (3, 12), MQA, block sizes 1 and 64, a sink larger than the window.
  out.push_back({KVB_DTYPE_FP16, 128, 16, 1, 12, 0, 0, 0.f, false, 77});
  out.push_back({KVB_DTYPE_BF16, 64, 64, 2, 3, 0, 0, 30.f, true, 78});
  out.push_back({KVB_DTYPE_FP32, 128, 1, 1, 16, 0, 0, 0.f, false, 79});
  out.push_back({KVB_DTYPE_FP16, 64, 8, 2, 2, 6, 12, 0.f, false, 80});
  return out;
}

void run_cpu(Problem& p) {
  kvb_prefill_args a = p.host_args();
  size_t ws = 1;
  CHECK_OK(kvb_prefill_attention_workspace_size(&p.cache.desc, &a, &ws));
  CHECK(ws == 0);  // the CPU never splits the keys
  CHECK_OK(kvb_prefill_attention(&p.cache.desc, &a, nullptr));
}

namespace simd = kvb::kern::cpu::simd;

// Every configuration on every CPU vector path this machine supports (KVB_TEST_QUICK=1, as under
// valgrind: the default path only), each against the float64 reference.
void test_cpu_against_reference() {
  const std::vector<Config> all = configs();
  on_each_isa([&](simd::Isa isa) {
    int bad = 0, n = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      if (quick() && i % 6 != 0) continue;
      std::mt19937 rng(all[i].seed);
      Problem p(all[i], ragged(all[i].block_size, rng, quick() || all[i].head_dim == 256));
      run_cpu(p);
      // The forced path ran: its vector loops, and AMX tiles for every dtype but fp32 where active.
      const kvb::kern::cpu::RowsPath ran = kvb::kern::cpu::last_rows_path();
      CHECK(ran.isa == int(isa));
      CHECK(ran.amx == (kvb::kern::cpu::amx::active() && all[i].dtype != KVB_DTYPE_FP32));
      bad += p.compare_ref(p.out, path_name().c_str());
      ++n;
    }
    CHECK(bad == 0);
    CHECK(n > 0);
  }, quick());
}

// Large enough for several threads and query tiles per sequence.
void test_cpu_threaded() {
  Config c{KVB_DTYPE_BF16, 128, 16, 4, 4, 0, 0, 0.f, false, 31};
  std::vector<SeqSpec> s = {{quick() ? 40 : 300, 64}, {1, 500}, {quick() ? 17 : 129, 0}};
  Problem p(c, s);
  run_cpu(p);
  CHECK(p.compare_ref(p.out, "cpu-threaded") == 0);
}

// kvb_paged_attention on the problem's cache with its window, sinks and soft cap (a gives the batch).
void run_decode(const Problem& p, kvb_attention_args& a) {
  set_mask(a, p.cf.soft_cap, p.cf.window, p.cf.sink);
  attend_cpu(p.cache.desc, a);
}

// Decode rows (q_len 1) in a prefill call run the decode kernel's work item: a batch of only decode rows
// gives kvb_paged_attention's output bit for bit (same batch, same strides), and a mixed batch's decode
// rows those of a decode call over just those sequences; both against the float64 reference too, on
// every CPU vector path, with windows + sinks, soft caps, GQA and every dtype.
void test_cpu_decode_rows() {
  const simd::Isa initial = simd::isa();
  const Config cfgs[] = {{KVB_DTYPE_FP16, 128, 16, 2, 4, 0, 0, 0.f, true, 61},
                         {KVB_DTYPE_BF16, 64, 8, 2, 1, 40, 4, 0.f, false, 62},
                         {KVB_DTYPE_FP32, 256, 16, 1, 12, 0, 0, 7.f, true, 63},
                         {KVB_DTYPE_FP16, 64, 32, 2, 8, 100, 0, 5.f, false, 64}};
  for (int isa = 0; isa < simd::kNumIsas; ++isa) {
    if (!simd::force_isa(simd::Isa(isa))) continue;
    for (const Config& c : cfgs)
      for (bool mixed : {false, true}) {
        const int32_t b = int32_t(c.block_size);
        std::vector<SeqSpec> specs = {{1, 0}, {1, b / 2}, {1, 3 * b + 5}, {1, 700}, {1, 2 * b - 1}};
        if (mixed) specs.insert(specs.begin() + 2, {{37, 20}, {0, 9}, {b + 1, 0}});
        Problem p(c, specs);
        run_cpu(p);
        CHECK(p.compare_ref(p.out, mixed ? "decode rows of a mixed batch" : "decode rows") == 0);
        // The decode call over the q_len 1 sequences, their rows gathered into a dense batch.
        std::vector<size_t> dec;
        for (size_t s = 0; s < specs.size(); ++s)
          if (specs[s].q_len == 1) dec.push_back(s);
        const uint32_t H = p.num_q_heads, D = c.head_dim;
        const size_t es = esize(c.dtype);
        Tensor q(c.dtype, dec.size() * H * D), out(c.dtype, dec.size() * H * D);
        std::vector<int32_t> lens, tables;
        for (size_t k = 0; k < dec.size(); ++k) {
          const size_t s = dec[k];
          lens.push_back(p.lens[s]);
          tables.insert(tables.end(), p.tables.begin() + long(s * p.max_blocks), p.tables.begin() + long((s + 1) * p.max_blocks));
          for (uint32_t h = 0; h < H; ++h)
            std::memcpy(static_cast<char*>(q.data()) + ((k * H + h) * D) * es,
                        static_cast<const char*>(p.q.data()) + size_t(p.qstart[s] * p.q_ts + h * p.q_hs) * es, D * es);
        }
        kvb_attention_args a;
        kvb_attention_args_init(&a);
        a.num_seqs = uint32_t(dec.size());
        a.num_q_heads = H;
        a.max_blocks_per_seq = p.max_blocks;
        a.q = q.data();
        a.out = out.data();
        a.block_tables = tables.data();
        a.seq_lens = lens.data();
        a.scale = float(p.scale());
        run_decode(p, a);
        int differ = 0;
        for (size_t k = 0; k < dec.size(); ++k)
          for (uint32_t h = 0; h < H; ++h)
            for (uint32_t d = 0; d < D; ++d) {
              const float got = p.out.get(size_t(p.qstart[dec[k]] * p.o_ts + h * p.o_hs + d));
              differ += got != out.get((k * H + h) * D + d);
            }
        if (differ) fprintf(stderr, "  %s %s: %d elements differ from the decode call\n", simd::isa_name(simd::Isa(isa)), dname(c.dtype), differ);
        CHECK(differ == 0);
      }
  }
  simd::force_isa(initial);
}

// One prompt three ways: one call, chunks (each over the cache the previous ones filled), and one
// kvb_paged_attention decode call per token. All three agree with each other and the reference.
void consistency(const Config& c, int32_t prompt, int32_t cached) {
  Problem whole(c, {{prompt, cached}});
  run_cpu(whole);
  CHECK(whole.compare_ref(whole.out, "whole") == 0);
  const uint32_t H = whole.num_q_heads, D = c.head_dim;
  auto row_of = [&](const Tensor& t, int32_t r, uint32_t h, uint32_t d) {
    return double(t.get(size_t(r * whole.o_ts + h * whole.o_hs + d)));
  };
  // Chunks of 1, 23, then the rest in pieces of 40.
  Tensor chunked(c.dtype, whole.out.n);
  chunked.poison();
  for (int32_t j0 = 0; j0 < prompt;) {
    const int32_t n = std::min(prompt - j0, j0 == 0 ? 1 : j0 == 1 ? 23 : 40);
    int32_t qs[2] = {0, n}, len = cached + j0 + n;
    kvb_prefill_args a = whole.args(static_cast<const char*>(whole.q.data()) + size_t(j0 * whole.q_ts) * esize(c.dtype),
                                    static_cast<char*>(chunked.data()) + size_t(j0 * whole.o_ts) * esize(c.dtype), qs,
                                    &len, whole.tables.data(), nullptr, 0);
    a.total_q_tokens = uint32_t(n);
    CHECK_OK(kvb_prefill_attention(&whole.cache.desc, &a, nullptr));
    j0 += n;
  }
  // Token by token through the decode call.
  Tensor decoded(c.dtype, whole.out.n);
  decoded.poison();
  for (int32_t j = 0; j < prompt; ++j) {
    kvb_attention_args a;
    kvb_attention_args_init(&a);
    int32_t len = cached + j + 1;
    a.num_seqs = 1;
    a.num_q_heads = H;
    a.max_blocks_per_seq = whole.max_blocks;
    a.q = static_cast<const char*>(whole.q.data()) + size_t(j * whole.q_ts) * esize(c.dtype);
    a.q_head_stride = whole.q_hs;
    a.out = static_cast<char*>(decoded.data()) + size_t(j * whole.o_ts) * esize(c.dtype);
    a.out_head_stride = whole.o_hs;
    a.block_tables = whole.tables.data();
    a.seq_lens = &len;
    run_decode(whole, a);
  }
  CHECK(whole.compare(chunked, [&](int32_t r, uint32_t h, uint32_t d) { return row_of(whole.out, r, h, d); }, "chunked") == 0);
  CHECK(whole.compare(decoded, [&](int32_t r, uint32_t h, uint32_t d) { return row_of(whole.out, r, h, d); }, "decode") == 0);
  (void)D;
}

void test_whole_chunked_decode_agree() {
  consistency({KVB_DTYPE_FP32, 64, 16, 2, 4, 0, 0, 0.f, false, 41}, quick() ? 30 : 90, 0);
  consistency({KVB_DTYPE_FP32, 128, 8, 1, 8, 24, 3, 0.f, true, 42}, quick() ? 30 : 90, 13);
  consistency({KVB_DTYPE_FP16, 64, 32, 2, 1, 0, 0, 10.f, false, 43}, quick() ? 30 : 70, 40);
  if (!quick()) consistency({KVB_DTYPE_BF16, 256, 16, 1, 4, 50, 0, 0.f, false, 44}, 64, 100);
}

// A failed call leaves out untouched; each bad argument is refused with a message that names it.
void test_validation() {
  Config c{KVB_DTYPE_FP16, 64, 16, 2, 4, 0, 0, 0.f, false, 7};
  Problem base(c, {{5, 20}, {1, 40}, {30, 0}});
  struct Bad {
    const char* name;
    void (*edit)(Problem&, kvb_prefill_args&, kvb_cache_desc&);
    kvb_status want;
  };
  static const Bad bads[] = {
      {"num_q_heads", [](Problem&, kvb_prefill_args& a, kvb_cache_desc&) { a.num_q_heads = 0; }, KVB_ERR_INVALID_ARGUMENT},
      {"num_q_heads", [](Problem&, kvb_prefill_args& a, kvb_cache_desc&) { a.num_q_heads = 7; }, KVB_ERR_INVALID_ARGUMENT},
      {"max_blocks_per_seq", [](Problem&, kvb_prefill_args& a, kvb_cache_desc&) { a.max_blocks_per_seq = 0; }, KVB_ERR_INVALID_ARGUMENT},
      {"max_blocks_per_seq", [](Problem&, kvb_prefill_args& a, kvb_cache_desc&) { a.max_blocks_per_seq = 0x10000000u; }, KVB_ERR_INVALID_ARGUMENT},
      {"num_seqs", [](Problem&, kvb_prefill_args& a, kvb_cache_desc&) { a.num_seqs = 70000; }, KVB_ERR_INVALID_ARGUMENT},
      {"total_q_tokens", [](Problem&, kvb_prefill_args& a, kvb_cache_desc&) { a.total_q_tokens = 35; }, KVB_ERR_INVALID_ARGUMENT},
      {"total_q_tokens", [](Problem&, kvb_prefill_args& a, kvb_cache_desc&) { a.total_q_tokens = 0x80000000u; }, KVB_ERR_INVALID_ARGUMENT},
      {"total_q_tokens", [](Problem&, kvb_prefill_args& a, kvb_cache_desc&) { a.num_seqs = 0; }, KVB_ERR_INVALID_ARGUMENT},
      {"query_start[0]", [](Problem& p, kvb_prefill_args&, kvb_cache_desc&) { p.qstart[0] = 1; }, KVB_ERR_INVALID_ARGUMENT},
      {"query_start[2]", [](Problem& p, kvb_prefill_args&, kvb_cache_desc&) { p.qstart[2] = 4; }, KVB_ERR_INVALID_ARGUMENT},
      {"seq_lens[1]", [](Problem& p, kvb_prefill_args&, kvb_cache_desc&) { p.lens[1] = 0; }, KVB_ERR_INVALID_ARGUMENT},
      {"seq_lens[2]", [](Problem& p, kvb_prefill_args&, kvb_cache_desc&) { p.lens[2] = 29; }, KVB_ERR_INVALID_ARGUMENT},
      {"seq_lens[0]", [](Problem& p, kvb_prefill_args&, kvb_cache_desc&) { p.lens[0] = int32_t(p.max_blocks * 16 + 1); }, KVB_ERR_INVALID_ARGUMENT},
      {"block_tables[2][1]", [](Problem& p, kvb_prefill_args&, kvb_cache_desc&) { p.tables[2 * p.max_blocks + 1] = -1; }, KVB_ERR_INVALID_ARGUMENT},
      {"block_tables[0][0]", [](Problem& p, kvb_prefill_args&, kvb_cache_desc& d) { p.tables[0] = int32_t(d.num_blocks); }, KVB_ERR_INVALID_ARGUMENT},
      {"q is NULL", [](Problem&, kvb_prefill_args& a, kvb_cache_desc&) { a.q = nullptr; }, KVB_ERR_INVALID_ARGUMENT},
      {"out is NULL", [](Problem&, kvb_prefill_args& a, kvb_cache_desc&) { a.out = nullptr; }, KVB_ERR_INVALID_ARGUMENT},
      {"query_start is NULL", [](Problem&, kvb_prefill_args& a, kvb_cache_desc&) { a.query_start = nullptr; }, KVB_ERR_INVALID_ARGUMENT},
      {"seq_lens is NULL", [](Problem&, kvb_prefill_args& a, kvb_cache_desc&) { a.seq_lens = nullptr; }, KVB_ERR_INVALID_ARGUMENT},
      {"block_tables is NULL", [](Problem&, kvb_prefill_args& a, kvb_cache_desc&) { a.block_tables = nullptr; }, KVB_ERR_INVALID_ARGUMENT},
      {"q_token_stride", [](Problem&, kvb_prefill_args& a, kvb_cache_desc&) { a.q_token_stride = -1; }, KVB_ERR_INVALID_ARGUMENT},
      {"out_head_stride", [](Problem&, kvb_prefill_args& a, kvb_cache_desc&) { a.out_head_stride = -64; }, KVB_ERR_INVALID_ARGUMENT},
      {"out strides", [](Problem&, kvb_prefill_args& a, kvb_cache_desc&) { a.out_head_stride = 32; }, KVB_ERR_INVALID_ARGUMENT},
      {"out strides", [](Problem&, kvb_prefill_args& a, kvb_cache_desc&) { a.out_token_stride = 64; }, KVB_ERR_INVALID_ARGUMENT},
      {"q_token_stride", [](Problem&, kvb_prefill_args& a, kvb_cache_desc&) { a.q_token_stride = int64_t(1) << 58; }, KVB_ERR_INVALID_ARGUMENT},
      {"scale", [](Problem&, kvb_prefill_args& a, kvb_cache_desc&) { a.scale = NAN; }, KVB_ERR_INVALID_ARGUMENT},
      {"logits_soft_cap", [](Problem&, kvb_prefill_args& a, kvb_cache_desc&) { a.logits_soft_cap = -1.f; }, KVB_ERR_INVALID_ARGUMENT},
      {"sink_tokens", [](Problem&, kvb_prefill_args& a, kvb_cache_desc&) { a.sink_tokens = 4; }, KVB_ERR_INVALID_ARGUMENT},
      {"struct_size", [](Problem&, kvb_prefill_args& a, kvb_cache_desc&) { a.struct_size = 8; }, KVB_ERR_INVALID_ARGUMENT},
      {"head_dim 32", [](Problem&, kvb_prefill_args&, kvb_cache_desc& d) { d.head_dim = 32; }, KVB_ERR_INVALID_ARGUMENT},
#if !KVB_WITH_CUDA
      {"built without CUDA", [](Problem&, kvb_prefill_args&, kvb_cache_desc& d) { d.device_type = KVB_DEVICE_CUDA; }, KVB_ERR_UNSUPPORTED},
#endif
  };
  for (const Bad& b : bads) {
    Problem t = base;
    t.cache.desc.k = t.cache.k.data();
    t.cache.desc.v = t.cache.v.data();
    kvb_prefill_args a = t.host_args();
    kvb_cache_desc d = t.cache.desc;
    b.edit(t, a, d);
    const kvb_status st = kvb_prefill_attention(&d, &a, nullptr);
    if (st != b.want || strstr(kvb_last_error(), b.name) == nullptr) {
      fprintf(stderr, "  bad %s: got %s (%s)\n", b.name, kvb_status_string(st), kvb_last_error());
      CHECK(false);
    }
    for (size_t i = 0; i < t.out.n; ++i)
      if (!std::isnan(t.out.get(i))) {
        fprintf(stderr, "  bad %s: out[%zu] written by a failed call\n", b.name, i);
        CHECK(false);
        break;
      }
  }
  Problem& p = base;
  CHECK_STATUS(kvb_prefill_attention(&p.cache.desc, nullptr, nullptr), KVB_ERR_INVALID_ARGUMENT);
  kvb_prefill_args a = p.host_args();
  CHECK_STATUS(kvb_prefill_attention_workspace_size(&p.cache.desc, &a, nullptr), KVB_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvb_prefill_attention(nullptr, &a, nullptr), KVB_ERR_INVALID_ARGUMENT);
  // The unmodified call works (the table above is not failing for an unrelated reason).
  CHECK_OK(kvb_prefill_attention(&p.cache.desc, &a, nullptr));
  CHECK(p.compare_ref(p.out, "valid") == 0);
  // An empty batch and a batch of sequences without new tokens are no-ops.
  kvb_prefill_args e = a;
  e.num_seqs = 0;
  e.total_q_tokens = 0;
  CHECK_OK(kvb_prefill_attention(&p.cache.desc, &e, nullptr));
}

#if KVB_WITH_CUDA
// The CUDA kernels on the CPU kernel's inputs, optionally captured in a CUDA graph.
int run_cuda_case(Problem& p, bool graph) {
  run_cpu(p);
  const Tensor cpu_out = p.out;
  const DeviceCache dev_cache(p.cache);
  Tensor out(p.cf.dtype, p.out.n);
  out.poison();
  DeviceBuffer q(p.q.data(), p.q.bytes()), o(out.data(), out.bytes());
  DeviceBuffer qs(p.qstart.data(), p.qstart.size() * 4), len(p.lens.data(), p.lens.size() * 4);
  DeviceBuffer tab(p.tables.data(), p.tables.size() * 4);
  attend_cuda(dev_cache.desc,
              p.args(q.p, o.p, static_cast<int32_t*>(qs.p), static_cast<int32_t*>(len.p), static_cast<int32_t*>(tab.p),
                     nullptr, 0),
              graph);
  o.to_host(out.data());
  return p.compare(out, [&](int32_t r, uint32_t h, uint32_t d) {
    return double(cpu_out.get(size_t(r * p.o_ts + h * p.o_hs + d)));
  }, graph ? "cuda-graph" : "cuda");
}

void test_cuda_against_cpu() {
  int bad = 0, i = 0;
  for (const Config& c : configs()) {
    std::mt19937 rng(c.seed);
    Problem p(c, ragged(c.block_size, rng, quick()));
    bad += run_cuda_case(p, (i++ % 7) == 3);
  }
  // Few rows over a long cache: the key range is split and merged.
  Config c{KVB_DTYPE_FP16, 128, 16, 2, 4, 0, 0, 0.f, false, 90};
  Problem p(c, {{1, 5000}, {3, 7000}});
  bad += run_cuda_case(p, false);
  Config w{KVB_DTYPE_BF16, 64, 16, 1, 8, 1000, 4, 0.f, false, 91};
  Problem pw(w, {{2, 6000}, {17, 3000}});
  bad += run_cuda_case(pw, true);
  // Long prompts and extends at head dim 128 with one key split (under 2048 tokens): many key tiles
  // per CTA, so the sm_90a kernel's K/V ring (KVB_CUDA_PREFILL=hopper) wraps several times; block sizes
  // 64 and 8, a window with sinks and a soft cap, GQA 4 and 1.
  if (!quick()) {
    Config l{KVB_DTYPE_FP16, 128, 64, 2, 4, 0, 0, 0.f, false, 92};
    Problem pl(l, {{700, 900}, {300, 0}, {1, 1500}, {129, 64}});
    bad += run_cuda_case(pl, false);
    Config lw{KVB_DTYPE_BF16, 128, 8, 2, 4, 300, 4, 20.f, true, 93};
    Problem plw(lw, {{600, 1000}, {257, 3}, {2, 1200}});
    bad += run_cuda_case(plw, false);
    Config l1{KVB_DTYPE_FP16, 128, 16, 4, 1, 0, 0, 0.f, false, 94};
    Problem pl1(l1, {{1000, 0}, {63, 900}});
    bad += run_cuda_case(pl1, true);
  }
  // fp32 caches on TF32 tensor cores (allow_tf32): every fp32 config, against the exact CPU kernel with
  // a TF32 tolerance.
  for (const Config& f : configs()) {
    if (f.dtype != KVB_DTYPE_FP32) continue;
    std::mt19937 rng(f.seed);
    Problem pt(f, ragged(f.block_size, rng, quick()));
    pt.tf32 = true;
    bad += run_cuda_case(pt, (i++ % 7) == 3);
  }
  CHECK(bad == 0);
}

// Bad device-side inputs: the faulty sequence's rows are NaN, the others still match the CPU, and
// kvb_cuda_take_fault names the first fault (fp16: tensor-core kernel; fp32: CUDA-core kernel).
void test_cuda_faults() {
  kvb_kernel_fault f;
  kvb_kernel_fault_init(&f);
  kvb_cuda_take_fault(0, nullptr, &f);  // start clean whatever earlier tests left
  // fp16, fp32, fp32 on TF32 tensor cores, fp16 at head dim 128 (the sm_90a kernel's case under
  // KVB_CUDA_PREFILL=hopper).
  for (int variant = 0; variant < 4; ++variant) {
    const uint32_t dtype = variant == 0 || variant == 3 ? KVB_DTYPE_FP16 : KVB_DTYPE_FP32;
    Config c{dtype, variant == 3 ? 128u : 64u, 16, 2, 4, 0, 0, 0.f, false, 95};
    Problem p(c, {{5, 20}, {3, 40}, {30, 0}});
    p.tf32 = variant == 2;
    run_cpu(p);
    const Tensor cpu_out = p.out;
    const DeviceCache dev_cache(p.cache);
    DeviceBuffer q(p.q.data(), p.q.bytes()), o(p.out.bytes());
    auto run = [&](std::vector<int32_t> qs, std::vector<int32_t> lens, std::vector<int32_t> tab, Tensor& out) {
      DeviceBuffer dq(qs.data(), qs.size() * 4), dl(lens.data(), lens.size() * 4), dt(tab.data(), tab.size() * 4);
      kvb_prefill_args a = p.args(q.p, o.p, static_cast<int32_t*>(dq.p), static_cast<int32_t*>(dl.p),
                                  static_cast<int32_t*>(dt.p), nullptr, 0);
      CHECK_OK(kvb_prefill_attention(&dev_cache.desc, &a, nullptr));
      const kvb_status st = kvb_cuda_take_fault(0, nullptr, &f);
      o.to_host(out.data());
      return st;
    };
    // Rows [row0, row1) all NaN (or all finite) and, when finite, equal to the CPU's.
    auto rows_are = [&](const Tensor& out, int32_t row0, int32_t row1, bool nan) {
      for (int32_t r = row0; r < row1; ++r)
        for (uint32_t i = 0; i < p.num_q_heads * c.head_dim; ++i) {
          const float g = out.get(size_t(r * p.o_ts) + i);
          if (std::isnan(g) != nan) return false;
          if (!nan && !close(g, cpu_out.get(size_t(r * p.o_ts) + i), p.tol_dtype())) return false;
        }
      return true;
    };
    Tensor out(dtype, p.out.n);
    CHECK_STATUS(run(p.qstart, p.lens, p.tables, out), KVB_OK);
    CHECK(f.kind == KVB_FAULT_NONE && rows_are(out, 0, 38, false));
    std::vector<int32_t> lens = p.lens;
    lens[1] = 2;  // fewer tokens than its 3 query rows
    CHECK_STATUS(run(p.qstart, lens, p.tables, out), KVB_ERR_INVALID_ARGUMENT);
    CHECK(f.kind == KVB_FAULT_SEQ_LEN && f.kernel == KVB_KERNEL_PREFILL_ATTENTION && f.index == 1 && f.value == 2);
    CHECK(rows_are(out, 0, 5, false) && rows_are(out, 5, 8, true) && rows_are(out, 8, 38, false));
    std::vector<int32_t> tab = p.tables;
    tab[2 * p.max_blocks + 1] = 99999;  // an attended block of sequence 2
    CHECK_STATUS(run(p.qstart, p.lens, tab, out), KVB_ERR_INVALID_ARGUMENT);
    CHECK(f.kind == KVB_FAULT_BLOCK_ID && f.index == 2 && f.column == 1 && f.value == 99999);
    CHECK(rows_are(out, 0, 8, false) && rows_are(out, 24, 38, true));
    tab = p.tables;
    tab[1 * p.max_blocks + 2] = -7;  // an attended block of the short sequence 1 (fp16: the decode kernel's)
    CHECK_STATUS(run(p.qstart, p.lens, tab, out), KVB_ERR_INVALID_ARGUMENT);
    CHECK(f.kind == KVB_FAULT_BLOCK_ID && f.kernel == KVB_KERNEL_PREFILL_ATTENTION && f.index == 1 && f.column == 2 &&
          f.value == -7);
    CHECK(rows_are(out, 0, 5, false) && rows_are(out, 5, 8, true) && rows_are(out, 8, 38, false));
    std::vector<int32_t> qs = p.qstart;
    qs[3] = 37;  // != total_q_tokens
    CHECK_STATUS(run(qs, p.lens, p.tables, out), KVB_ERR_INVALID_ARGUMENT);
    CHECK(f.kind == KVB_FAULT_QUERY_START && f.index == 3 && f.value == 37);
    CHECK(strstr(kvb_last_error(), "query_start[3] = 37") != nullptr);
  }
}
#endif

}  // namespace

int main() {
  RUN_TEST(test_cpu_against_reference);
  RUN_TEST(test_cpu_threaded);
  RUN_TEST(test_cpu_decode_rows);
  RUN_TEST(test_whole_chunked_decode_agree);
  RUN_TEST(test_validation);
  RUN_CUDA_TEST(test_cuda_against_cpu);
  RUN_CUDA_TEST(test_cuda_faults);
  TEST_SUMMARY();
}
