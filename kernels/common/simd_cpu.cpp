// CPU vector path selection (simd_cpu.h): cpuid through __builtin_cpu_supports (which also checks that the
// OS saves the AVX / AVX-512 register state), once per process, with the KVB_CPU_ISA override.
#include "simd_cpu.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace kvb {
namespace kern {
namespace cpu {
namespace simd {

namespace {

bool cpu_has(Isa isa) {
  switch (isa) {
    case Isa::baseline: return true;
#if KVB_SIMD_X86
    case Isa::avx2:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case Isa::avx512:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx512f") && cpu_has(Isa::avx2);
    case Isa::avx512bf16:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") && cpu_has(Isa::avx512);
#endif
    default: return false;
  }
}

Isa initial() {
  Isa best = Isa::baseline;
  for (int i = kNumIsas - 1; i > 0; --i)
    if (cpu_has(Isa(i))) {
      best = Isa(i);
      break;
    }
  Isa want;
  const char* env = std::getenv("KVB_CPU_ISA");
  if (!env || !parse_isa(env, &want) || int(want) >= int(best)) return best;
  return want;  // a narrower path than the best: always supported (each path needs less than the next)
}

std::atomic<int>& current() {
  static std::atomic<int> isa{int(initial())};
  return isa;
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::baseline: return "baseline";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
    case Isa::avx512bf16: return "avx512bf16";
  }
  return "?";
}

bool isa_supported(Isa isa) { return int(isa) >= 0 && int(isa) < kNumIsas && cpu_has(isa); }

Isa isa() { return Isa(current().load(std::memory_order_relaxed)); }

bool parse_isa(const char* name, Isa* out) {
  for (int i = 0; i < kNumIsas; ++i)
    if (std::strcmp(name, isa_name(Isa(i))) == 0) {
      *out = Isa(i);
      return true;
    }
  return false;
}

bool force_isa(Isa isa) {
  if (!isa_supported(isa)) return false;
  current().store(int(isa), std::memory_order_relaxed);
  return true;
}

}  // namespace simd
}  // namespace cpu
}  // namespace kern
}  // namespace kvb
