// FP8 KV caches: the shared conversion (kernels/common/fp8.h) checked exhaustively against an
// independent reference; write_kv's bytes; decode and prefill on fp8 caches against a float64 reference
// on the DEQUANTIZED cache (tight: the kernels add no error beyond quantization) and on the unquantized
// values (the documented quantization tolerance); every q dtype, both formats, per-head scales, every
// CPU vector path, each asserted (KVB_TEST_QUICK=1: the default one); copy_blocks moving bytes;
// old-struct callers; refused scales and dtypes; and CUDA write_kv bit-identical to the CPU where a GPU
// is there (SKIP otherwise).
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>

#include "../../kernels/common/simd_cpu.h"
#include "../../kernels/decode/decode.h"
#include "../../kernels/common/fp8.h"
#include "fp8_problem.h"
#include "kernels_util.h"

using namespace kt;
using namespace fp8t;
namespace fp8 = kvb::kern::fp8;
namespace simd = kvb::kern::cpu::simd;

namespace {

uint8_t lib_encode(const Format& f, float x) { return f.e5m2 ? fp8::float_to_e5m2(x) : fp8::float_to_e4m3(x); }
float lib_decode(const Format& f, uint8_t c) { return f.e5m2 ? fp8::e5m2_to_float(c) : fp8::e4m3_to_float(c); }

void test_decode_every_code() {
  for (const Format* f : {&kE4m3, &kE5m2})
    for (int c = 0; c < 256; ++c) {
      const double want = ref_decode(*f, uint8_t(c));
      const float got = lib_decode(*f, uint8_t(c));
      if (std::isnan(want)) {
        CHECK(std::isnan(got));
        CHECK(std::signbit(got) == bool(c & 0x80));
      } else {
        CHECK(double(got) == want);
        CHECK(std::signbit(got) == bool(c & 0x80));  // -0 included
      }
    }
  CHECK(fp8::e4m3_to_float(0x7e) == 448.f);
  CHECK(fp8::e5m2_to_float(0x7b) == 57344.f);
  CHECK(fp8::e4m3_to_float(0x01) == std::ldexp(1.f, -9));
  CHECK(fp8::e5m2_to_float(0x01) == std::ldexp(1.f, -16));
}

// Every code, the midpoints between neighbours (ties: to the even code) and one float either side of
// them, values past the range, inf, NaN, -0, fp32 subnormals, and random bit patterns.
void test_encode_against_reference() {
  for (const Format* f : {&kE4m3, &kE5m2}) {
    std::vector<float> xs;
    for (int c = 0; c <= f->max_code; ++c) {
      const float v = float(ref_decode(*f, uint8_t(c)));
      xs.push_back(v);
      if (c < f->max_code) {
        const float mid = float((double(v) + ref_decode(*f, uint8_t(c + 1))) / 2);  // exact in fp32
        xs.push_back(mid);
        xs.push_back(std::nextafter(mid, 0.f));
        xs.push_back(std::nextafter(mid, INFINITY));
      }
    }
    const float mx = float(ref_decode(*f, f->max_code));
    for (float v : {mx * 1.01f, mx * 1.0625f, mx * 1.125f, mx * 2.f, 1e30f, FLT_MAX, INFINITY, FLT_MIN, FLT_MIN / 8,
                    FLT_TRUE_MIN, 0.f, std::numeric_limits<float>::quiet_NaN()})
      xs.push_back(v);
    const float smallest = float(ref_decode(*f, 1));
    for (float v : {smallest / 2, std::nextafter(smallest / 2, 1.f), std::nextafter(smallest / 2, 0.f), smallest / 4,
                    smallest * 1.5f, smallest * 2.5f})
      xs.push_back(v);
    std::mt19937 rng(7);
    for (int i = 0; i < 200000; ++i) {
      uint32_t u = rng();
      float v;
      std::memcpy(&v, &u, 4);
      xs.push_back(v);
      xs.push_back(std::ldexp(float(int32_t(rng() % 2000001) - 1000000) / 1e6f, int(rng() % 40) - 24));
    }
    int bad = 0;
    for (float x : xs)
      for (float y : {x, -x}) {
        const uint8_t want = ref_encode(*f, y), got = lib_encode(*f, y);
        if (want != got && bad++ < 5)
          fprintf(stderr, "  %s encode %a: got 0x%02x want 0x%02x\n", f->e5m2 ? "e5m2" : "e4m3", double(y), got, want);
      }
    CHECK(bad == 0);
  }
  // The rule's landmarks, spelled out.
  CHECK(fp8::float_to_e4m3(464.f) == 0x7e);  // tie between 448 and (nonexistent) 480: saturates
  CHECK(fp8::float_to_e4m3(INFINITY) == 0x7e && fp8::float_to_e4m3(-INFINITY) == 0xfe);
  CHECK(fp8::float_to_e5m2(INFINITY) == 0x7b && fp8::float_to_e5m2(-1e9f) == 0xfb);
  CHECK(fp8::float_to_e4m3(-0.f) == 0x80 && fp8::float_to_e5m2(-0.f) == 0x80);
  CHECK((fp8::float_to_e4m3(-NAN) & 0x7f) == 0x7f && (fp8::float_to_e5m2(NAN) & 0x7f) == 0x7f);
  CHECK(fp8::float_to_e4m3(std::ldexp(1.f, -10)) == 0x00);  // half the smallest subnormal: to even (0)
  CHECK(fp8::float_to_e4m3(std::ldexp(3.f, -10)) == 0x02);  // 1.5 subnormal steps: to even (2)
}

// ---- write_kv ----

uint32_t input_dtypes[] = {KVB_DTYPE_FP16, KVB_DTYPE_BF16, KVB_DTYPE_FP32};

void test_write_kv_bytes() {
  for (uint32_t cd : {uint32_t(KVB_DTYPE_FP8_E4M3), uint32_t(KVB_DTYPE_FP8_E5M2)})
    for (uint32_t in : input_dtypes)
      for (int per_head = 0; per_head < 2; ++per_head) {
        const Format& f = cd == KVB_DTYPE_FP8_E5M2 ? kE5m2 : kE4m3;
        const uint32_t H = 3, D = 64, N = 40;
        HostCache c(cd, 8, 8, H, D, /*head_pad=*/3);
        c.k.poison();
        c.v.poison();
        std::vector<float> khs = {0.5f, 2.f, 0.03125f}, vhs = {1.5f, 0.25f, 3.f};
        c.desc.k_scale = 0.75f;
        c.desc.v_scale = 1.25f;
        if (per_head) {
          c.desc.k_head_scales = khs.data();
          c.desc.v_head_scales = vhs.data();
        }
        std::mt19937 rng(11 + in);
        Tensor key(in, size_t(N) * H * D), value(in, size_t(N) * H * D);
        key.fill_random(rng, -600.f, 600.f);
        value.fill_random(rng, -4.f, 4.f);
        const float edges[] = {INFINITY, -INFINITY, NAN, -0.f, 0.f, 1e-9f, 448.f, 464.f, 70000.f, -70000.f, 1e-3f};
        for (size_t i = 0; i < sizeof edges / sizeof edges[0]; ++i) {
          key.set(i * 7, edges[i]);
          value.set(i * 5 + 1, edges[i]);
        }
        std::vector<int64_t> slots(N);
        for (uint32_t i = 0; i < N; ++i) slots[i] = (i * 37 + 5) % 64;  // distinct slots
        slots[3] = -1;
        kvb_write_kv_args a = write_args(N, key.data(), value.data(), slots.data());
        a.input_dtype = in;
        CHECK_OK(kvb_write_kv(&c.desc, &a, nullptr));
        int bad = 0;
        const uint8_t* kb = static_cast<const uint8_t*>(c.k.data());
        const uint8_t* vb = static_cast<const uint8_t*>(c.v.data());
        for (uint32_t i = 0; i < N; ++i) {
          if (slots[i] < 0) continue;
          for (uint32_t h = 0; h < H; ++h)
            for (uint32_t d = 0; d < D; ++d) {
              const size_t src = (size_t(i) * H + h) * D + d;
              const size_t dst = c.offset(slots[i] / 8, slots[i] % 8, h, d);
              const float ks = per_head ? khs[h] : c.desc.k_scale, vs = per_head ? vhs[h] : c.desc.v_scale;
              const uint8_t wk = ref_encode(f, key.get(src) / ks), wv = ref_encode(f, value.get(src) / vs);
              if ((kb[dst] != wk || vb[dst] != wv) && bad++ < 3)
                fprintf(stderr, "  %s<-%s token %u head %u d %u: k 0x%02x want 0x%02x, v 0x%02x want 0x%02x\n",
                        dname(cd), dname(in), i, h, d, kb[dst], wk, vb[dst], wv);
            }
        }
        // slot_mapping -1 and the head padding: untouched (0xff poison)
        const size_t head_pad_at = c.offset(slots[0] / 8, slots[0] % 8, 0, D);
        CHECK(kb[head_pad_at] == 0xff);
        CHECK(bad == 0);
      }
}


const AttnCase kCases[] = {
    {KVB_DTYPE_FP8_E4M3, KVB_DTYPE_FP32, 2, 1, 64, false, 0, 0, 0.f},
    {KVB_DTYPE_FP8_E4M3, KVB_DTYPE_FP16, 2, 4, 128, true, 0, 0, 0.f},
    {KVB_DTYPE_FP8_E4M3, KVB_DTYPE_BF16, 1, 8, 64, false, 40, 4, 0.f},
    {KVB_DTYPE_FP8_E4M3, KVB_DTYPE_FP32, 2, 2, 256, true, 0, 0, 5.f},
    {KVB_DTYPE_FP8_E5M2, KVB_DTYPE_FP32, 2, 3, 64, true, 0, 0, 0.f},
    {KVB_DTYPE_FP8_E5M2, KVB_DTYPE_FP16, 1, 1, 128, false, 33, 2, 8.f},
    {KVB_DTYPE_FP8_E5M2, KVB_DTYPE_BF16, 2, 4, 64, false, 0, 0, 0.f},
    {KVB_DTYPE_FP8_E4M3, KVB_DTYPE_BF16, 2, 2, 128, true, 0, 0, 5.f},
    {KVB_DTYPE_FP8_E5M2, KVB_DTYPE_BF16, 1, 3, 256, true, 0, 0, 0.f},
};

// Every path asserts the code it ran, and no path's largest error against the dequantized float64
// reference exceeds the portable path's by more than half, per q dtype.
void test_decode_fp8() {
  double worst[simd::kNumIsas][3] = {};  // [path][q dtype]
  bool ran[simd::kNumIsas] = {};
  on_each_isa([&](simd::Isa isa) {
    ran[int(isa)] = true;
    for (const AttnCase& cs : kCases) {
      // ragged, one long enough to split (partitions of 256 tokens)
      Fp8Problem p(cs.cd, cs.qd, cs.H, cs.G, cs.D, cs.per_head, {{0, 1}, {1, 1}, {17, 1}, {600, 1}}, 3 + cs.D + cs.G);
      Tensor out(cs.qd, p.q.n);
      out.poison();
      kvb_attention_args a = decode_args(p, cs, out.data());
      size_t ws = 0;
      CHECK_OK(kvb_paged_attention_workspace_size(&p.cache.desc, &a, &ws));
      CHECK(ws > 0);  // the 600-token sequence splits
      std::vector<float> wsb(ws / 4 + 4);
      a.workspace = wsb.data();
      a.workspace_size = ws;
      CHECK_OK(kvb_paged_attention(&p.cache.desc, &a, nullptr));
      const kvb::kern::cpu::DecodePath path = kvb::kern::cpu::last_decode_path();
      CHECK(path.isa == int(isa));
      CHECK(!path.pairs);  // fp8 takes the fp32 FMAs on every path, a bf16 q too
      std::vector<std::pair<size_t, int32_t>> rows;
      for (size_t s = 0; s < p.seqs.size(); ++s) rows.push_back({s, p.seqs[s].len - 1});
      int bad = 0;
      const double raw = check_rows(p, out, rows, float(1.0 / std::sqrt(double(cs.D))), cs.cap, cs.window, cs.sink,
                                    &bad, &worst[int(isa)][cs.qd]);
      CHECK(bad == 0);
      if (raw > raw_tolerance(cs.cd)) {
        fprintf(stderr, "  %s %s: %.4f from the unquantized reference\n", path_name().c_str(), dname(cs.cd), raw);
        CHECK(raw <= raw_tolerance(cs.cd));
      }
    }
    printf("   %s: max |out - float64 (dequantized)| q fp16 %.3g, bf16 %.3g, fp32 %.3g\n", path_name().c_str(),
           worst[int(isa)][KVB_DTYPE_FP16], worst[int(isa)][KVB_DTYPE_BF16], worst[int(isa)][KVB_DTYPE_FP32]);
  }, kvbt_quick());  // the default path only under KVB_TEST_QUICK
  for (int i = 1; i < simd::kNumIsas; ++i)
    for (int qd = 0; qd < 3 && ran[0] && ran[i]; ++qd) CHECK(worst[i][qd] <= 1.5 * worst[0][qd]);
}

void test_prefill_fp8() {
  on_each_isa([&](simd::Isa) {
    for (const AttnCase& cs : kCases) {
      // a prompt, a chunk over a cached prefix, a decode token, an empty sequence
      Fp8Problem p(cs.cd, cs.qd, cs.H, cs.G, cs.D, cs.per_head, {{50, 50}, {130, 20}, {0, 0}, {77, 1}}, 5 + cs.D + cs.G);
      Tensor out(cs.qd, p.q.n);
      out.poison();
      kvb_prefill_args a = prefill_args(p, cs, out.data());
      CHECK_OK(kvb_prefill_attention(&p.cache.desc, &a, nullptr));
      std::vector<std::pair<size_t, int32_t>> rows;
      for (size_t s = 0; s < p.seqs.size(); ++s)
        for (int32_t j = 0; j < p.seqs[s].q_len; ++j) rows.push_back({s, p.seqs[s].len - p.seqs[s].q_len + j});
      int bad = 0;
      const double raw = check_rows(p, out, rows, float(1.0 / std::sqrt(double(cs.D))), cs.cap, cs.window, cs.sink, &bad);
      CHECK(bad == 0);
      if (raw > raw_tolerance(cs.cd)) {
        fprintf(stderr, "  prefill %s: %.4f from the unquantized reference\n", dname(cs.cd), raw);
        CHECK(raw <= raw_tolerance(cs.cd));
      }
    }
  }, kvbt_quick());  // the default path only under KVB_TEST_QUICK
}

// A NaN code in one K element makes every output of its kv head's query heads NaN (one V element: that
// column), on every CPU path (the e4m3 decode reads tiles without NaN codes through a faster load, and
// must notice this one), with an fp16 and a bf16 q, and leaves the rest exact; codes at several
// positions of a tile, both signs.
void test_decode_nan_codes() {
  on_each_isa([&](simd::Isa) {
    for (uint32_t cd : {uint32_t(KVB_DTYPE_FP8_E4M3), uint32_t(KVB_DTYPE_FP8_E5M2)})
      for (uint32_t qd : {uint32_t(KVB_DTYPE_FP16), uint32_t(KVB_DTYPE_BF16)})
        for (int which = 0; which < 2; ++which)
          for (int32_t tok : {0, 31, 45, 99}) {
            const uint32_t H = 2, G = 2, D = 64;
            Fp8Problem p(cd, qd, H, G, D, false, {{100, 1}}, 7 + uint32_t(tok));
            const uint8_t nan_code = (tok & 1) ? 0xff : 0x7f;  // e5m2: both NaN too
            uint8_t* bytes = static_cast<uint8_t*>((which ? p.cache.v : p.cache.k).data());
            bytes[p.cache.offset(p.tables[size_t(tok) / 16], tok % 16, 0, uint32_t(tok) % D)] = nan_code;
            Tensor out(qd, p.q.n);
            out.poison();
            kvb_attention_args a;
            kvb_attention_args_init(&a);
            a.q_dtype = qd;
            set_paged(a, 1, H * G, p.max_blocks, p.q.data(), out.data(), p.tables.data(), p.lens.data());
            CHECK_OK(kvb_paged_attention(&p.cache.desc, &a, nullptr));
            int bad = 0;
            std::vector<double> ref(D);
            for (uint32_t qh = 0; qh < H * G; ++qh) {
              p.ref_row(0, 0, 99, qh, 0.125f, 0.f, 0, 0, true, ref.data());
              for (uint32_t d = 0; d < D; ++d) {
                // kv head 0: all NaN (K) or NaN in the poked column (V); kv head 1: the reference
                const bool want_nan = qh < G && (which == 0 || d == uint32_t(tok) % D);
                CHECK(std::isnan(ref[d]) == want_nan);
                bad += want_nan ? !std::isnan(out.get(qh * D + d)) : !close(out.get(qh * D + d), ref[d], qd);
              }
            }
            if (bad)
              fprintf(stderr, "  %s %s %s NaN at token %d: %d wrong\n", path_name().c_str(), dname(cd),
                      which ? "V" : "K", tok, bad);
            CHECK(bad == 0);
          }
  }, kvbt_quick());  // the default path only under KVB_TEST_QUICK
}

// ---- copy, allocation, validation, old callers ----

void test_copy_blocks_moves_bytes() {
  kvb_cache_desc d = kvbt_cache(KVB_DTYPE_FP8_E4M3, nullptr, nullptr, 6, 16, 2, 64);
  CHECK_OK(kvb_cache_alloc(&d));
  CHECK(d.block_stride == 16 * 2 * 64);  // elements = bytes: half an fp16 cache
  const size_t bytes = size_t(d.num_blocks) * size_t(d.block_stride);
  uint8_t* k = static_cast<uint8_t*>(d.k);
  uint8_t* v = static_cast<uint8_t*>(d.v);
  for (size_t i = 0; i < bytes; ++i) k[i] = uint8_t(i * 7), v[i] = uint8_t(i * 13 + 1);  // NaN codes included
  const int32_t pairs[] = {0, 3, 5, 1};
  CHECK_OK(kvb_copy_blocks(&d, 1, pairs, 2, nullptr));
  const size_t blk = size_t(d.block_stride);
  CHECK(std::memcmp(k + 3 * blk, k + 0 * blk, blk) == 0 && std::memcmp(v + 1 * blk, v + 5 * blk, blk) == 0);
  for (size_t i = 0; i < blk; ++i) CHECK(k[2 * blk + i] == uint8_t((2 * blk + i) * 7));
  CHECK_OK(kvb_cache_free(&d));
}

void test_bad_scales_and_dtypes_refused() {
  HostCache c(KVB_DTYPE_FP8_E4M3, 4, 16, 2, 64);
  float q[2 * 64] = {0}, out[2 * 64];
  int32_t table[1] = {0}, lens[1] = {1};
  kvb_attention_args a;
  kvb_attention_args_init(&a);
  a.q_dtype = KVB_DTYPE_FP32;
  set_paged(a, 1, 2, 1, q, out, table, lens);
  CHECK_OK(kvb_paged_attention(&c.desc, &a, nullptr));
  for (float bad : {0.f, -1.f, NAN, INFINITY}) {
    kvb_cache_desc d = c.desc;
    d.k_scale = bad;
    CHECK_STATUS(kvb_paged_attention(&d, &a, nullptr), KVB_ERR_INVALID_ARGUMENT);
    CHECK(std::strstr(kvb_last_error(), "k_scale") != nullptr);
    d = c.desc;
    d.v_scale = bad;
    CHECK_STATUS(kvb_paged_attention(&d, &a, nullptr), KVB_ERR_INVALID_ARGUMENT);
    float heads[2] = {1.f, bad};
    d = c.desc;
    d.v_head_scales = heads;
    CHECK_STATUS(kvb_paged_attention(&d, &a, nullptr), KVB_ERR_INVALID_ARGUMENT);
    CHECK(std::strstr(kvb_last_error(), "v_head_scales[1]") != nullptr);
  }
  // scales are not read for other dtypes
  HostCache h(KVB_DTYPE_FP32, 4, 16, 2, 64);
  h.desc.k_scale = -1.f;
  kvb_attention_args a32 = a;
  a32.q_dtype = 0;
  CHECK_OK(kvb_paged_attention(&h.desc, &a32, nullptr));
  // q dtype of an fp8 cache: fp16, bf16 or fp32 only
  kvb_attention_args b = a;
  b.q_dtype = KVB_DTYPE_FP8_E4M3;
  CHECK_STATUS(kvb_paged_attention(&c.desc, &b, nullptr), KVB_ERR_INVALID_ARGUMENT);
  CHECK(std::strstr(kvb_last_error(), "q_dtype") != nullptr);
  kvb_write_kv_args w;
  kvb_write_kv_args_init(&w);
  w.input_dtype = 9;
  w.num_tokens = 1;
  int64_t slot = 0;
  w.key = q;
  w.value = q;
  w.slot_mapping = &slot;
  CHECK_STATUS(kvb_write_kv(&c.desc, &w, nullptr), KVB_ERR_INVALID_ARGUMENT);
  kvb_cache_desc u = c.desc;
  u.dtype = 5;
  CHECK_STATUS(kvb_write_kv(&u, &w, nullptr), KVB_ERR_INVALID_ARGUMENT);
  // CUDA attention on an fp8 cache: decode and prefill take fp16 / bf16 queries, not fp32 (a is fp32).
  // Both refused before any device is touched.
  kvb_cache_desc g = c.desc;
  g.device_type = KVB_DEVICE_CUDA;
  CHECK_STATUS(kvb_paged_attention(&g, &a, nullptr), KVB_ERR_UNSUPPORTED);
  CHECK(std::strstr(kvb_last_error(), "fp8 KV cache: CUDA attention takes q_dtype fp16 or bf16, not fp32") != nullptr);
  kvb_prefill_args pa;
  kvb_prefill_args_init(&pa);
  pa.num_seqs = 1;
  pa.num_q_heads = 2;
  pa.max_blocks_per_seq = 1;
  pa.q_dtype = KVB_DTYPE_FP32;
  size_t ws = 0;
  CHECK_STATUS(kvb_prefill_attention_workspace_size(&g, &pa, &ws), KVB_ERR_UNSUPPORTED);
  CHECK(std::strstr(kvb_last_error(), "fp8 KV cache: CUDA attention takes q_dtype fp16 or bf16, not fp32") != nullptr);
  pa.q_dtype = KVB_DTYPE_FP16;  // CUDA prefill reads fp8 caches with fp16 / bf16 queries
  CHECK_STATUS(kvb_prefill_attention_workspace_size(&g, &pa, &ws), KVB_OK);
}

// A caller built against the KVB_0.1 header: kvb_cache_desc of 80 bytes, kvb_attention_args of 112, the
// rest of the buffer poison. An fp8 cache (a newer caller may still pass the old size) then has scales
// 1.0 and q in fp16; nothing past the old size is read (poison would be refused) or written.
void test_old_struct_callers() {
  constexpr size_t kOldDesc = 80, kOldArgs = 112;
  CHECK(offsetof(kvb_cache_desc, k_scale) == kOldDesc);
  CHECK(offsetof(kvb_attention_args, q_dtype) == kOldArgs);
  HostCache c(KVB_DTYPE_FP8_E4M3, 4, 16, 1, 64);
  alignas(8) unsigned char dbuf[sizeof(kvb_cache_desc) + 32], abuf[sizeof(kvb_attention_args) + 32];
  std::memset(dbuf, 0xcd, sizeof dbuf);
  std::memcpy(dbuf, &c.desc, kOldDesc);
  reinterpret_cast<kvb_cache_desc*>(dbuf)->struct_size = kOldDesc;
  // write one token of ones (fp16 input, the default): scale 1 stores 1.0 = 0x38
  uint16_t ones[64];
  for (uint16_t& x : ones) x = 0x3c00;
  int64_t slot = 0;
  kvb_write_kv_args w;
  kvb_write_kv_args_init(&w);
  w.num_tokens = 1;
  w.key = ones;
  w.value = ones;
  w.slot_mapping = &slot;
  CHECK_OK(kvb_write_kv(reinterpret_cast<kvb_cache_desc*>(dbuf), &w, nullptr));
  CHECK(static_cast<uint8_t*>(c.k.data())[0] == 0x38 && static_cast<uint8_t*>(c.v.data())[63] == 0x38);
  kvb_attention_args a;
  kvb_attention_args_init(&a);
  uint16_t q[64], out[64 + 16];
  for (uint16_t& x : q) x = 0x3c00;
  std::memset(out, 0xff, sizeof out);
  int32_t table[1] = {0}, lens[1] = {1};
  set_paged(a, 1, 1, 1, q, out, table, lens);
  std::memset(abuf, 0xcd, sizeof abuf);
  std::memcpy(abuf, &a, kOldArgs);
  reinterpret_cast<kvb_attention_args*>(abuf)->struct_size = kOldArgs;
  CHECK_OK(kvb_paged_attention(reinterpret_cast<kvb_cache_desc*>(dbuf), reinterpret_cast<kvb_attention_args*>(abuf), nullptr));
  for (int d = 0; d < 64; ++d) CHECK(out[d] == 0x3c00);  // one token of V = 1.0, written as fp16
  CHECK(out[64] == 0xffff);
  for (size_t i = kOldDesc; i < sizeof dbuf; ++i) CHECK(dbuf[i] == 0xcd);
  for (size_t i = kOldArgs; i < sizeof abuf; ++i) CHECK(abuf[i] == 0xcd);
  // kvb_cache_alloc / free with the old size
  std::memset(dbuf, 0xcd, sizeof dbuf);
  kvb_cache_desc fresh = kvbt_cache(KVB_DTYPE_FP8_E5M2, nullptr, nullptr, 2, 16, 1, 64);
  std::memcpy(dbuf, &fresh, kOldDesc);
  reinterpret_cast<kvb_cache_desc*>(dbuf)->struct_size = kOldDesc;
  CHECK_OK(kvb_cache_alloc(reinterpret_cast<kvb_cache_desc*>(dbuf)));
  CHECK_OK(kvb_cache_free(reinterpret_cast<kvb_cache_desc*>(dbuf)));
  for (size_t i = kOldDesc; i < sizeof dbuf; ++i) CHECK(dbuf[i] == 0xcd);
}

#if KVB_WITH_CUDA
// CUDA write_kv against the CPU's bytes, random and edge inputs, every input dtype and format.
void test_cuda_write_kv_bit_identical() {
  for (uint32_t cd : {uint32_t(KVB_DTYPE_FP8_E4M3), uint32_t(KVB_DTYPE_FP8_E5M2)})
    for (uint32_t in : input_dtypes) {
      const uint32_t H = 4, D = 128, N = 64, NB = 8, BS = 16;
      HostCache host(cd, NB, BS, H, D);
      std::vector<float> khs = {0.5f, 2.f, 0.03125f, 7.f};
      host.desc.k_head_scales = khs.data();
      host.desc.v_scale = 0.37f;
      std::mt19937 rng(17 + in + cd);
      Tensor key(in, size_t(N) * H * D), value(in, size_t(N) * H * D);
      key.fill_random(rng, -900.f, 900.f);
      value.fill_random(rng, -60000.f, 60000.f);
      const float edges[] = {INFINITY, -INFINITY, NAN, -0.f, 1e-7f, 448.f, 464.f, 57344.f, 61440.f, 1e-3f};
      for (size_t i = 0; i < sizeof edges / sizeof edges[0]; ++i) key.set(i * 3, edges[i]), value.set(i * 3, edges[i]);
      std::vector<int64_t> slots(N);
      for (uint32_t i = 0; i < N; ++i) slots[i] = (i * 37 + 3) % (NB * BS);
      kvb_write_kv_args a = write_args(N, key.data(), value.data(), slots.data());
      a.input_dtype = in;
      CHECK_OK(kvb_write_kv(&host.desc, &a, nullptr));
      DeviceBuffer dk(host.k.bytes()), dv(host.v.bytes()), dkey(key.data(), key.bytes()), dval(value.data(), value.bytes()),
          dslots(slots.data(), slots.size() * 8);
      kvb_cache_desc g = host.desc;
      g.device_type = KVB_DEVICE_CUDA;
      g.k = dk.p;
      g.v = dv.p;
      a.key = dkey.p;
      a.value = dval.p;
      a.slot_mapping = static_cast<const int64_t*>(dslots.p);
      CHECK_OK(kvb_write_kv(&g, &a, nullptr));
      std::vector<uint8_t> gk(host.k.bytes()), gv(host.v.bytes());
      dk.to_host(gk.data());
      dv.to_host(gv.data());
      CHECK(std::memcmp(gk.data(), host.k.data(), gk.size()) == 0);
      CHECK(std::memcmp(gv.data(), host.v.data(), gv.size()) == 0);
    }
}
#endif

}  // namespace

int main() {
  RUN_TEST(test_decode_every_code);
  RUN_TEST(test_encode_against_reference);
  RUN_TEST(test_write_kv_bytes);
  RUN_TEST(test_decode_fp8);
  RUN_TEST(test_prefill_fp8);
  RUN_TEST(test_decode_nan_codes);
  RUN_TEST(test_copy_blocks_moves_bytes);
  RUN_TEST(test_bad_scales_and_dtypes_refused);
  RUN_TEST(test_old_struct_callers);
  RUN_CUDA_TEST(test_cuda_write_kv_bit_identical);
  TEST_SUMMARY();
}
