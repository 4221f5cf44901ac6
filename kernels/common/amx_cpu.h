// Whether the CPU kernels may use AMX tiles (TDPBF16PS) for their rows x keys products (cascade_amx_cpu.cpp:
// shared prefixes and prefill).
//
// AMX is a step above the AVX-512 vector path (simd_cpu.h), used only while that path is the current one:
// the CPU must report AMX-TILE, AMX-BF16 and AVX512-BF16 (cpuid leaf 7), the OS must enable the tile
// state in XCR0, and Linux must grant this process the tile data (arch_prctl ARCH_REQ_XCOMP_PERM, asked
// once). valgrind hides AMX, so under it (and on other CPUs and systems) the AVX-512 / AVX2 / baseline
// loops run. KVB_CPU_ISA: unset, `amx` or an unknown value keep AMX where available; `avx512bf16`,
// `avx512`, `avx2` or `baseline` turn it off (the named vector path without tiles).
#pragma once

#include "simd_cpu.h"

// The AMX code is built on x86-64 Linux (the tile permission is a Linux call) with GCC 11+ or Clang.
#if KVB_SIMD_X86 && defined(__linux__) && (defined(__clang__) || __GNUC__ >= 11)
#define KVB_AMX_BUILD 1
#else
#define KVB_AMX_BUILD 0
#endif

namespace kvb {
namespace kern {
namespace cpu {
namespace amx {

// True when this build has the AMX code and this CPU and OS let the process use it.
bool supported();
// Why not (a sentence), or "" when supported().
const char* why_not();
// True when the kernels use AMX now: supported(), not turned off, and simd::isa() is an AVX-512 path.
bool active();
// For tests: turn AMX on (false, changing nothing, when unsupported) or off.
bool force(bool on);

}  // namespace amx
}  // namespace cpu
}  // namespace kern
}  // namespace kvb
