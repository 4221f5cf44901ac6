// The AMX building blocks of the CPU shared-prefix product (kernels/common/amx_tiles_cpu.h) against scalar
// models: the bf16 high / low split (round to nearest even, twice), the K^T and V pair layouts that
// TDPBF16PS reads, and the tile products against float64 sums (fp16-level accuracy with the low parts,
// bf16-level without). Skipped, with the reason, where the CPU or OS has no AMX (and under valgrind,
// which hides it).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "harness.h"
#include "../../kernels/common/amx_cpu.h"
#include "../../kernels/common/amx_tiles_cpu.h"
#include "../../kernels/common/convert_cpu.h"

namespace amx = kvb::kern::cpu::amx;

namespace {

// Scalar model of a float -> bf16 conversion: round to nearest, ties to even (finite normal inputs).
uint16_t bf16_rne(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
float from_bf16(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
uint16_t model_hi(float x) { return bf16_rne(x); }
uint16_t model_lo(float x) { return bf16_rne(x - from_bf16(bf16_rne(x))); }

// Values over a wide range of magnitudes and signs, none denormal (bf16 conversion flushes those).
std::vector<float> random_values(std::mt19937& rng, size_t n, float lo_exp = -8, float hi_exp = 8) {
  std::uniform_real_distribution<float> e(lo_exp, hi_exp), m(1.f, 2.f);
  std::vector<float> v(n);
  for (float& x : v) x = std::ldexp(m(rng), int(e(rng))) * (rng() % 2 ? -1.f : 1.f);
  return v;
}

// fp16-representable values (as an fp16 cache's rows are after conversion).
std::vector<float> fp16_values(std::mt19937& rng, size_t n) {
  std::vector<float> v = random_values(rng, n, -6, 2);
  for (float& x : v) x = std::ldexp(std::round(std::ldexp(x, 10 - std::ilogb(x))), std::ilogb(x) - 10);
  return v;
}

void test_split_bf16() {
  std::mt19937 rng(11);
  std::vector<float> x = random_values(rng, 4096);
  x[0] = 1.f + 1.f / 256;  // a tie: rounds to even (1.0)
  x[1] = 1.f + 3.f / 256;  // a tie: rounds to even (1 + 4/256)
  std::vector<uint16_t> hi(x.size()), lo(x.size());
  amx::split_bf16(x.data(), int64_t(x.size()), hi.data(), lo.data());
  int bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (hi[i] != model_hi(x[i]) || lo[i] != model_lo(x[i])) {
      if (bad++ < 3) fprintf(stderr, "  split %zu: x %a hi %04x (model %04x) lo %04x (model %04x)\n", i, double(x[i]), hi[i], model_hi(x[i]), lo[i], model_lo(x[i]));
    }
    // hi + lo keeps 16 significant bits.
    const double r = double(from_bf16(hi[i])) + double(from_bf16(lo[i])) - double(x[i]);
    if (std::fabs(r) > std::ldexp(std::fabs(double(x[i])), -16)) bad++;
  }
  CHECK(hi[0] == 0x3f80 && hi[1] == 0x3f82);
  // fp16 values split exactly.
  std::vector<float> h = fp16_values(rng, 1024);
  amx::split_bf16(h.data(), int64_t(h.size()), hi.data(), lo.data());
  for (size_t i = 0; i < h.size(); ++i)
    if (double(from_bf16(hi[i])) + double(from_bf16(lo[i])) != double(h[i]) && bad++ < 6)
      fprintf(stderr, "  fp16 value %a does not split exactly\n", double(h[i]));
  // lo may be NULL.
  amx::split_bf16(x.data(), int64_t(x.size()), hi.data(), lo.data());
  std::vector<uint16_t> hi2(x.size());
  amx::split_bf16(x.data(), int64_t(x.size()), hi2.data(), nullptr);
  CHECK(hi2 == hi);
  CHECK(bad == 0);
}

uint32_t model_pair(float a, float b, bool low_part) {
  const uint16_t x = low_part ? model_lo(a) : model_hi(a), y = low_part ? model_lo(b) : model_hi(b);
  return uint32_t(x) | uint32_t(y) << 16;
}

void test_pack_layouts() {
  std::mt19937 rng(12);
  int bad = 0;
  for (int D : {64, 128, 256}) {
    const int64_t ld = D + 16;  // a row stride wider than the row
    std::vector<float> k = random_values(rng, size_t(amx::kKeys * ld)), v = random_values(rng, size_t(amx::kKeys * ld));
    std::vector<uint32_t> kh(size_t(amx::kKeys * D / 2)), kl(kh.size()), vh(kh.size()), vl(kh.size());
    amx::pack_keys(k.data(), ld, D, kh.data(), kl.data());
    amx::pack_values(v.data(), ld, D, vh.data(), vl.data());
    for (int part = 0; part < 2; ++part) {
      const std::vector<uint32_t>& K = part ? kl : kh;
      const std::vector<uint32_t>& V = part ? vl : vh;
      // K^T: tile (half, chunk), row kk, column n holds key half*16+n's elements chunk*32 + 2kk, +1.
      for (int half = 0; half < 2; ++half)
        for (int chunk = 0; chunk < D / 32; ++chunk) {
          const uint32_t* t = amx::key_tile(K.data(), D, half, chunk);
          for (int kk = 0; kk < 16; ++kk)
            for (int n = 0; n < 16; ++n) {
              const float* row = k.data() + (half * 16 + n) * ld + chunk * 32 + 2 * kk;
              if (t[kk * 16 + n] != model_pair(row[0], row[1], part) && bad++ < 3)
                fprintf(stderr, "  D=%d K part %d tile (%d, %d) [%d][%d] = %08x, model %08x\n", D, part, half, chunk, kk, n,
                        t[kk * 16 + n], model_pair(row[0], row[1], part));
            }
        }
      // V: tile chunk, row kk, column n holds (V[2kk][chunk*16+n], V[2kk+1][chunk*16+n]).
      for (int chunk = 0; chunk < D / 16; ++chunk) {
        const uint32_t* t = amx::value_tile(V.data(), chunk);
        for (int kk = 0; kk < 16; ++kk)
          for (int n = 0; n < 16; ++n) {
            const float a = v[size_t(2 * kk * ld + chunk * 16 + n)], b = v[size_t((2 * kk + 1) * ld + chunk * 16 + n)];
            if (t[kk * 16 + n] != model_pair(a, b, part) && bad++ < 6)
              fprintf(stderr, "  D=%d V part %d tile %d [%d][%d] = %08x, model %08x\n", D, part, chunk, kk, n, t[kk * 16 + n],
                      model_pair(a, b, part));
          }
      }
    }
  }
  CHECK(bad == 0);
}

// Rows stored in 16 bits (scattered, as in a paged cache): bf16 rows pack to the very words pack_keys /
// pack_values give for the same values as floats, fp16 rows to the same high and low words.
void test_pack_from_rows() {
  std::mt19937 rng(17);
  int bad = 0;
  for (bool f16 : {false, true})
    for (int D : {64, 128, 256}) {
      std::vector<uint16_t> bits(size_t(amx::kKeys * 2 * D));  // rows at stride 2D, every other slot
      // normal values (the float path's conversion flushes bf16 denormals; the direct one keeps them)
      for (uint16_t& b : bits)
        b = f16 ? uint16_t((rng() & 0x83ff) | ((1 + rng() % 29) << 10)) : uint16_t((rng() & 0x807f) | ((100 + rng() % 50) << 7));
      std::vector<float> f(size_t(amx::kKeys * D));
      const uint16_t* rows[amx::kKeys];
      for (int t = 0; t < amx::kKeys; ++t) {
        rows[t] = bits.data() + size_t(2 * t * D);
        for (int d = 0; d < D; ++d)
          f[size_t(t * D + d)] = f16 ? kvb::kern::cpu::half_to_float(rows[t][d]) : kvb::kern::cpu::bf16_to_float(rows[t][d]);
      }
      const size_t words = size_t(amx::kKeys * D / 2);
      std::vector<uint32_t> kh1(words), kl1(words), kh2(words), kl2(words), vh1(words), vl1(words), vh2(words), vl2(words);
      amx::pack_keys(f.data(), D, D, kh1.data(), f16 ? kl1.data() : nullptr);
      amx::pack_keys_rows(rows, f16, D, kh2.data(), f16 ? kl2.data() : nullptr);
      amx::pack_values(f.data(), D, D, vh1.data(), f16 ? vl1.data() : nullptr);
      amx::pack_values_rows(rows, f16, D, vh2.data(), f16 ? vl2.data() : nullptr);
      if ((kh1 != kh2 || kl1 != kl2) && bad++ < 3) fprintf(stderr, "  D=%d f16=%d: pack_keys_rows differs from pack_keys\n", D, f16);
      if ((vh1 != vh2 || vl1 != vl2) && bad++ < 3)
        fprintf(stderr, "  D=%d f16=%d: pack_values_rows differs from pack_values\n", D, f16);
    }
  CHECK(bad == 0);
}

// The tile products: scores of 16 / 32 rows x 32 keys, then acc += P V over one and two key tiles, against float64 sums of the
// fp32 inputs. With the low parts: within 2^-14 of sum |a||b| (fp16 keeps 2^-11); without: bf16 level.
void test_tile_products() {
  std::mt19937 rng(13);
  int bad = 0;
  double worst_split = 0, worst_hi_only = 0;
  amx::tile_begin();
  for (int D : {64, 128, 256})
    for (int rows : {16, 32}) {
      std::vector<float> q = random_values(rng, size_t(rows * D), -3, 1), k = fp16_values(rng, size_t(amx::kKeys * D));
      std::vector<float> v = fp16_values(rng, size_t(amx::kKeys * D));
      std::vector<uint16_t> qh(q.size()), ql(q.size());
      amx::split_bf16(q.data(), int64_t(q.size()), qh.data(), ql.data());
      std::vector<uint32_t> kh(size_t(amx::kKeys * D / 2)), kl(kh.size()), vh(kh.size()), vl(kh.size());
      amx::pack_keys(k.data(), D, D, kh.data(), kl.data());
      amx::pack_values(v.data(), D, D, vh.data(), vl.data());
      for (bool split : {true, false}) {
        std::vector<float> s(size_t(rows * 32), -1.f);
        amx::tile_scores(qh.data(), split ? ql.data() : nullptr, D, D, kh.data(), split ? kl.data() : nullptr, rows, s.data());
        for (int r = 0; r < rows; ++r)
          for (int t = 0; t < 32; ++t) {
            double want = 0, mag = 0;
            for (int d = 0; d < D; ++d) {
              want += double(q[size_t(r * D + d)]) * double(k[size_t(t * D + d)]);
              mag += std::fabs(double(q[size_t(r * D + d)]) * double(k[size_t(t * D + d)]));
            }
            const double err = std::fabs(double(s[size_t(r * 32 + t)]) - want) / mag;
            (split ? worst_split : worst_hi_only) = std::max(split ? worst_split : worst_hi_only, err);
            if (split && err > std::ldexp(1.0, -14) && bad++ < 3)
              fprintf(stderr, "  scores D=%d rows=%d [%d][%d]: %g, want %g\n", D, rows, r, t, double(s[size_t(r * 32 + t)]), want);
          }
      }
      // P: softmax-like weights in [0, 1]; acc starts non-zero (it accumulates). One key tile (v), then two
      // (v and a second 32 keys v2, packed after it; p rows of 64).
      std::vector<float> v2 = fp16_values(rng, size_t(amx::kKeys * D));
      std::vector<uint32_t> vh2(2 * vh.size()), vl2(2 * vh.size());
      std::copy(vh.begin(), vh.end(), vh2.begin());
      std::copy(vl.begin(), vl.end(), vl2.begin());
      amx::pack_values(v2.data(), D, D, vh2.data() + vh.size(), vl2.data() + vh.size());
      for (int tiles : {1, 2}) {
        const int keys = 32 * tiles;
        std::vector<float> p(size_t(rows * keys)), acc0(size_t(rows * D)), acc;
        for (float& x : p) x = std::uniform_real_distribution<float>(0.f, 1.f)(rng);
        for (float& x : acc0) x = std::uniform_real_distribution<float>(-1.f, 1.f)(rng);
        std::vector<uint16_t> ph(p.size()), pl(p.size());
        amx::split_bf16(p.data(), int64_t(p.size()), ph.data(), pl.data());
        acc = acc0;
        amx::tile_values(ph.data(), pl.data(), vh2.data(), vl2.data(), D, rows, acc.data(), tiles);
        for (int r = 0; r < rows; ++r)
          for (int d = 0; d < D; ++d) {
            double want = acc0[size_t(r * D + d)], mag = std::fabs(want);
            for (int t = 0; t < keys; ++t) {
              const double vt = t < 32 ? v[size_t(t * D + d)] : v2[size_t((t - 32) * D + d)];
              want += double(p[size_t(r * keys + t)]) * vt;
              mag += std::fabs(double(p[size_t(r * keys + t)]) * vt);
            }
            const double err = std::fabs(double(acc[size_t(r * D + d)]) - want) / mag;
            worst_split = std::max(worst_split, err);
            if (err > std::ldexp(1.0, -14) && bad++ < 6)
              fprintf(stderr, "  values D=%d rows=%d tiles=%d [%d][%d]: %g, want %g\n", D, rows, tiles, r, d,
                      double(acc[size_t(r * D + d)]), want);
          }
      }
    }
  amx::tile_end();
  printf("  tile products: worst error / sum |a b|: %.3g with the low parts, %.3g high parts only\n", worst_split,
         worst_hi_only);
  CHECK(worst_hi_only > std::ldexp(1.0, -12));  // the low parts matter: without them, bf16 level
  CHECK(bad == 0);
}

}  // namespace

int main() {
  if (!amx::supported()) {
    SKIP_TEST(test_split_bf16, amx::why_not());
    SKIP_TEST(test_pack_layouts, amx::why_not());
    SKIP_TEST(test_pack_from_rows, amx::why_not());
    SKIP_TEST(test_tile_products, amx::why_not());
    TEST_SUMMARY();
  }
  RUN_TEST(test_split_bf16);
  RUN_TEST(test_pack_layouts);
  RUN_TEST(test_pack_from_rows);
  RUN_TEST(test_tile_products);
  TEST_SUMMARY();
}
