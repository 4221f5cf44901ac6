// CUDA write_kv (reshape_and_cache): one CTA per token copies its K and V rows into the cache slot in
// the widest vector (up to 16 bytes) that every pointer and stride allows; an fp8 cache quantizes each
// element instead (fp8.h, the CPU's conversion: the same bytes; software on every arch). A slot of -1 is skipped; any
// other slot outside the cache is never written and is recorded as a fault (kvb_cuda_take_fault).
#include <climits>
#include <vector>

#include <cuda_fp16.h>

#include "../../abi/kvblock.h"
#include "../common/cache.h"
#include "../common/fp8.h"
#include "../common/validate.h"
#include "write_kv.h"
#include "../common/cuda.cuh"

namespace kvb {
namespace kern {
namespace cuda {

namespace {

struct WriteParams {
  const char* key;
  const char* value;
  char* k;
  char* v;
  int64_t key_ts, key_hs, val_ts, val_hs;             // bytes
  PagedKv kv;                                         // bytes
  const int64_t* slots;
  int64_t num_slots;
  int64_t block_mask;
  int block_shift;
  int heads;
  int chunks_per_row;
  FaultRecord* fault;
};

template <typename W>
__global__ void write_kv_kernel(const WriteParams p) {
  const int64_t token = blockIdx.x;
  const int64_t slot = p.slots[token];
  if (slot < 0 || slot >= p.num_slots) {
    if (slot != -1 && threadIdx.x == 0) record_fault(p.fault, KVB_FAULT_SLOT, KVB_KERNEL_WRITE_KV, token, -1, slot);
    return;
  }
  const int64_t base = p.kv.slot_row(slot, p.block_shift, p.block_mask);
  const int total = p.heads * p.chunks_per_row;
  for (int i = threadIdx.x; i < total; i += blockDim.x) {
    const int h = i / p.chunks_per_row, c = i - h * p.chunks_per_row;
    const int64_t dst = base + p.kv.head(h) + int64_t(c) * sizeof(W);
    *reinterpret_cast<W*>(p.k + dst) =
        *reinterpret_cast<const W*>(p.key + token * p.key_ts + h * p.key_hs + int64_t(c) * sizeof(W));
    *reinterpret_cast<W*>(p.v + dst) =
        *reinterpret_cast<const W*>(p.value + token * p.val_ts + h * p.val_hs + int64_t(c) * sizeof(W));
  }
}

// fp8 caches: the scales travel by value (a captured graph keeps them). Per-head arrays, when given,
// hold num_kv_heads <= kMaxHeadScales entries (validate.cpp refuses more).
struct Fp8Scales {
  float k[kMaxHeadScales];
  float v[kMaxHeadScales];
  float k_all, v_all;
  int k_per_head, v_per_head;
};

template <Dtype IN>
__device__ __forceinline__ float load_input(const char* p, int64_t i) {
  if constexpr (IN == Dtype::f16)
    return __half2float(__ushort_as_half(reinterpret_cast<const unsigned short*>(p)[i]));
  else if constexpr (IN == Dtype::bf16)
    return __uint_as_float(uint32_t(reinterpret_cast<const unsigned short*>(p)[i]) << 16);
  else
    return reinterpret_cast<const float*>(p)[i];
}

// One CTA per token; each thread quantizes elements (head, d) with the shared fp8.h conversion, so the
// bytes equal the CPU's. (Strides of the input in elements, of the cache in bytes = elements.)
template <Dtype IN, bool E5M2>
__global__ void write_kv_fp8_kernel(const WriteParams p, const Fp8Scales sc, int head_dim) {
  const int64_t token = blockIdx.x;
  const int64_t slot = p.slots[token];
  if (slot < 0 || slot >= p.num_slots) {
    if (slot != -1 && threadIdx.x == 0) record_fault(p.fault, KVB_FAULT_SLOT, KVB_KERNEL_WRITE_KV, token, -1, slot);
    return;
  }
  const int64_t base = p.kv.slot_row(slot, p.block_shift, p.block_mask);
  const int total = p.heads * head_dim;
  for (int i = threadIdx.x; i < total; i += blockDim.x) {
    const int h = i / head_dim, d = i - h * head_dim;
    const int64_t dst = base + p.kv.head(h) + d;
    const float xk = load_input<IN>(p.key, token * p.key_ts + h * p.key_hs + d);
    const float xv = load_input<IN>(p.value, token * p.val_ts + h * p.val_hs + d);
    p.k[dst] = char(fp8::quantize(xk, sc.k_per_head ? sc.k[h] : sc.k_all, E5M2));
    p.v[dst] = char(fp8::quantize(xv, sc.v_per_head ? sc.v[h] : sc.v_all, E5M2));
  }
}

template <Dtype IN>
void launch_fp8_input(WriteParams& p, Fp8Scales& sc, int head_dim, bool e5m2, int64_t tokens, cudaStream_t s) {
  const int total = p.heads * head_dim;
  const int threads = total >= 256 ? 256 : ((total + 31) / 32) * 32;
  if (e5m2)
    launch(write_kv_fp8_kernel<IN, true>, dim3(unsigned(tokens)), dim3(unsigned(threads)), 0, s, "write_kv launch", p,
           sc, head_dim);
  else
    launch(write_kv_fp8_kernel<IN, false>, dim3(unsigned(tokens)), dim3(unsigned(threads)), 0, s, "write_kv launch", p,
           sc, head_dim);
}

void write_kv_fp8(const Cache& c, const WriteKv& a, WriteParams& p, cudaStream_t s) {
  if (c.num_kv_heads * c.head_dim > INT_MAX)
    fail(Code::invalid_argument, "num_kv_heads * head_dim exceeds %d", INT_MAX);
  // input strides in elements (load_input indexes typed pointers); the cache's are bytes = elements
  p.key_ts = a.key_token_stride;
  p.key_hs = a.key_head_stride;
  p.val_ts = a.value_token_stride;
  p.val_hs = a.value_head_stride;
  std::vector<Fp8Scales> holder(1);  // 1 KiB: built on the heap
  Fp8Scales& sc = holder[0];
  sc.k_all = c.k_scale;
  sc.v_all = c.v_scale;
  sc.k_per_head = c.k_head_scales != nullptr;
  sc.v_per_head = c.v_head_scales != nullptr;
  for (int64_t h = 0; h < kMaxHeadScales; ++h) {
    sc.k[h] = h < c.num_kv_heads && c.k_head_scales ? c.k_head_scales[h] : c.k_scale;
    sc.v[h] = h < c.num_kv_heads && c.v_head_scales ? c.v_head_scales[h] : c.v_scale;
  }
  const bool e5m2 = c.dtype == Dtype::e5m2;
  int D = int(c.head_dim);
  switch (a.input_dtype) {
    case Dtype::f16: launch_fp8_input<Dtype::f16>(p, sc, D, e5m2, a.num_tokens, s); break;
    case Dtype::bf16: launch_fp8_input<Dtype::bf16>(p, sc, D, e5m2, a.num_tokens, s); break;
    default: launch_fp8_input<Dtype::f32>(p, sc, D, e5m2, a.num_tokens, s); break;
  }
}

template <typename W>
void launch_width(WriteParams& p, int64_t tokens, cudaStream_t s) {
  const int total = p.heads * p.chunks_per_row;
  const int threads = total >= 256 ? 256 : ((total + 31) / 32) * 32;
  launch(write_kv_kernel<W>, dim3(unsigned(tokens)), dim3(unsigned(threads)), 0, s, "write_kv launch", p);
}

}  // namespace

void write_kv(const Cache& c, const WriteKv& a, void* stream) {
  if (a.num_tokens > INT_MAX) fail(Code::invalid_argument, "num_tokens %lld exceeds %d", (long long)a.num_tokens, INT_MAX);
  const int64_t es = int64_t(c.elem());
  const int64_t row = c.head_dim * es;
  if (uintptr_t(a.slots) % 8 != 0) fail(Code::invalid_argument, "args: slot_mapping is not 8-byte aligned");
  DeviceGuard g(c.device_index);
  check_pointer(a.key, c.device_index, "args.key");
  check_pointer(a.value, c.device_index, "args.value");
  check_pointer(a.slots, c.device_index, "args.slot_mapping");
  check_pointer(c.k, c.device_index, "cache.k");
  check_pointer(c.v, c.device_index, "cache.v");
  WriteParams p;
  p.key = static_cast<const char*>(a.key);
  p.value = static_cast<const char*>(a.value);
  p.k = static_cast<char*>(c.k);
  p.v = static_cast<char*>(c.v);
  p.key_ts = a.key_token_stride * es;
  p.key_hs = a.key_head_stride * es;
  p.val_ts = a.value_token_stride * es;
  p.val_hs = a.value_head_stride * es;
  p.kv = c.in_bytes(es);
  p.slots = a.slots;
  p.num_slots = c.num_blocks * c.block_size;
  p.block_mask = c.block_size - 1;
  p.block_shift = c.block_shift;
  p.heads = int(c.num_kv_heads);
  p.fault = fault_record(c.device_index);
  cudaStream_t s = as_stream(stream);
  if (c.fp8()) return write_kv_fp8(c, a, p, s);
  const int w = common_width({uint64_t(uintptr_t(p.key)), uint64_t(uintptr_t(p.value)), uint64_t(uintptr_t(p.k)),
                              uint64_t(uintptr_t(p.v)), uint64_t(p.key_ts), uint64_t(p.key_hs), uint64_t(p.val_ts),
                              uint64_t(p.val_hs), p.kv.stride_bits(), uint64_t(row)});
  // heads * chunks_per_row is an int in the kernel (w may be 1 for byte-aligned pointers).
  if (c.num_kv_heads * (row / w) > INT_MAX)
    fail(Code::invalid_argument, "num_kv_heads * head_dim too large for the alignment of the pointers and strides");
  p.chunks_per_row = int(row / w);
  switch (w) {
    case 16: launch_width<uint4>(p, a.num_tokens, s); break;
    case 8: launch_width<uint2>(p, a.num_tokens, s); break;
    case 4: launch_width<uint32_t>(p, a.num_tokens, s); break;
    case 2: launch_width<uint16_t>(p, a.num_tokens, s); break;
    default: launch_width<uint8_t>(p, a.num_tokens, s); break;
  }
}

}  // namespace cuda
}  // namespace kern
}  // namespace kvb
