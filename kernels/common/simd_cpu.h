// Run-time choice of the CPU vector code path, shared by the CPU kernels.
//
// A kernel that wants wide vectors is compiled once per Isa: its body (an .inc file, or templates) is
// included inside a namespace under the matching KVB_SIMD_BEGIN_* / KVB_SIMD_END pair, after
// "simd_vec_cpu.inc", which defines the vector type `vf` of W floats and its helpers (loads that convert
// fp16 / bf16, fma, exp2, the transposing sum) for that path. The kernel then picks the copy for isa()
// at run time. See kernels/decode/decode_cpu.cpp for the pattern.
//
// isa() is chosen once per process: the widest path this CPU (and OS) supports, or the one the
// environment variable KVB_CPU_ISA=avx512|avx2|baseline asks for when it is supported (an unsupported
// request falls back to the widest supported path below it). Tests force each supported path in turn.
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
};
constexpr int kNumIsas = 3;

const char* isa_name(Isa isa);
// True when this build has the path and this CPU and OS can run it.
bool isa_supported(Isa isa);
// The path the kernels use now.
Isa isa();
// "avx512", "avx2", "baseline" -> Isa; false for anything else.
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
#define KVB_SIMD_BEGIN_AVX2 KVB_SIMD_PRAGMA(GCC push_options) KVB_SIMD_PRAGMA(GCC target("avx2,fma,f16c"))
#define KVB_SIMD_END KVB_SIMD_PRAGMA(GCC pop_options)
#endif
