// The cache descriptor and the devices behind it: kvb_cache_desc checked into a Cache (validate.cpp),
// the back-end checks a call makes before it dispatches, cache memory (kvb_cache_alloc / kvb_cache_free)
// and the CUDA device query and fault record (kernels/common/cache_capi.cpp is the C boundary). The CUDA
// functions exist in every build: without nvcc they fail with Code::unsupported (no_cuda.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

#include "../../abi/kvblock.h"
#include "types.h"

namespace kvb {
namespace kern {

// Checks one cache descriptor (`what` names it in messages, e.g. "cache" or "layers[3]").
Cache read_cache(const kvb_cache_desc* desc, const char* what);
// Checks that a CUDA cache can be used here (built with CUDA, device present), else unsupported/device.
void require_backend(const Cache& c, const char* what);
// Checks that a and b have the same dtype, block_size, num_kv_heads and head_dim.
void require_same_shape(const Cache& a, const Cache& b, const char* what_a, const char* what_b);

// The first bad input a CUDA kernel met on one device since the last take (kvb_kernel_fault's fields).
struct Fault {
  uint32_t kind = 0;    // kvb_fault_kind
  uint32_t kernel = 0;  // kvb_kernel_id
  int64_t index = -1, column = -1, value = 0;
  uint64_t count = 0;   // faulty work items; 0 with kind 0 = no fault
};

namespace cpu {
void* alloc_host(size_t bytes);
void free_host(void* p);
}  // namespace cpu

namespace cuda {
bool built();                 // compiled with CUDA
int device_count();           // 0 when no driver / device; never throws
void check_device(int index);  // throws device/unsupported if the ordinal is unusable
// Throws invalid_argument if p is not accessible from device `index` (e.g. pageable host memory).
void check_pointer(const void* p, int index, const char* what);
// Waits for stream, then reads and clears device `index`'s fault record (kernels/common/faults.cu).
Fault take_fault(int index, void* stream);
void* alloc_device(int index, size_t bytes);
void free_device(int index, void* p);
void* alloc_pinned(size_t bytes);  // page-locked, mapped, portable
void free_pinned(void* p);
}  // namespace cuda

}  // namespace kern
}  // namespace kvb
