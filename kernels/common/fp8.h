// FP8 (OCP E4M3 "fn" and E5M2) <-> fp32 conversion: the one implementation shared by the CPU kernels and
// the CUDA kernels (pure __host__ __device__ integer code, no CUDA header needed), so that CPU and CUDA
// write bit-identical cache bytes. The rule, as stated in abi/kvblock.h:
//
//   stored = RNE_fp8(fl32(x / scale)), saturated to the finite range (e4m3 +-448, e5m2 +-57344);
//   NaN -> NaN (sign kept: sign | 0x7f, a NaN code in both formats); +-inf -> +-max (both formats;
//   e5m2 has an inf code, but the finite-range rule holds for it too, as with the hardware cvt's
//   .satfinite); -0 -> 0x80; values below half the smallest subnormal -> +-0.
//
// x / scale is one fp32 division (IEEE, correctly rounded on the host and on CUDA without fast math),
// then one round-to-nearest-even to fp8 done on the integer bits (no float rounding mode involved).
// Decoding is exact: every fp8 value is an fp32 (and an fp16) value.
//
// Reading in vector code: an e5m2 byte b is the fp16 whose bits are b << 8 (exactly, inf and NaN too);
// an e4m3 byte b (other than the NaN codes 0x7f / 0xff) is the fp16 with bits
// ((b & 0x80) << 8) | ((b & 0x7f) << 7) times 2^8 (kE4m3ViaHalfFactor), subnormals included.
#pragma once
#include <cstdint>
#include <cstring>

#include "host_device.h"

