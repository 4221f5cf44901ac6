// AMX-BF16 packing and tile products (amx_tiles_cpu.h). Compiled for AMX + AVX512-BF16 by a target region
// around this file only; called only where amx::supported().
#include "amx_tiles_cpu.h"

#include <cstring>

#include "amx_cpu.h"

#if KVB_AMX_BUILD
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16")
#endif

namespace kvb {
namespace kern {
namespace cpu {
namespace amx {

namespace {

// The 64-byte configuration that LDTILECFG reads (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette, start_row;
  uint8_t reserved[14];
  uint16_t bytes_per_row[16];
  uint8_t rows[16];
};

// (maskz forms throughout: GCC 12's plain ones trip -Wmaybe-uninitialized on their undefined pass-through)
constexpr __mmask16 kAll = 0xffff;
inline __m256i to_bf16(__m512 x) { return (__m256i)_mm512_cvtneps_pbh(x); }
inline __m512i widen(__m256i h) { return _mm512_maskz_cvtepu16_epi32(kAll, h); }
inline __m512 from_bf16(__m256i h) { return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, widen(h), 16)); }
// Two rows' bf16 halves as dwords (a in the low 16 bits).
inline __m512i pair(__m256i a, __m256i b) { return _mm512_or_si512(widen(a), _mm512_maskz_slli_epi32(kAll, widen(b), 16)); }

}  // namespace

void split_bf16(const float* x, int64_t n, uint16_t* hi, uint16_t* lo) {
  for (int64_t i = 0; i < n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m256i h = to_bf16(v);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi + i), h);
    if (lo) _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo + i), to_bf16(_mm512_sub_ps(v, from_bf16(h))));
  }
}

namespace {

// Tile row kk of (half, chunk) is dword chunk * 16 + kk of the half's 16 keys, keys D bf16 apart in src.
void gather_keys(const uint16_t* src, int D, uint32_t* dst) {
  const __m512i rows = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                          _mm512_set1_epi32(D / 2));
  for (int half = 0; half < 2; ++half)
    for (int chunk = 0; chunk < D / 32; ++chunk)
      for (int kk = 0; kk < 16; ++kk) {
        const __m512i idx = _mm512_add_epi32(rows, _mm512_set1_epi32(chunk * 16 + kk));
        const __m512i g = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), kAll, idx, src + half * 16 * D, 4);
        _mm512_storeu_si512(dst + ((half * (D / 32) + chunk) * 16 + kk) * 16, g);
      }
}

}  // namespace

void pack_keys(const float* k, int64_t ld, int D, uint32_t* hi, uint32_t* lo) {
  // Each key row split in place order (D bf16 = D/2 dwords, a dword per d pair), then gathered.
  alignas(64) uint16_t th[kKeys * 256], tl[kKeys * 256];
  for (int t = 0; t < kKeys; ++t) split_bf16(k + t * ld, D, th + t * D, lo ? tl + t * D : nullptr);
  gather_keys(th, D, hi);
  if (lo) gather_keys(tl, D, lo);
}

namespace {

// 16 values of 16-bit storage at p as bf16 high and low parts (bf16: the bits, low zero).
inline void split16(const uint16_t* p, bool f16, __m256i* hi, __m256i* lo) {
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  if (!f16) {
    *hi = raw;
    *lo = _mm256_setzero_si256();
    return;
  }
  const __m512 x = _mm512_maskz_cvtph_ps(kAll, raw);
  *hi = to_bf16(x);
  *lo = to_bf16(_mm512_sub_ps(x, from_bf16(*hi)));
}

}  // namespace

