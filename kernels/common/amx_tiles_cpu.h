// AMX-BF16 building blocks of the shared-prefix product (cascade_amx_cpu.cpp): fp32 operands split into
// bf16 high and low parts, packed the way TDPBF16PS wants them, and the tile products.
//
// Accuracy: x = hi + lo + r with hi = bf16(x), lo = bf16(x - hi), |r| <= 2^-17 |x| (round to nearest
// even twice; bf16 conversion flushes denormals, which moves only values below 1e-38). A product
// a . b is computed as ah.bh + al.bh + ah.bl (the dropped al.bl is below 2^-16 |a||b|), each bf16
// product exact in the fp32 accumulator: about 16 significant bits, above fp16's 11. An fp16 K or V
// row is split exactly (11 bits fit in two 8-bit halves); bf16 rows have lo = 0, and those products are
// skipped.
//
// TDPBF16PS C[16][16] += A[16][32] x B[32][16] reads A as 16 rows of 32 bf16 (row stride free) and B
// as 16 rows of 16 bf16 *pairs*: row kk holds (B[2kk][n], B[2kk+1][n]) for n = 0..15, a dword each.
// Every tile here is 16 rows x 64 bytes.
//
// Only callable where amx::supported() (amx_cpu.h); tile_begin() first on the calling thread.
#pragma once
#include <cstdint>

namespace kvb {
namespace kern {
namespace cpu {
namespace amx {

constexpr int kKeys = 32;  // keys per packed K / V tile set (two 16-key halves for K; 16 pairs for V)

// hi[i] = bf16(x[i]), lo[i] = bf16(x[i] - hi[i]) as bit patterns, n a multiple of 16. lo may be NULL.
void split_bf16(const float* x, int64_t n, uint16_t* hi, uint16_t* lo);

// K^T as B tiles: keys k[32][ld] (fp32 rows of D values) -> out[half][chunk][kk][n] dwords, half = key /
// 16, n = key % 16, chunk = d / 32, kk = (d % 32) / 2; the dword's low bf16 is d even. hi and lo each
// 32 x D bf16 (D a multiple of 32); lo may be NULL.
void pack_keys(const float* k, int64_t ld, int D, uint32_t* hi, uint32_t* lo);
// The same for keys stored in 16 bits (a cache's rows): key t's D values at rows[t], bf16 (f16 false: the
// low part is zero, lo unused) or fp16 (split exactly; lo required). No fp32 staging.
void pack_keys_rows(const uint16_t* const* rows, bool f16, int D, uint32_t* hi, uint32_t* lo);
// The tile (half, chunk) of pack_keys' output.
inline const uint32_t* key_tile(const uint32_t* packed, int D, int half, int chunk) {
  return packed + (int64_t(half) * (D / 32) + chunk) * 256;
}

// V as B tiles: values v[32][ld] -> out[chunk][kk][n] dwords, chunk = d / 16, n = d % 16, the dword =
// (v[2kk][d], v[2kk+1][d]). lo may be NULL.
void pack_values(const float* v, int64_t ld, int D, uint32_t* hi, uint32_t* lo);
// The same for values stored in 16 bits, as pack_keys_rows.
void pack_values_rows(const uint16_t* const* rows, bool f16, int D, uint32_t* hi, uint32_t* lo);
inline const uint32_t* value_tile(const uint32_t* packed, int chunk) { return packed + int64_t(chunk) * 256; }

// Loads this thread's tile configuration (8 tiles of 16 rows x 64 bytes) / releases the tile state.
void tile_begin();
void tile_end();

// Scores of rows x 32 keys (rows 16 or 32): s[r][t] (row stride 32 floats) = sum over d of q[r][d] k[t][d],
// q given as qh / ql [rows][ldq] bf16 (ldq elements), k as pack_keys' output (kl NULL: k exact in bf16).
void tile_scores(const uint16_t* qh, const uint16_t* ql, int64_t ldq, int D, const uint32_t* kh, const uint32_t* kl,
                 int rows, float* s);
// acc[r][d] += sum over the 32 * tiles keys t of p[r][t] v[t][d] (rows 16 or 32, acc row stride D floats;
// tiles 1 or 2), p as ph / pl [rows][32 * tiles] bf16, v as `tiles` pack_values outputs one after the other
// (vl NULL: v exact in bf16). Two tiles load and store acc once for 64 keys.
void tile_values(const uint16_t* ph, const uint16_t* pl, const uint32_t* vh, const uint32_t* vl, int D, int rows,
                 float* acc, int tiles = 1);

}  // namespace amx
}  // namespace cpu
}  // namespace kern
}  // namespace kvb
