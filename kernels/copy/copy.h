// Block copy (kvb_copy_blocks, copy-on-write within a cache) and swap (kvb_swap_blocks, between a device
// and a host cache): the validated form and the two back ends (kernels/copy/copy_capi.cpp is the C boundary).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "../../abi/kvblock.h"
#include "../common/types.h"

namespace kvb {
namespace kern {

// Copy (same cache) or swap (src != dst) of block pairs over several layers; all layers share shape.
struct BlockCopy {
  const Cache* src = nullptr;  // [num_layers]
  const Cache* dst = nullptr;  // [num_layers]
  int64_t num_layers = 0;
  const int32_t* pairs = nullptr;  // host memory, pairs[2i] = src block, pairs[2i+1] = dst block
  int64_t num_pairs = 0;
  uint32_t flags = 0;  // kvb_swap_flags
};

// Most layers one copy call takes.
constexpr size_t kMaxCopyLayers = size_t(1) << 16;

// The caller's array of per-layer descriptors (walked by layers[0].struct_size) checked into Caches of one
// shape, dtype, device, num_blocks and strides; `name` names it in messages (capi_copy.cpp).
std::vector<Cache> read_layers(const kvb_cache_desc* layers, size_t num_layers, const char* name);

namespace cpu {
void copy_blocks(const BlockCopy& b);
}
namespace cuda {
void copy_blocks(const BlockCopy& b, void* stream);  // copy or swap; any mix of device / host caches
}

}  // namespace kern
}  // namespace kvb
