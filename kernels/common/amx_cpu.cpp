// AMX availability (amx_cpu.h): cpuid, XCR0 and the Linux permission for the tile data, once per process.
#include "amx_cpu.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "simd_cpu.h"

#if KVB_AMX_BUILD
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace kvb {
namespace kern {
namespace cpu {
namespace amx {

namespace {

#if KVB_AMX_BUILD
constexpr int kArchReqXcompPerm = 0x1023;  // <asm/prctl.h>
constexpr int kXfeatureXtiledata = 18;

uint64_t xcr0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

// nullptr when AMX-BF16 can run here, else the reason.
const char* probe() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return "cpuid leaf 7 is not available";
  if (!(d & (1u << 24)) || !(d & (1u << 22))) return "this CPU has no AMX-TILE / AMX-BF16 (cpuid leaf 7)";
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d) || !(a & (1u << 5)))
    return "this CPU has no AVX512-BF16 (cpuid leaf 7 subleaf 1)";
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return "the OS does not enable XSAVE (no OSXSAVE)";
  if ((xcr0() & (3u << 17)) != (3u << 17)) return "the OS does not enable the AMX tile state (XCR0 bits 17-18)";
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0)
    return "Linux refused the AMX tile data to this process (arch_prctl ARCH_REQ_XCOMP_PERM)";
  if (!simd::isa_supported(simd::Isa::avx512)) return "the AVX-512 path is not supported here";
  return nullptr;
}
#endif

struct State {
  const char* why;  // nullptr: supported
  std::atomic<bool> on;
  State() {
#if KVB_AMX_BUILD
    why = probe();
#else
    why = "this build has no AMX code (x86-64 Linux with GCC or Clang only)";
#endif
    const char* env = std::getenv("KVB_CPU_ISA");
    simd::Isa named;
    const bool off = env && std::strcmp(env, "amx") != 0 && simd::parse_isa(env, &named);
    on.store(why == nullptr && !off);
  }
};

State& state() {
  static State s;
  return s;
}

}  // namespace

bool supported() { return state().why == nullptr; }

const char* why_not() { return state().why ? state().why : ""; }

bool active() { return state().on.load(std::memory_order_relaxed) && simd::is_avx512(simd::isa()); }

bool force(bool on) {
  if (on && !supported()) return false;
  state().on.store(on, std::memory_order_relaxed);
  return true;
}

}  // namespace amx
}  // namespace cpu
}  // namespace kern
}  // namespace kvb
