// Reading FP8 caches in the CUDA attention kernels: element tags for the two formats and KvVec, the
// cache-side counterpart of Vec (cuda.cuh) that the decode kernel is templated on. For fp16 / bf16 /
// fp32 caches KvVec<T> is Vec<T> with 16-byte loads (those kernels compile as before); an fp8 cache
// loads 8 codes (8 bytes) per lane, so each lane holds as many elements as with an fp16 cache and the
// kernel moves half the bytes. Codes become floats through fp16: the cvt instruction on sm_89+ (exact,
// NaN kept), the integer conversion of fp8.h on older devices, which gives e4m3 values divided by 256:
// fold() is the factor the kernel multiplies its K / V scales by, so the products are exact either way.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "fp8.h"
#include "validate.h"
#include "cuda.cuh"

namespace kvb {
namespace kern {
namespace cuda {

struct Fp8E4m3 {
  unsigned char code;
};
struct Fp8E5m2 {
  unsigned char code;
};

template <typename KV>
constexpr bool kIsFp8Tag = sizeof(KV) == 1;

// Per-kv-head K / V scales by value (a captured graph keeps them): a kernel argument of fp8 launches.
struct Fp8HeadScales {
  float k[kMaxHeadScales];  // per kv head, when per_head_k (validate.cpp refuses more heads)
  float v[kMaxHeadScales];
  float k_all, v_all;
  int per_head_k, per_head_v;
  __device__ __forceinline__ float k_of(int head) const { return per_head_k ? k[head] : k_all; }
  __device__ __forceinline__ float v_of(int head) const { return per_head_v ? v[head] : v_all; }
};

// The launch argument for cache c (host side): per-head arrays, when given, copied (validate.cpp caps
// their count at kMaxHeadScales); heads past num_kv_heads get the per-cache scale.
inline Fp8HeadScales fp8_head_scales(const Cache& c) {
  Fp8HeadScales sc;
  sc.k_all = c.k_scale;
  sc.v_all = c.v_scale;
  sc.per_head_k = c.k_head_scales != nullptr;
  sc.per_head_v = c.v_head_scales != nullptr;
  for (int64_t h = 0; h < kMaxHeadScales; ++h) {
    sc.k[h] = h < c.num_kv_heads ? c.k_scale_of(h) : c.k_scale;
    sc.v[h] = h < c.num_kv_heads ? c.v_scale_of(h) : c.v_scale;
  }
  return sc;
}

template <typename KV>
struct KvVec : Vec<KV> {
  using Raw = uint4;
  static __device__ __forceinline__ float fold() { return 1.f; }
  static __device__ __forceinline__ void raw_to_float(const Raw& u, float* f) { Vec<KV>::to_float(u, f); }
};

// Two fp16x2 words -> four floats.
__device__ __forceinline__ void half2x2_to_float(uint32_t lo, uint32_t hi, float* f) {
  const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&lo));
  const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&hi));
  f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define KVB_FP8_HW_CVT 1
#else
#define KVB_FP8_HW_CVT 0
#endif

// Four codes (bytes of x, lowest first) -> fp16x2 words (codes 0, 1 in lo; 2, 3 in hi).
template <bool E5M2>
__device__ __forceinline__ void fp8x4_to_half2x2(uint32_t x, uint32_t* lo, uint32_t* hi) {
#if KVB_FP8_HW_CVT
  const unsigned short a = (unsigned short)(x & 0xffffu), b = (unsigned short)(x >> 16);
  if (E5M2) {
    asm("cvt.rn.f16x2.e5m2x2 %0, %1;\n" : "=r"(*lo) : "h"(a));
    asm("cvt.rn.f16x2.e5m2x2 %0, %1;\n" : "=r"(*hi) : "h"(b));
  } else {
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(*lo) : "h"(a));
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(*hi) : "h"(b));
  }
#else
  if (E5M2)
    fp8::e5m2x4_to_half2x2(x, lo, hi);
  else
    fp8::e4m3x4_to_half2x2(x, lo, hi);
#endif
}

template <bool E5M2>
struct Fp8Vec {
  static constexpr int N = 8;
  using Raw = uint2;
  // e5m2 is exact through fp16 everywhere; e4m3 in software comes out divided by 256.
  static __device__ __forceinline__ float fold() { return (E5M2 || KVB_FP8_HW_CVT) ? 1.f : fp8::kE4m3ViaHalfFactor; }
  static __device__ __forceinline__ void raw_to_float(const Raw& u, float* f) {
    uint32_t a, b, c, d;
    fp8x4_to_half2x2<E5M2>(u.x, &a, &b);
    fp8x4_to_half2x2<E5M2>(u.y, &c, &d);
    half2x2_to_float(a, b, f);
    half2x2_to_float(c, d, f + 4);
  }
};

// Eight codes (8 bytes, lowest first) -> eight T (fp16 or bf16) as four 32-bit pairs in element order:
// how the tensor-core kernels stage fp8 K / V in shared memory for ldmatrix. The values are the
// codes' values divided by Fp8Vec<E5M2>::fold(), exactly (bf16 goes through fp32: fp16 -> fp32 ->
// bf16 is exact for every fp8 value and keeps NaN).
template <typename T, bool E5M2>
__device__ __forceinline__ void fp8x8_to_pairs(uint2 raw, uint32_t (&w)[4]) {
  fp8x4_to_half2x2<E5M2>(raw.x, &w[0], &w[1]);
  fp8x4_to_half2x2<E5M2>(raw.y, &w[2], &w[3]);
  if constexpr (std::is_same<T, __nv_bfloat16>::value) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
      const __nv_bfloat162 b = __float22bfloat162_rn(f);
      w[i] = *reinterpret_cast<const uint32_t*>(&b);
    }
  }
}

template <>
struct KvVec<Fp8E4m3> : Fp8Vec<false> {};
template <>
struct KvVec<Fp8E5m2> : Fp8Vec<true> {};

}  // namespace cuda
}  // namespace kern
}  // namespace kvb
