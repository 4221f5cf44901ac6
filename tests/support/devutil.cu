// CUDA runtime helpers for the kernel tests (see devutil.h): a test support object the Makefile links
// into the C++ tests, not part of libkvblock.
#include <cuda_runtime.h>

#include "../../kernels/common/cuda.cuh"
#include "devutil.h"

namespace kvb {
namespace kern {
namespace devutil {

using cuda::check;

void* device_malloc(size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), "cudaMalloc");
  return p;
}
void device_free(void* p) { check(cudaFree(p), "cudaFree"); }
void* pinned_malloc(size_t bytes) {
  void* p = nullptr;
  check(cudaHostAlloc(&p, bytes, cudaHostAllocPortable | cudaHostAllocMapped), "cudaHostAlloc");
  return p;
}
void pinned_free(void* p) { check(cudaFreeHost(p), "cudaFreeHost"); }
void copy(void* dst, const void* src, size_t bytes) { check(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "cudaMemcpy"); }
void copy_async(void* dst, const void* src, size_t bytes, void* stream) {
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream)), "cudaMemcpyAsync");
}
void memset_device(void* p, int value, size_t bytes) { check(cudaMemset(p, value, bytes), "cudaMemset"); }
void synchronize() { check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }
void* stream_create() {
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  return s;
}
void stream_destroy(void* s) { check(cudaStreamDestroy(static_cast<cudaStream_t>(s)), "cudaStreamDestroy"); }
void stream_sync(void* s) { check(cudaStreamSynchronize(static_cast<cudaStream_t>(s)), "cudaStreamSynchronize"); }
void* event_create() {
  cudaEvent_t e;
  check(cudaEventCreate(&e), "cudaEventCreate");
  return e;
}
void event_destroy(void* e) { check(cudaEventDestroy(static_cast<cudaEvent_t>(e)), "cudaEventDestroy"); }
void event_record(void* e, void* stream) {
  check(cudaEventRecord(static_cast<cudaEvent_t>(e), static_cast<cudaStream_t>(stream)), "cudaEventRecord");
}
float event_elapsed_ms(void* start, void* stop) {
  check(cudaEventSynchronize(static_cast<cudaEvent_t>(stop)), "cudaEventSynchronize");
  float ms = 0.f;
  check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(stop)),
        "cudaEventElapsedTime");
  return ms;
}
void capture_begin(void* stream) {
  check(cudaStreamBeginCapture(static_cast<cudaStream_t>(stream), cudaStreamCaptureModeThreadLocal),
        "cudaStreamBeginCapture");
}
void* capture_end(void* stream) {
  cudaGraph_t g;
  check(cudaStreamEndCapture(static_cast<cudaStream_t>(stream), &g), "cudaStreamEndCapture");
  cudaGraphExec_t exec;
  const cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
  cudaGraphDestroy(g);
  check(e, "cudaGraphInstantiate");
  return exec;
}
void graph_launch(void* exec, void* stream) {
  check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), static_cast<cudaStream_t>(stream)), "cudaGraphLaunch");
}
void graph_destroy(void* exec) { check(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec)), "cudaGraphExecDestroy"); }
const char* device_name(int index) {
  static thread_local cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
  return prop.name;
}

}  // namespace devutil
}  // namespace kern
}  // namespace kvb
