// Portable fp16 / bf16 <-> fp32 conversion for the CPU kernels (bit manipulation, no CUDA headers),
// and typed element access by Dtype.
#pragma once
#include <cstdint>
#include <cstring>

#include "fp8.h"
#include "types.h"

namespace kvb {
namespace kern {
namespace cpu {

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Bytes per cache element.
constexpr int64_t es_of(Dtype DT) { return DT == Dtype::f32 ? 4 : is_fp8(DT) ? 1 : 2; }

// What the K (or V) rows read by the vector loads (simd_vec_cpu.inc) must be multiplied by to be the
// values of a kv head whose scale is `scale`: the fp8 scale (and the 2^8 of the e4m3 load), 1 for other
// caches. The kernels apply it once to q (K) and to the output (V).
inline float fold_of(const Cache& c, float scale) {
  return c.dtype == Dtype::e4m3 ? scale * fp8::kE4m3ViaHalfFactor : c.fp8() ? scale : 1.f;
}

// IEEE binary16 -> binary32, exact (denormals, inf and NaN included).
inline float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (man << 13));          // inf / NaN
  if (exp != 0) return bits_to_float(sign | ((exp + 112) << 23) | (man << 13));      // normal
  // zero or denormal: man * 2^-24
  const float mag = float(man) * (1.0f / 16777216.0f);
  return bits_to_float(sign | float_to_bits(mag));
}

// binary32 -> binary16, round to nearest even; overflow to inf; NaN stays NaN.
inline uint16_t float_to_half(float f) {
  const uint32_t u = float_to_bits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) return uint16_t(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u));
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (a < 0x38800000u) {                                   // below 2^-14: denormal or zero
    // value * 2^24 rounded to nearest even integer = the denormal mantissa
    const float mag = bits_to_float(a) * 16777216.0f;
    const float r = mag + 8388608.0f - 8388608.0f;  // round to integer, nearest even (default mode)
    return uint16_t(sign | uint16_t(r));
  }
  // normal: rebias exponent, round the 13 dropped bits to nearest even
  uint32_t h = ((a >> 13) - (112u << 10));
  const uint32_t rest = a & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
  return uint16_t(sign | h);
}

inline float bf16_to_float(uint16_t b) { return bits_to_float(uint32_t(b) << 16); }

inline uint16_t float_to_bf16(float f) {
  const uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);  // quiet NaN
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return uint16_t((u + rounding) >> 16);
}

// Element i of an array of dtype d, as float.
inline float load_elem(const void* p, Dtype d, int64_t i) {
  switch (d) {
    case Dtype::f16: return half_to_float(static_cast<const uint16_t*>(p)[i]);
    case Dtype::bf16: return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case Dtype::e4m3: return fp8::e4m3_to_float(static_cast<const uint8_t*>(p)[i]);
    case Dtype::e5m2: return fp8::e5m2_to_float(static_cast<const uint8_t*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

inline void store_elem(void* p, Dtype d, int64_t i, float x) {
  switch (d) {
    case Dtype::f16: static_cast<uint16_t*>(p)[i] = float_to_half(x); break;
    case Dtype::bf16: static_cast<uint16_t*>(p)[i] = float_to_bf16(x); break;
    case Dtype::e4m3: static_cast<uint8_t*>(p)[i] = fp8::float_to_e4m3(x); break;  // (scale 1)
    case Dtype::e5m2: static_cast<uint8_t*>(p)[i] = fp8::float_to_e5m2(x); break;
    default: static_cast<float*>(p)[i] = x; break;
  }
}

// out[0..n) = x[i] * mul in dtype d (the switch outside the loops, which the compiler can vectorise).
inline void store_row(void* out, Dtype d, int64_t n, const float* x, float mul) {
  switch (d) {
    case Dtype::f16: {
      uint16_t* o = static_cast<uint16_t*>(out);
      for (int64_t i = 0; i < n; ++i) o[i] = float_to_half(x[i] * mul);
      break;
    }
    case Dtype::bf16: {
      uint16_t* o = static_cast<uint16_t*>(out);
      for (int64_t i = 0; i < n; ++i) o[i] = float_to_bf16(x[i] * mul);
      break;
    }
    case Dtype::f32: {
      float* o = static_cast<float*>(out);
      for (int64_t i = 0; i < n; ++i) o[i] = x[i] * mul;
      break;
    }
    default:
      for (int64_t i = 0; i < n; ++i) store_elem(out, d, i, x[i] * mul);
      break;
  }
}

// All 65536 fp16 values as floats (256 KiB, built once): the hot-loop conversion.
const float* half_table();
// The 256 values of an fp8 format (d = e4m3 or e5m2) as floats, built once.
const float* fp8_table(Dtype d);

// n contiguous elements of dtype d starting at p -> floats.
inline void load_row(const void* p, Dtype d, int64_t n, float* out) {
  switch (d) {
    case Dtype::f16: {
      const uint16_t* h = static_cast<const uint16_t*>(p);
      const float* table = half_table();
      for (int64_t i = 0; i < n; ++i) out[i] = table[h[i]];
      break;
    }
    case Dtype::bf16: {
      const uint16_t* h = static_cast<const uint16_t*>(p);
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(h[i]);
      break;
    }
    case Dtype::e4m3:
    case Dtype::e5m2: {
      const uint8_t* b = static_cast<const uint8_t*>(p);
      const float* table = fp8_table(d);
      for (int64_t i = 0; i < n; ++i) out[i] = table[b[i]];
      break;
    }
    default: std::memcpy(out, p, size_t(n) * 4); break;
  }
}

}  // namespace cpu
}  // namespace kern
}  // namespace kvb