void pack_keys_rows(const uint16_t* const* rows, bool f16, int D, uint32_t* hi, uint32_t* lo) {
  if (!f16) {
    alignas(64) uint16_t th[kKeys * 256];
    for (int t = 0; t < kKeys; ++t) std::memcpy(th + t * D, rows[t], sizeof(uint16_t) * size_t(D));
    gather_keys(th, D, hi);
    return;
  }
  alignas(64) uint16_t th[kKeys * 256], tl[kKeys * 256];
  for (int t = 0; t < kKeys; ++t)
    for (int d = 0; d < D; d += 16) {
      __m256i h, l;
      split16(rows[t] + d, true, &h, &l);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(th + t * D + d), h);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(tl + t * D + d), l);
    }
  gather_keys(th, D, hi);
  gather_keys(tl, D, lo);
}

void pack_values(const float* v, int64_t ld, int D, uint32_t* hi, uint32_t* lo) {
  for (int kk = 0; kk < 16; ++kk) {
    const float* a = v + 2 * kk * ld;
    const float* b = a + ld;
    for (int chunk = 0; chunk < D / 16; ++chunk) {
      const __m512 xa = _mm512_loadu_ps(a + chunk * 16), xb = _mm512_loadu_ps(b + chunk * 16);
      const __m256i ha = to_bf16(xa), hb = to_bf16(xb);
      _mm512_storeu_si512(hi + (chunk * 16 + kk) * 16, pair(ha, hb));
      if (lo)
        _mm512_storeu_si512(lo + (chunk * 16 + kk) * 16, pair(to_bf16(_mm512_sub_ps(xa, from_bf16(ha))),
                                                              to_bf16(_mm512_sub_ps(xb, from_bf16(hb)))));
    }
  }
}

void pack_values_rows(const uint16_t* const* rows, bool f16, int D, uint32_t* hi, uint32_t* lo) {
  for (int kk = 0; kk < 16; ++kk)
    for (int chunk = 0; chunk < D / 16; ++chunk) {
      __m256i ha, la, hb, lb;
      split16(rows[2 * kk] + chunk * 16, f16, &ha, &la);
      split16(rows[2 * kk + 1] + chunk * 16, f16, &hb, &lb);
      _mm512_storeu_si512(hi + (chunk * 16 + kk) * 16, pair(ha, hb));
      if (f16) _mm512_storeu_si512(lo + (chunk * 16 + kk) * 16, pair(la, lb));
    }
}

void tile_begin() {
  TileConfig cfg;
  std::memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; ++t) {
    cfg.bytes_per_row[t] = 64;
    cfg.rows[t] = 16;
  }
  // Not _tile_loadconfig: GCC 12's asm names only the first 8 bytes as its input, and the stores of the
  // rest are then dropped as dead (tiles left unconfigured: #UD on the first tile instruction).
  __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}

void tile_end() { _tile_release(); }

