// The tensor-core decode kernel's fp8 layout (kernels/decode/decode_tiles.h, smem_bytes_fp8 and fp8_*), checked
// on the CPU for every head dim and pipeline depth it instantiates: the regions (Q, K / V stages of fp8
// bytes, the 16-bit K / V tiles) are disjoint, fit the device limits where the 16-bit kernel's do, hold
// the warps' final merge, and start where ldmatrix stays conflict-free; the stage copy fills each stage
// exactly once without bank conflicts; each warp's conversion covers exactly its own 16 key rows (the
// only rows its K and V fragments read, so a warp-level sync suffices), reads each element's code and
// writes where the 16-bit kernel's cp.async puts that element, without bank conflicts.
#include <vector>

#include "../../kernels/decode/decode_tiles.h"
#include "harness.h"
#include "smem_banks.h"

namespace {

using namespace kvb::kern;
using namespace kvb::kern::dtiles;
using smem::conflict_free;

constexpr int kThreads = 32 * kWarps;
struct Shape {
  int D, ST;
};
const Shape kShapes[] = {{64, 4}, {128, 3}, {256, 3}, {256, 2}};  // decode_mma.cu's instantiations

void test_regions_fit() {
  for (const Shape& s : kShapes) {
    const int D = s.D, ST = s.ST;
    CHECK(fp8_k_stages(D) == kRows * D * 2);
    CHECK(fp8_v_stages(D, ST) == fp8_k_stages(D) + ST * kStageKeys * D);
    CHECK(fp8_k_tile(D, ST) == fp8_v_stages(D, ST) + ST * kStageKeys * D);
    CHECK(fp8_v_tile(D, ST) == fp8_k_tile(D, ST) + kStageKeys * D * 2);
    CHECK(fp8_v_tile(D, ST) + kStageKeys * D * 2 == smem_bytes_fp8(D, ST));
    CHECK(fp8_k_tile(D, ST) % 128 == 0 && fp8_v_tile(D, ST) % 128 == 0);  // swizzled rows start a bank line
    CHECK(smem_bytes_fp8(D, ST) <= smem_bytes(D, ST));  // wherever the 16-bit depth fits, this does
    CHECK(kRows * D * 2 + kWarps * kRows * D * 4 <= smem_bytes_fp8(D, ST));  // the final merge after Q
  }
  for (int limit : {232448, 166912, 101376})  // H100, A100, sm_86 / 89 opt-in bytes per block
    for (int D : {64, 128, 256})
      if (smem_bytes(D, stages(D, limit)) + kStaticSmem <= limit)
        CHECK(smem_bytes_fp8(D, stages(D, limit)) + kStaticSmem <= limit);
}

void test_stage_copy_once() {
  for (const Shape& s : kShapes) {
    const int D = s.D, items = kStageKeys * D / 16;
    CHECK(items % kThreads == 0);
    std::vector<int> hits(size_t(items), 0);
    bool ok = true;
    for (int j = 0; j < items / kThreads; ++j) {
      std::vector<uint32_t> warp;
      for (int tid = 0; tid < kThreads; ++tid) {
        const int x = tid + j * kThreads, r = fp8_copy_row(x, D), c = fp8_copy_chunk(x, D);
        CHECK(r < kStageKeys && c * 16 < D);
        const int dst = fp8_copy_dst(D, r, c);
        CHECK(dst == r * D + c * 16);  // bytes c*16.. of key r's row
        ++hits[size_t(dst / 16)];
        warp.push_back(uint32_t(dst));
        if (warp.size() == 32) ok &= conflict_free(warp, 16), warp.clear();
      }
    }
    CHECK(smem::not_once(hits) == 0);
    CHECK(ok);
  }
}

void test_warp_converts_its_own_rows() {
  for (const Shape& s : kShapes) {
    const int D = s.D, C = D / 8, per_lane = kWarpKeys * C / 32;
    CHECK(kWarpKeys * C % 32 == 0);
    std::vector<int> hits(size_t(kStageKeys * C), 0);
    bool loads_ok = true, stores_ok = true;
    for (int w = 0; w < kWarps; ++w) {
      for (int lane = 0; lane < 32; ++lane)  // the rows the warp's fragments read
        for (int kk = 0; kk < D / 16; ++kk) {
          CHECK(k_row(w, lane) / kWarpKeys == w && k_chunk(kk, lane) < C);
          CHECK(v_row(w, lane) / kWarpKeys == w);
        }
      for (int j = 0; j < per_lane; ++j) {
        std::vector<uint32_t> ld, st;
        for (int lane = 0; lane < 32; ++lane) {
          const int x = lane + 32 * j, row = fp8_cvt_row(w, x, D), chunk = fp8_cvt_chunk(x, D);
          CHECK(row / kWarpKeys == w && chunk < C);
          CHECK(fp8_cvt_src(D, row, chunk) == row * D + chunk * 8);  // codes of elements 8 chunk.. of the row
          ++hits[swz(C, row, chunk) / 16];  // where the 16-bit kernel's cp.async puts them
          ld.push_back(uint32_t(fp8_cvt_src(D, row, chunk)));
          st.push_back(uint32_t(swz(C, row, chunk)));
        }
        loads_ok &= conflict_free(ld, 8), stores_ok &= conflict_free(st, 16);
      }
    }
    CHECK(smem::not_once(hits) == 0);
    CHECK(loads_ok);
    CHECK(stores_ok);
  }
}

}  // namespace

int main() {
  RUN_TEST(test_regions_fit);
  RUN_TEST(test_stage_copy_once);
  RUN_TEST(test_warp_converts_its_own_rows);
  TEST_SUMMARY();
}
