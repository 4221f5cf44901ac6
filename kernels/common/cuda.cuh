// Shared by the CUDA back end: CUDA errors -> kvb::Error(device), a device guard, 16-byte vector
// conversions for fp16 / bf16 / fp32.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "../../libkvblock/error.h"
#include "paged.h"
#include "types.h"

namespace kvb {
namespace kern {
namespace cuda {

// Throws Code::device with the CUDA error string; clears the (non-sticky) error state first.
inline void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  fail(Code::device, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

// Launches kernel<<<grid, block, smem, stream>>>(args...) and checks the launch through the call's own
// return value. A <<<>>> launch followed by cudaGetLastError() would report (and clear) an error that the
// caller's earlier, unrelated CUDA call left pending; a successful launch here leaves that state alone.
template <typename... Params, typename... Args>
inline void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   const char* what, Args&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "launch: argument count");
  void* ptrs[sizeof...(Args) + 1] = {static_cast<void*>(&args)...};
  check(cudaLaunchKernel(reinterpret_cast<const void*>(kernel), grid, block, ptrs, smem, stream), what);
}

// Device-side record of the first bad input a kernel met (kvb_cuda_take_fault; faults.cu owns it).
struct FaultRecord {
  unsigned int claimed;  // 0 = free; the first faulting thread sets 1, fills the details, then kind
  unsigned int kind;     // kvb_fault_kind, published last
  unsigned int kernel;   // kvb_kernel_id
  unsigned int reserved;
  long long index, column, value;
  unsigned long long count;  // faulty work items
};

// Counts a fault and, if it is the first since the last take, records its details.
__device__ __forceinline__ void record_fault(FaultRecord* r, unsigned kind, unsigned kernel, long long index,
                                             long long column, long long value) {
  atomicAdd(&r->count, 1ull);
  if (atomicCAS(&r->claimed, 0u, 1u) != 0u) return;
  r->kernel = kernel;
  r->index = index;
  r->column = column;
  r->value = value;
  __threadfence();
  atomicExch(&r->kind, kind);
}

// Device address of the calling thread's current device's record (`device` is its ordinal, for the
// cache of addresses).
FaultRecord* fault_record(int device);

// Makes `device` current for the scope and restores the caller's device afterwards.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    int cur = 0;
    check(cudaGetDevice(&cur), "cudaGetDevice");
    if (cur != device) {
      check(cudaSetDevice(device), "cudaSetDevice");
      prev_ = cur;
    }
  }
  ~DeviceGuard() {
    if (prev_ >= 0) cudaSetDevice(prev_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
};

inline cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

// Puts the calling thread in relaxed stream-capture mode for the scope, so that host-side queries made
// while the caller captures a CUDA graph (cudaPointerGetAttributes may initialise a context and is not
// on the documented list of capture-safe calls) can neither fail nor invalidate the caller's capture.
// Touches no stream; restores the caller's mode afterwards.
class RelaxedCapture {
 public:
  RelaxedCapture() {
    if (cudaThreadExchangeStreamCaptureMode(&mode_) != cudaSuccess) {
      cudaGetLastError();
      active_ = false;
    }
  }
  ~RelaxedCapture() {
    if (active_) cudaThreadExchangeStreamCaptureMode(&mode_);
  }
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
  bool active_ = true;
};

// True when this process may launch kernels with more than 4 KB of parameters: that needs CUDA 12.1+ at
// build time and a 12.1+ driver at run time (else the launch fails).
inline bool large_kernel_params_ok() {
#if CUDART_VERSION >= 12010
  static const bool ok = [] {
    int v = 0;
    if (cudaDriverGetVersion(&v) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return v >= 12010;
  }();
  return ok;
#else
  return false;
#endif
}

// What the runtime knows of pointer p (runtime.cu; errors name `what`), asked in relaxed capture mode.
cudaPointerAttributes pointer_attributes(const void* p, const char* what);

// Largest power-of-two width (16, 8, 4, 2 or 1 bytes) dividing every value.
inline int common_width(std::initializer_list<uint64_t> values) {
  uint64_t acc = 16;
  for (uint64_t v : values) acc |= v;
  int w = 1;
  while (w < 16 && (acc & uint64_t(w)) == 0) w <<= 1;
  return w;
}

// The cache's K / V addresses and byte strides OR'ed together: % 16 == 0 when the kernels' 16-byte
// loads (and cp.async) of K / V rows are all aligned.
inline uint64_t kv_align_bits(const Cache& c) {
  const int64_t es = int64_t(c.elem());
  return uint64_t(uintptr_t(c.k)) | uint64_t(uintptr_t(c.v)) | c.in_bytes(es).stride_bits();
}

// 16 bytes of T -> floats (8 for 16-bit types, 4 for fp32).
template <typename T>
struct Vec;

// fp16 and bf16: eight 16-bit values, converted in pairs (T2: __half2, __nv_bfloat162).
template <typename T, typename T2>
struct Vec16 {
  static constexpr int N = 8;
  static constexpr bool kHalf = std::is_same<T, __half>::value;
  static __device__ __forceinline__ float2 pair_to_float(const T2& x) {
    if constexpr (kHalf) return __half22float2(x); else return __bfloat1622float2(x);
  }
  static __device__ __forceinline__ void to_float(const uint4& u, float* f) {
    const T2* h = reinterpret_cast<const T2*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 x = pair_to_float(h[i]);
      f[2 * i] = x.x;
      f[2 * i + 1] = x.y;
    }
  }
  static __device__ __forceinline__ float load(const T* p) {
    if constexpr (kHalf) return __half2float(*p); else return __bfloat162float(*p);
  }
  static __device__ __forceinline__ T from_float(float x) {
    if constexpr (kHalf) return __float2half_rn(x); else return __float2bfloat16_rn(x);
  }
};

template <>
struct Vec<__half> : Vec16<__half, __half2> {};
template <>
struct Vec<__nv_bfloat16> : Vec16<__nv_bfloat16, __nv_bfloat162> {};

template <>
struct Vec<float> {
  static constexpr int N = 4;
  static __device__ __forceinline__ void to_float(const uint4& u, float* f) {
    f[0] = __uint_as_float(u.x);
    f[1] = __uint_as_float(u.y);
    f[2] = __uint_as_float(u.z);
    f[3] = __uint_as_float(u.w);
  }
  static __device__ __forceinline__ float load(const float* p) { return *p; }
  static __device__ __forceinline__ float from_float(float x) { return x; }
};

}  // namespace cuda
}  // namespace kern
}  // namespace kvb