namespace kvb {
namespace kern {
namespace fp8 {

constexpr float kE4m3Max = 448.f;
constexpr float kE5m2Max = 57344.f;
constexpr float kE4m3ViaHalfFactor = 256.f;

KVB_HD uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
KVB_HD float f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// |x| (bits a, a finite nonzero-or-zero fp32 magnitude) rounded to nearest even on a grid with
// man_bits mantissa bits, exponent bias `bias` and max code max_code (the largest finite magnitude code),
// as the fp8 magnitude code (7 bits). Pure integer arithmetic.
KVB_HD uint32_t encode_magnitude(uint32_t a, int man_bits, int bias, uint32_t max_code) {
  const int exp = int(a >> 23);  // biased fp32 exponent, 0 for fp32 denormals and zero
  const int min_normal_exp = 127 + 1 - bias;  // fp32 biased exponent of the fp8 smallest normal
  uint32_t sig, q;
  int shift;
  if (exp >= min_normal_exp) {
    // Normal in fp8: keep (exponent, mantissa) bits, rounding the dropped 23 - man_bits bits.
    shift = 23 - man_bits;
    sig = a;  // exponent and mantissa together: a carry out of the mantissa bumps the exponent
    q = sig >> shift;
    const uint32_t rem = sig & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    q -= uint32_t(127 - bias) << man_bits;  // rebias
  } else {
    // Subnormal in fp8 (or zero): round |x| / 2^(1 - bias - man_bits) to an integer (a carry to
    // 2^man_bits is the smallest normal code, as it should be).
    if (exp == 0) return 0;  // fp32 zero or denormal: far below half the smallest fp8 subnormal
    sig = (a & 0x7fffffu) | 0x800000u;
    // |x| = sig * 2^(exp - 150) and the subnormal step is 2^(1 - bias - man_bits).
    shift = 151 - bias - man_bits - exp;  // >= 21 here
    if (shift >= 32) return 0;  // below a quarter of the smallest subnormal
    q = sig >> shift;
    const uint32_t rem = sig & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
  }
  return q > max_code ? max_code : q;
}

// fp32 -> e4m3fn bits: RNE, saturating to +-448, inf -> +-448, NaN -> sign | 0x7f.
KVB_HD uint8_t float_to_e4m3(float x) {
  const uint32_t u = f32_bits(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint8_t(sign | 0x7fu);
  if (a == 0x7f800000u) return uint8_t(sign | 0x7eu);
  return uint8_t(sign | encode_magnitude(a, 3, 7, 0x7eu));
}

// fp32 -> e5m2 bits: RNE, saturating to +-57344, inf -> +-57344, NaN -> sign | 0x7f.
KVB_HD uint8_t float_to_e5m2(float x) {
  const uint32_t u = f32_bits(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint8_t(sign | 0x7fu);
  if (a == 0x7f800000u) return uint8_t(sign | 0x7bu);
  return uint8_t(sign | encode_magnitude(a, 2, 15, 0x7bu));
}

// e4m3fn bits -> fp32, exact; 0x7f / 0xff are NaN (the format has no inf).
KVB_HD float e4m3_to_float(uint8_t b) {
  const uint32_t sign = uint32_t(b & 0x80u) << 24;
  const uint32_t e = (b >> 3) & 0xfu, m = b & 0x7u;
  if ((b & 0x7fu) == 0x7fu) return f32_from_bits(sign | 0x7fc00000u);
  if (e == 0) return f32_from_bits(sign | f32_bits(float(m) * (1.f / 512.f)));  // m * 2^-9
  return f32_from_bits(sign | ((e + 120u) << 23) | (m << 20));
}

// e5m2 bits -> fp32, exact (the top byte of an fp16: inf 0x7c, NaN 0x7d..0x7f, signs too).
KVB_HD float e5m2_to_float(uint8_t b) {
  const uint32_t sign = uint32_t(b & 0x80u) << 24;
  const uint32_t e = (b >> 2) & 0x1fu, m = b & 0x3u;
  if (e == 0x1f) return f32_from_bits(sign | 0x7f800000u | (m << 21));
  if (e == 0) return f32_from_bits(sign | f32_bits(float(m) * (1.f / 65536.f)));  // m * 2^-16
  return f32_from_bits(sign | ((e + 112u) << 23) | (m << 21));
}

// Four fp8 codes (byte i of x, i = 0..3) as two fp16x2 words in software, integer operations only
// (the sm_80 path of the CUDA kernels; sm_89+ use the cvt instruction): *lo holds codes 0 (low half) and
// 1, *hi codes 2 and 3. e5m2: the fp16 bits are the code << 8, exact (inf, NaN included). e4m3: the fp16
// is the value / 2^8 (kE4m3ViaHalfFactor; the caller folds the 256 into its scale), exact, subnormals
// included, and the NaN codes 0x7f / 0xff become fp16 NaNs (0x7f80 / 0xff80) that stay NaN after the x256.
KVB_HD void e5m2x4_to_half2x2(uint32_t x, uint32_t* lo, uint32_t* hi) {
  *lo = ((x & 0xffu) << 8) | ((x & 0xff00u) << 16);
  *hi = ((x >> 8) & 0xff00u) | (x & 0xff000000u);
}
KVB_HD uint32_t e4m3x2_spread_to_half2(uint32_t s) {  // s = codes at bits 0-7 and 16-23
  uint32_t h = ((s & 0x00800080u) << 8) | ((s & 0x007f007fu) << 7);
  // A NaN code has magnitude bits 0x3f80, every other code at most 0x3f00 (multiples of 0x80): adding
  // 0x80 sets bit 14 only for NaN; (that bit >> 4) * 0x1f is 0x7c00, the all-ones fp16 exponent.
  const uint32_t nan_bit = ((h & 0x7fff7fffu) + 0x00800080u) & 0x40004000u;
  return h | (nan_bit >> 4) * 0x1fu;
}
KVB_HD void e4m3x4_to_half2x2(uint32_t x, uint32_t* lo, uint32_t* hi) {
  *lo = e4m3x2_spread_to_half2((x & 0xffu) | ((x & 0xff00u) << 8));
  *hi = e4m3x2_spread_to_half2(((x >> 16) & 0xffu) | ((x >> 8) & 0xff0000u));
}

// Quantize x with scale (> 0, finite): the stored byte.
KVB_HD uint8_t quantize(float x, float scale, bool e5m2) {
  const float y = x / scale;
  return e5m2 ? float_to_e5m2(y) : float_to_e4m3(y);
}

}  // namespace fp8
}  // namespace kern
}  // namespace kvb
