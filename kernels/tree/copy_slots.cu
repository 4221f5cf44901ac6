// CUDA slot copy: one thread block per (group, layer, K|V). A block walks the token row (every kv head)
// in passes of up to kHeld * 256 chunks: each thread loads its chunks of the group's sources into
// registers, the block synchronises, then the threads store them to the destinations, so every pair
// reads its source as it was before the call (copy_slots.h). The pairs, groups and layer pointers travel
// in the kernel parameters (no device buffer, CUDA-graph capturable), in as few launches as fit.
#include <algorithm>
#include <vector>

#include "../common/cache.h"
#include "../common/cuda.cuh"
#include "../common/paged.h"
#include "copy_slots.h"

namespace kvb {
namespace kern {
namespace cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kHeld = 4;  // chunks a thread holds per pass

// Above 4 KB of parameters a kernel needs CUDA 12.1+ at build and run time (as in copy_blocks.cu).
template <int kLayers, int kPairs>
struct SlotParams {
  static constexpr int max_layers = kLayers;
  static constexpr int max_pairs = kPairs;
  char* base[kLayers][2];  // [layer][K, V]
  int64_t pairs[kPairs][2];
  int32_t group_start[kPairs + 1];
  PagedKv kv;  // bytes
  int64_t block_mask;
  int block_shift, heads, chunks_per_head;
  int num_groups, num_layers;
};
using SmallSlotParams = SlotParams<8, 96>;
static_assert(sizeof(SmallSlotParams) <= 4096, "SmallSlotParams must fit the classic 4 KB kernel parameter limit");
#if CUDART_VERSION >= 12010
#define KVB_LARGE_SLOT_PARAMS 1
using LargeSlotParams = SlotParams<64, 1024>;
static_assert(sizeof(LargeSlotParams) <= 32764, "LargeSlotParams must fit the 32 KB kernel parameter limit");
#endif

template <typename W, class P>
__device__ __forceinline__ W* chunk(const P& p, char* base, int64_t slot, int col) {
  const int h = col / p.chunks_per_head, c = col - h * p.chunks_per_head;
  return reinterpret_cast<W*>(base + p.kv.slot_row(slot, p.block_shift, p.block_mask) + p.kv.head(h) +
                              int64_t(c) * int64_t(sizeof(W)));
}

template <typename W, class P>
__global__ void __launch_bounds__(kThreads) copy_slots_kernel(const __grid_constant__ P p) {
  const int u = blockIdx.x;
  const int g = u % p.num_groups, rest = u / p.num_groups, layer = rest >> 1, kv = rest & 1;
  char* base = p.base[layer][kv];
  const int i0 = p.group_start[g], n = p.group_start[g + 1] - i0;
  const int cols = p.heads * p.chunks_per_head;
  const int per_pass = max(1, kThreads * kHeld / n);  // columns per pass
  for (int c0 = 0; c0 < cols; c0 += per_pass) {
    const int ncol = min(per_pass, cols - c0), units = n * ncol;
    W held[kHeld];
#pragma unroll
    for (int k = 0; k < kHeld; ++k) {
      const int v = threadIdx.x + k * kThreads;
      if (v < units) held[k] = *chunk<W>(p, base, p.pairs[i0 + v / ncol][0], c0 + v % ncol);
    }
    if (n > 1) __syncthreads();  // every source of the pass read before any destination is written
#pragma unroll
    for (int k = 0; k < kHeld; ++k) {
      const int v = threadIdx.x + k * kThreads;
      if (v < units) *chunk<W>(p, base, p.pairs[i0 + v / ncol][1], c0 + v % ncol) = held[k];
    }  // the next pass reads other columns: no barrier needed
  }
}

template <class P>
void launch_slot_copies(const SlotCopy& s, cudaStream_t stream) {
  const Cache& c0 = s.layers[0];
  const int64_t es = int64_t(c0.elem());
  std::vector<P> holder(1);  // large parameters: on the heap
  P& p = holder[0];
  p.kv = c0.in_bytes(es);
  p.block_mask = c0.block_size - 1;
  p.block_shift = c0.block_shift;
  p.heads = int(c0.num_kv_heads);
  const int64_t row = c0.head_dim * es;
  uint64_t align = 0;
  for (int64_t l = 0; l < s.num_layers; ++l) align |= uint64_t(uintptr_t(s.layers[l].k)) | uint64_t(uintptr_t(s.layers[l].v));
  const int w = common_width({align, p.kv.stride_bits(), uint64_t(row)});
  p.chunks_per_head = int(row / w);
  const int64_t num_groups = int64_t(s.group_start.size()) - 1;
  for (int64_t l0 = 0; l0 < s.num_layers; l0 += P::max_layers) {
    const int nl = int(std::min<int64_t>(P::max_layers, s.num_layers - l0));
    for (int l = 0; l < nl; ++l) {
      p.base[l][0] = static_cast<char*>(s.layers[l0 + l].k);
      p.base[l][1] = static_cast<char*>(s.layers[l0 + l].v);
    }
    // Whole groups per launch (a group holds at most kMaxSlotGroup <= max_pairs pairs).
    for (int64_t g0 = 0; g0 < num_groups;) {
      int64_t g1 = g0;
      while (g1 < num_groups && s.group_start[size_t(g1 + 1)] - s.group_start[size_t(g0)] <= P::max_pairs) ++g1;
      const int32_t first = s.group_start[size_t(g0)];
      for (int64_t g = g0; g <= g1; ++g) p.group_start[g - g0] = s.group_start[size_t(g)] - first;
      const int np = s.group_start[size_t(g1)] - first;
      for (int i = 0; i < np; ++i) {
        p.pairs[i][0] = s.pairs[size_t(2 * (first + i))];
        p.pairs[i][1] = s.pairs[size_t(2 * (first + i) + 1)];
      }
      p.num_groups = int(g1 - g0);
      p.num_layers = nl;
      const dim3 grid(unsigned(p.num_groups * nl * 2));
      const char* what = "copy_slots launch";
      switch (w) {
        case 16: launch(copy_slots_kernel<uint4, P>, grid, dim3(kThreads), 0, stream, what, p); break;
        case 8: launch(copy_slots_kernel<uint2, P>, grid, dim3(kThreads), 0, stream, what, p); break;
        case 4: launch(copy_slots_kernel<uint32_t, P>, grid, dim3(kThreads), 0, stream, what, p); break;
        case 2: launch(copy_slots_kernel<uint16_t, P>, grid, dim3(kThreads), 0, stream, what, p); break;
        default: launch(copy_slots_kernel<uint8_t, P>, grid, dim3(kThreads), 0, stream, what, p); break;
      }
      g0 = g1;
    }
  }
}

}  // namespace

void copy_slots(const SlotCopy& s, void* stream) {
  static_assert(kMaxSlotGroup <= SmallSlotParams::max_pairs, "a group must fit one launch");
  DeviceGuard g(s.layers[0].device_index);
  for (int64_t l = 0; l < s.num_layers; ++l) {
    check_pointer(s.layers[l].k, s.layers[l].device_index, "layers[].k");
    check_pointer(s.layers[l].v, s.layers[l].device_index, "layers[].v");
  }
#ifdef KVB_LARGE_SLOT_PARAMS
  if (large_kernel_params_ok()) return launch_slot_copies<LargeSlotParams>(s, as_stream(stream));
#endif
  launch_slot_copies<SmallSlotParams>(s, as_stream(stream));
}

}  // namespace cuda
}  // namespace kern
}  // namespace kvb
