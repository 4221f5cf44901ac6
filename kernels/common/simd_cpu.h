// Run-time choice of the CPU vector code path, shared by the CPU kernels.
//
// A kernel that wants wide vectors is compiled once per Isa: its body (an .inc file, or templates) is
// included inside a namespace under the matching KVB_SIMD_BEGIN_* / KVB_SIMD_END pair, after
// "simd_vec_cpu.inc", which defines the vector type `vf` of W floats and its helpers (loads that convert
// fp16 / bf16, fma, exp2, the transposing sum) for that path. The kernel then picks the copy for isa()
// at run time. See kernels/decode/decode_cpu.cpp for the pattern.
//
// isa() is chosen once per process: the widest path this CPU (and OS) supports, or the one the
// environment variable KVB_CPU_ISA=avx512bf16|avx512|avx2|baseline asks for when it is supported (an
// unsupported request falls back to the widest supported path below it). Tests force each supported path
// in turn. Each path needs what the one below it needs, so every path from baseline to the widest
// supported one is supported.
//
// avx512bf16 is the AVX-512 path plus AVX512-BF16 (vdpbf16ps: Intel since Cooper Lake, AMD Zen 4 and
// later): the decode kernel takes bf16 q.k dot products with it; kernels without such code run their
// AVX-512 copy there (is_avx512()).
#pragma once
#include <cstdint>
#include <cstring>

namespace kvb {
namespace kern {
namespace cpu {
namespace simd {

enum class Isa : int {
  baseline = 0,  // portable vectors of 4 floats (SSE2 on x86-64, NEON on arm64, scalar elsewhere)
  avx2 = 1,      // AVX2 + FMA + F16C: 8 floats
  avx512 = 2,    // AVX-512F (+ the above): 16 floats
  avx512bf16 = 3,  // AVX-512F + BW + AVX512-BF16 (+ the above): 16 floats, bf16 pair dot products
};
constexpr int kNumIsas = 4;

// True for the paths with 512-bit vectors (avx512 and above).
inline bool is_avx512(Isa isa) { return int(isa) >= int(Isa::avx512); }

const char* isa_name(Isa isa);
// True when this build has the path and this CPU and OS can run it.
bool isa_supported(Isa isa);
// The path the kernels use now.
Isa isa();
// "avx512bf16", "avx512", "avx2", "baseline" -> Isa; false for anything else.
bool parse_isa(const char* name, Isa* out);
// For tests: use `isa` (which must be supported) from now on; returns false (and changes nothing) if not.
bool force_isa(Isa isa);

}  // namespace simd
}  // namespace cpu
}  // namespace kern
}  // namespace kvb

// Wide-vector paths exist on x86-64 with GCC or Clang; elsewhere only the baseline is built.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(KVB_SIMD_BASELINE_ONLY)
#define KVB_SIMD_X86 1
#else
#define KVB_SIMD_X86 0
#endif

// Target regions for the per-path copies (GCC pragma; Clang accepts it too).
#if KVB_SIMD_X86
#include <immintrin.h>
#define KVB_SIMD_PRAGMA(x) _Pragma(#x)
#define KVB_SIMD_BEGIN_AVX512 KVB_SIMD_PRAGMA(GCC push_options) KVB_SIMD_PRAGMA(GCC target("avx512f,avx2,fma,f16c"))
#define KVB_SIMD_BEGIN_AVX512BF16 \
  KVB_SIMD_PRAGMA(GCC push_options) KVB_SIMD_PRAGMA(GCC target("avx512f,avx512bw,avx512bf16,avx2,fma,f16c"))
#define KVB_SIMD_BEGIN_AVX2 KVB_SIMD_PRAGMA(GCC push_options) KVB_SIMD_PRAGMA(GCC target("avx2,fma,f16c"))
#define KVB_SIMD_END KVB_SIMD_PRAGMA(GCC pop_options)
#endif
