// The CUDA prefill kernel's fp8 staging (kernels/prefill/prefill_fp8_tiles.h), checked on the CPU for every head
// dim and key tile the kernel instantiates: the cp.async copies fill each staging tile exactly once with
// the right 16 bytes of each key row and stay inside the 16-bit kernel's second K / V buffer; the
// conversion items cover the 16-bit tile exactly once, reading each element's code and writing it
// where the 16-bit kernel's cp.async puts that element (the layout the ldmatrix fragments of
// kernels_prefill_tiles.cpp read); no shared-memory bank conflicts in the copies, the 8-byte loads or the
// 16-byte stores; and an emulated CTA, with the software conversion of fp8.h (the sm_80 path) and the
// bf16 step, turns a tile of every code into the code's values / fold exactly.
#include <cmath>
#include <cstring>
#include <vector>

#include "../../kernels/common/fp8.h"
#include "../../kernels/prefill/prefill.h"
#include "../../kernels/prefill/prefill_fp8_tiles.h"
#include "harness.h"
#include "smem_banks.h"

namespace {

using namespace kvb::kern;
namespace fs = tiles::fp8s;
using smem::conflict_free;

struct Shape {
  int D, BN;
};
// prefill.cu: BN 64 at D 64 (32 in the tree-mask kernels), 32 from D 128 up, 16 at D 256 on devices with
// less shared memory.
const Shape kShapes[] = {{64, 64}, {64, 32}, {128, 32}, {256, 32}, {256, 16}};

int threads_of(int D) { return 32 * tiles::cta_warps(D); }

void test_copy_fills_staging_once() {
  for (const Shape& s : kShapes) {
    const int T = threads_of(s.D), step = fs::copy_row_step(T, s.D);
    CHECK(s.BN % step == 0);
    CHECK(fs::staging(s.D, s.BN, 0) >= fs::tile16_bytes(s.D, s.BN));  // after the converted tile
    CHECK(fs::staging(s.D, s.BN, 1) == fs::staging(s.D, s.BN, 0) + uint32_t(s.BN * s.D));
    CHECK(fs::staging(s.D, s.BN, 1) + uint32_t(s.BN * s.D) <= 2 * fs::tile16_bytes(s.D, s.BN));  // the 16-bit kernel's
    std::vector<int> hits(size_t(s.BN * s.D / 16), 0);
    bool banks_ok = true;
    for (int it = 0; it < s.BN / step; ++it) {
      std::vector<uint32_t> warp;
      for (int tid = 0; tid < T; ++tid) {
        const int row = fs::copy_row(tid, it, T, s.D), chunk = fs::copy_chunk(tid, s.D);
        CHECK(row >= 0 && row < s.BN && chunk >= 0 && chunk * 16 < s.D);
        const uint32_t dst = fs::copy_dst(s.D, row, chunk);
        CHECK(dst == uint32_t(row * s.D + chunk * 16));  // the key row's bytes chunk*16.. land in its staging row
        ++hits[dst / 16];
        warp.push_back(dst);
        if (warp.size() == 32) banks_ok &= conflict_free(warp, 16), warp.clear();
      }
    }
    CHECK(smem::not_once(hits) == 0);
    CHECK(banks_ok);
  }
}

void test_conversion_covers_tile_once() {
  for (const Shape& s : kShapes) {
    const int T = threads_of(s.D), C = s.D / 8;
    CHECK(s.BN * C % T == 0);
    std::vector<int> hits(size_t(s.BN * C), 0);
    bool loads_ok = true, stores_ok = true;
    for (int it = 0; it < s.BN * C / T; ++it) {
      std::vector<uint32_t> ld, st;
      for (int tid = 0; tid < T; ++tid) {
        const int x = tid + it * T;
        const int row = fs::cvt_row(x, s.D), chunk = fs::cvt_chunk(x, s.D);
        CHECK(row < s.BN && chunk < C);
        // The codes of elements 8 chunk .. 8 chunk + 7 of the row, to where the 16-bit kernel's cp.async puts them.
        CHECK(fs::cvt_src(s.D, row, chunk) == uint32_t(row * s.D + chunk * 8));
        CHECK(fs::cvt_dst(s.D, row, chunk) == tiles::frag::swz(C, row, chunk));
        ++hits[fs::cvt_dst(s.D, row, chunk) / 16];
        ld.push_back(fs::cvt_src(s.D, row, chunk));
        st.push_back(fs::cvt_dst(s.D, row, chunk));
        if (ld.size() == 32) {
          loads_ok &= conflict_free(ld, 8), stores_ok &= conflict_free(st, 16);
          ld.clear(), st.clear();
        }
      }
    }
    CHECK(smem::not_once(hits) == 0);
    CHECK(loads_ok);
    CHECK(stores_ok);
  }
}

// fp16 / bf16 bits -> float.
float half_to_float(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const float sign = (h & 0x8000) ? -1.f : 1.f;
  if (e == 31) return m ? NAN : sign * INFINITY;
  if (e == 0) return sign * std::ldexp(float(m), -24);
  return sign * std::ldexp(1.f + float(m) / 1024.f, e - 15);
}
float bf16_to_float(uint16_t b) { return fp8::f32_from_bits(uint32_t(b) << 16); }
// The kernel's bf16 step on one fp16 (fp32, then round to nearest even to bf16).
uint16_t half_to_bf16(uint16_t h) {
  const uint32_t u = fp8::f32_bits(half_to_float(h));
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// An emulated CTA stages a tile whose every element holds some code, converts it as the kernel does
// (software path) and the 16-bit tile, read at the fragments' layout, holds each code's value / fold.
void test_emulated_conversion_exact() {
  for (bool e5m2 : {false, true})
    for (bool bf16 : {false, true})
      for (const Shape& s : kShapes) {
        const int T = threads_of(s.D), C = s.D / 8;
        std::vector<uint8_t> staging(size_t(s.BN * s.D));
        for (size_t i = 0; i < staging.size(); ++i) staging[i] = uint8_t(i * 37 + i / 256);
        std::vector<uint8_t> tile(fs::tile16_bytes(s.D, s.BN), 0);
        for (int it = 0; it < s.BN * C / T; ++it)
          for (int tid = 0; tid < T; ++tid) {
            const int x = tid + it * T, row = fs::cvt_row(x, s.D), chunk = fs::cvt_chunk(x, s.D);
            uint32_t raw[2];
            std::memcpy(raw, &staging[fs::cvt_src(s.D, row, chunk)], 8);
            uint32_t w[4];
            if (e5m2) fp8::e5m2x4_to_half2x2(raw[0], &w[0], &w[1]), fp8::e5m2x4_to_half2x2(raw[1], &w[2], &w[3]);
            else fp8::e4m3x4_to_half2x2(raw[0], &w[0], &w[1]), fp8::e4m3x4_to_half2x2(raw[1], &w[2], &w[3]);
            if (bf16)
              for (uint32_t& v : w) v = uint32_t(half_to_bf16(uint16_t(v))) | uint32_t(half_to_bf16(uint16_t(v >> 16))) << 16;
            std::memcpy(&tile[fs::cvt_dst(s.D, row, chunk)], w, 16);
          }
        const float fold = e5m2 ? 1.f : fp8::kE4m3ViaHalfFactor;
        int bad = 0;
        for (int r = 0; r < s.BN; ++r)
          for (int d = 0; d < s.D; ++d) {
            uint16_t bits;
            std::memcpy(&bits, &tile[tiles::frag::swz(C, r, d / 8) + uint32_t(d % 8) * 2], 2);
            const float got = (bf16 ? bf16_to_float(bits) : half_to_float(bits)) * fold;
            const uint8_t code = staging[size_t(r * s.D + d)];
            const float want = e5m2 ? fp8::e5m2_to_float(code) : fp8::e4m3_to_float(code);
            const bool ok = std::isnan(want) ? std::isnan(got) : got == want && std::signbit(got) == std::signbit(want);
            if (!ok && bad++ < 3)
              fprintf(stderr, "  %s %s D %d row %d d %d code 0x%02x: %g, want %g\n", e5m2 ? "e5m2" : "e4m3",
                      bf16 ? "bf16" : "fp16", s.D, r, d, code, double(got), double(want));
          }
        CHECK(bad == 0);
      }
}

}  // namespace

int main() {
  RUN_TEST(test_copy_fills_staging_once);
  RUN_TEST(test_conversion_covers_tile_once);
  RUN_TEST(test_emulated_conversion_exact);
  TEST_SUMMARY();
}