// Tiles: 0-3 accumulators (row block i, column block j -> tile 2i + j), 4-5 the A row blocks, 6-7 the B
// column blocks; four independent accumulators keep the tile unit busy (a TDPBF16PS depends on the
// previous one into the same tile).
namespace {

template <bool kTwoRowBlocks>
void scores(const uint16_t* qh, const uint16_t* ql, int64_t ldq, int D, const uint32_t* kh, const uint32_t* kl, float* s) {
  _tile_zero(0);
  _tile_zero(1);
  if (kTwoRowBlocks) {
    _tile_zero(2);
    _tile_zero(3);
  }
  const int64_t qstride = ldq * 2;
  // ah . bh + al . bh + ah . bl, one pass each over head_dim.
  const uint16_t* as[3] = {qh, ql, qh};
  const uint32_t* bs[3] = {kh, kh, kl};
  for (int part = 0; part < 3; ++part) {
    if (!as[part] || !bs[part]) continue;
    for (int chunk = 0; chunk < D / 32; ++chunk) {
      const uint16_t* a = as[part] + chunk * 32;
      _tile_loadd(4, a, qstride);
      _tile_loadd(6, key_tile(bs[part], D, 0, chunk), 64);
      _tile_loadd(7, key_tile(bs[part], D, 1, chunk), 64);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      if (kTwoRowBlocks) {
        _tile_loadd(5, a + 16 * ldq, qstride);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
    }
  }
  _tile_stored(0, s, 32 * 4);
  _tile_stored(1, s + 16, 32 * 4);
  if (kTwoRowBlocks) {
    _tile_stored(2, s + 16 * 32, 32 * 4);
    _tile_stored(3, s + 16 * 32 + 16, 32 * 4);
  }
}

template <bool kTwoRowBlocks>
void values(const uint16_t* ph, const uint16_t* pl, const uint32_t* vh, const uint32_t* vl, int D, int tiles,
            float* acc) {
  const int64_t astride = int64_t(D) * 4, pstride = int64_t(tiles) * 64;
  const int64_t vtile = int64_t(kKeys) * D / 2;  // dwords of one packed V tile set
  for (int chunk = 0; chunk < D / 16; chunk += 2) {
    float* c0 = acc + chunk * 16;
    float* c1 = c0 + 16 * D;
    _tile_loadd(0, c0, astride);
    _tile_loadd(1, c0 + 16, astride);
    if (kTwoRowBlocks) {
      _tile_loadd(2, c1, astride);
      _tile_loadd(3, c1 + 16, astride);
    }
    for (int kt = 0; kt < tiles; ++kt) {
      const uint16_t* as[3] = {ph + kt * 32, pl ? pl + kt * 32 : nullptr, ph + kt * 32};
      const uint32_t* bs[3] = {vh + kt * vtile, vh + kt * vtile, vl ? vl + kt * vtile : nullptr};
      for (int part = 0; part < 3; ++part) {
        if (!as[part] || !bs[part]) continue;
        _tile_loadd(4, as[part], pstride);
        _tile_loadd(6, value_tile(bs[part], chunk), 64);
        _tile_loadd(7, value_tile(bs[part], chunk + 1), 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        if (kTwoRowBlocks) {
          _tile_loadd(5, as[part] + 16 * 32 * tiles, pstride);
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
        }
      }
    }
    _tile_stored(0, c0, astride);
    _tile_stored(1, c0 + 16, astride);
    if (kTwoRowBlocks) {
      _tile_stored(2, c1, astride);
      _tile_stored(3, c1 + 16, astride);
    }
  }
}

}  // namespace

void tile_scores(const uint16_t* qh, const uint16_t* ql, int64_t ldq, int D, const uint32_t* kh, const uint32_t* kl,
                 int rows, float* s) {
  if (rows > 16) scores<true>(qh, ql, ldq, D, kh, kl, s);
  else scores<false>(qh, ql, ldq, D, kh, kl, s);
}

void tile_values(const uint16_t* ph, const uint16_t* pl, const uint32_t* vh, const uint32_t* vl, int D, int rows,
                 float* acc, int tiles) {
  if (rows > 16) values<true>(ph, pl, vh, vl, D, tiles, acc);
  else values<false>(ph, pl, vh, vl, D, tiles, acc);
}

}  // namespace amx
}  // namespace cpu
}  // namespace kern
}  // namespace kvb

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else  // no AMX in this build: never called (amx::supported() is false)

namespace kvb {
namespace kern {
namespace cpu {
namespace amx {
void split_bf16(const float*, int64_t, uint16_t*, uint16_t*) {}
void pack_keys(const float*, int64_t, int, uint32_t*, uint32_t*) {}
void pack_values(const float*, int64_t, int, uint32_t*, uint32_t*) {}
void pack_keys_rows(const uint16_t* const*, bool, int, uint32_t*, uint32_t*) {}
void pack_values_rows(const uint16_t* const*, bool, int, uint32_t*, uint32_t*) {}
void tile_begin() {}
void tile_end() {}
void tile_scores(const uint16_t*, const uint16_t*, int64_t, int, const uint32_t*, const uint32_t*, int, float*) {}
void tile_values(const uint16_t*, const uint16_t*, const uint32_t*, const uint32_t*, int, int, float*, int) {}
}  // namespace amx
}  // namespace cpu
}  // namespace kern
}  // namespace kvb

#endif
