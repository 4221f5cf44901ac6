// Shared-memory checks of the CUDA tile-layout tests (run on the CPU): bank conflicts of one warp's
// accesses, and that a copy or conversion covers each element exactly once.
#pragma once
#include <cstddef>
#include <cstdint>
#include <set>
#include <vector>

namespace smem {

// Lanes of one access phase (8 for 16-byte accesses, 16 for 8-byte ones) must touch distinct 4-byte
// bank groups; addr are the lanes' byte addresses within the tile (1 KiB-aligned region starts).
inline bool conflict_free(const std::vector<uint32_t>& addr, int bytes) {
  const int lanes = 128 / bytes;
  for (size_t p = 0; p < addr.size(); p += size_t(lanes)) {
    std::set<uint32_t> banks;
    for (size_t l = p; l < p + size_t(lanes) && l < addr.size(); ++l)
      for (int b = 0; b < bytes / 4; ++b) banks.insert((addr[l] / 4 + uint32_t(b)) % 32);
    if (banks.size() != size_t(lanes * bytes / 4)) return false;
  }
  return true;
}

// How many entries of hits (per-element write counts) are not exactly 1.
inline int not_once(const std::vector<int>& hits) {
  int wrong = 0;
  for (int h : hits) wrong += h != 1;
  return wrong;
}

}  // namespace smem
