// The two kernel back ends behind the C API. Both take validated arguments (types.h) and throw
// kvb::Error. The CUDA functions exist in every build: without nvcc they fail with Code::unsupported.
#pragma once
#include <cstddef>
#include <cstdint>

#include "types.h"

namespace kvb {
namespace kern {

// The first bad input a CUDA kernel met on one device since the last take (kvb_kernel_fault's fields).
struct Fault {
  uint32_t kind = 0;    // kvb_fault_kind
  uint32_t kernel = 0;  // kvb_kernel_id
  int64_t index = -1, column = -1, value = 0;
  uint64_t count = 0;   // faulty work items; 0 with kind 0 = no fault
};

namespace cpu {
void write_kv(const Cache& c, const WriteKv& a);
void paged_attention(const Cache& c, const Attention& a);
void copy_blocks(const BlockCopy& b);
void* alloc_host(size_t bytes);
void free_host(void* p);
}  // namespace cpu

namespace cuda {
bool built();                 // compiled with CUDA
int device_count();           // 0 when no driver / device; never throws
void check_device(int index);  // throws device/unsupported if the ordinal is unusable
// Throws invalid_argument if p is not accessible from device `index` (e.g. pageable host memory).
void check_pointer(const void* p, int index, const char* what);
void write_kv(const Cache& c, const WriteKv& a, void* stream);
void paged_attention(const Cache& c, const Attention& a, void* stream);
void copy_blocks(const BlockCopy& b, void* stream);  // copy or swap; any mix of device / host caches
// Waits for stream, then reads and clears device `index`'s fault record (kernels/cuda/faults.cu).
Fault take_fault(int index, void* stream);
void* alloc_device(int index, size_t bytes);
void free_device(int index, void* p);
void* alloc_pinned(size_t bytes);  // page-locked, mapped, portable
void free_pinned(void* p);
}  // namespace cuda

}  // namespace kern
}  // namespace kvb
