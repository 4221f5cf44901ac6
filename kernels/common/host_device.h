// KVB_HD marks a function that both the CPU code (and its tests) and the CUDA kernels call: host and
// device, forced inline on the device. Headers shared with CPU-only code include this alone.
#pragma once

#if defined(__CUDACC__)
#define KVB_HD __host__ __device__ __forceinline__
#else
#define KVB_HD inline
#endif
