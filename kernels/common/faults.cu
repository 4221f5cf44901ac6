// The device-side record of CUDA input faults (see kvb_cuda_take_fault in the header): one per device
// (a __device__ variable exists once per device context), zero at module load, written by the kernels
// through a pointer they receive as a parameter, and read and cleared here by a one-thread kernel on the
// caller's stream. No allocation: the record costs nothing until a kernel finds bad input.
#include <atomic>

#include "cache.h"
#include "cuda.cuh"

namespace kvb {
namespace kern {
namespace cuda {

namespace {

__device__ FaultRecord g_fault;  // written by the kernels
__device__ FaultRecord g_taken;  // the last take's snapshot, copied to the host

// Moves the record into g_taken and clears it. A claimant still writing (claimed but kind not yet
// published: a kernel running on another stream) keeps its claim; its details come with a later take.
__global__ void take_fault_kernel() {
  FaultRecord* r = &g_fault;
  const unsigned kind = atomicAdd(&r->kind, 0u);
  g_taken.count = atomicExch(&r->count, 0ull);
  g_taken.kind = kind;
  if (kind == 0u) return;
  __threadfence();
  g_taken.kernel = r->kernel;
  g_taken.index = r->index;
  g_taken.column = r->column;
  g_taken.value = r->value;
  atomicExch(&r->kind, 0u);
  __threadfence();
  atomicExch(&r->claimed, 0u);
}

constexpr int kCachedDevices = 64;
std::atomic<FaultRecord*> g_addresses[kCachedDevices];

}  // namespace

FaultRecord* fault_record(int device) {
  if (device >= 0 && device < kCachedDevices) {
    FaultRecord* p = g_addresses[device].load(std::memory_order_relaxed);
    if (p) return p;
  }
  void* p = nullptr;
  {
    RelaxedCapture relaxed;  // may load the module lazily; legal while the caller captures a graph
    check(cudaGetSymbolAddress(&p, g_fault), "cudaGetSymbolAddress(fault record)");
  }
  if (device >= 0 && device < kCachedDevices)
    g_addresses[device].store(static_cast<FaultRecord*>(p), std::memory_order_relaxed);
  return static_cast<FaultRecord*>(p);
}

Fault take_fault(int index, void* stream) {
  DeviceGuard guard(index);
  const cudaStream_t s = as_stream(stream);
  launch(take_fault_kernel, dim3(1), dim3(1), 0, s, "fault record take launch");
  FaultRecord r;
  check(cudaMemcpyFromSymbolAsync(&r, g_taken, sizeof r, 0, cudaMemcpyDeviceToHost, s), "fault record copy");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  Fault f;
  f.count = r.count;
  f.kind = r.kind;
  if (r.kind != 0u) {
    f.kernel = r.kernel;
    f.index = r.index;
    f.column = r.column;
    f.value = r.value;
  }
  return f;
}

}  // namespace cuda
}  // namespace kern
}  // namespace kvb
