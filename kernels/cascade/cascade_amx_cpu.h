// The shared-prefix loop on AMX tiles (cascade_amx_cpu.cpp): the same contract as cascade_tile_cpu.inc's
// attend_keys, for rows x keys products large enough to fill 16-row tiles.
#pragma once
#include <cstdint>

#include "cascade_rows_cpu.h"

namespace kvb {
namespace kern {
namespace cpu {
namespace casc {

// The AMX loop for head_dim D and cache dtype dt, or nullptr where there is none: D not 64, 128 or
// 256, fp32 caches (two bf16 halves do not keep fp32's accuracy: the AVX-512 loop runs), or a build
// without AMX. Call only while amx::active().
AttendFn amx_attend(int64_t D, Dtype dt);

}  // namespace casc
}  // namespace cpu
}  // namespace kern
}  // namespace kvb
