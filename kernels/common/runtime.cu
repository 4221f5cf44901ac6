// CUDA back end: device discovery, pointer checks, allocation. Every CUDA error becomes
// Code::device with the CUDA error string; a machine without a driver just reports 0 devices.
#include <cuda_runtime.h>

#include "cache.h"
#include "cuda.cuh"

namespace kvb {
namespace kern {
namespace cuda {

bool built() { return true; }

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

void check_device(int index) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    fail(Code::device, "no usable CUDA device or driver was found (the CUDA runtime reports: %s, %s)",
         cudaGetErrorString(e), cudaGetErrorName(e));
  }
  if (n == 0) fail(Code::device, "no usable CUDA device was found (the driver reports 0 devices)");
  if (index >= n) fail(Code::invalid_argument, "device_index %d, but only %d CUDA device(s)", index, n);
}

cudaPointerAttributes pointer_attributes(const void* p, const char* what) {
  cudaPointerAttributes attr;
  RelaxedCapture relaxed;  // legal while the caller captures a graph
  check(cudaPointerGetAttributes(&attr, p), what);
  return attr;
}

void check_pointer(const void* p, int index, const char* what) {
  const cudaPointerAttributes attr = pointer_attributes(p, what);
  switch (attr.type) {
    case cudaMemoryTypeDevice:
      if (attr.device != index)
        fail(Code::invalid_argument, "%s is on CUDA device %d, the cache on device %d", what, attr.device, index);
      return;
    case cudaMemoryTypeManaged:
      return;
    case cudaMemoryTypeHost:
      // The kernels dereference p itself: the memory must be mapped at the same address on the device
      // (true for cudaHostAlloc under UVA; not for memory registered without cudaHostRegisterMapped, or
      // where the device cannot use host pointers for registered memory).
      if (attr.devicePointer != p)
        fail(Code::invalid_argument, "%s is page-locked host memory that CUDA device %d cannot read at the same "
             "address (allocate it with cudaHostAlloc or register it with cudaHostRegisterMapped)", what, index);
      return;
    default:
      fail(Code::invalid_argument, "%s is pageable host memory, not accessible from CUDA device %d", what, index);
  }
}

void* alloc_device(int index, size_t bytes) {
  DeviceGuard g(index);
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), "cudaMalloc");
  return p;
}

void free_device(int index, void* p) {
  if (!p) return;
  DeviceGuard g(index);
  check(cudaFree(p), "cudaFree");
}

void* alloc_pinned(size_t bytes) {
  void* p = nullptr;
  check(cudaHostAlloc(&p, bytes, cudaHostAllocPortable | cudaHostAllocMapped), "cudaHostAlloc");
  return p;
}

void free_pinned(void* p) {
  if (!p) return;
  check(cudaFreeHost(p), "cudaFreeHost");
}

}  // namespace cuda
}  // namespace kern
}  // namespace kvb
