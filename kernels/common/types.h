// The types every kernel shares: element types, the validated form of one layer's cache, and what
// decode and prefill attention calls have in common. Each operation's own validated arguments, checker
// and back ends are in its header (write_kv.h, decode.h, prefill.h, cascade.h, copy.h; the cache
// descriptor and devices in cache.h); the C boundary (kernels/capi_*.cpp) checks the public structs
// into these forms, and the CPU and CUDA implementations only ever see them.
#pragma once
#include <cstddef>
#include <cstdint>

namespace kvb {
namespace kern {

enum class Dtype : int { f16 = 0, bf16 = 1, f32 = 2, e4m3 = 3, e5m2 = 4 };

constexpr bool is_fp8(Dtype d) { return d == Dtype::e4m3 || d == Dtype::e5m2; }
inline size_t dtype_size(Dtype d) { return d == Dtype::f32 ? 4 : is_fp8(d) ? 1 : 2; }
const char* dtype_name(Dtype d);

// One layer's K/V caches; every stride in elements and positive.
struct Cache {
  bool cuda = false;
  int device_index = 0;
  Dtype dtype = Dtype::f16;
  void* k = nullptr;
  void* v = nullptr;
  int64_t num_blocks = 0, block_size = 0, num_kv_heads = 0, head_dim = 0;
  int64_t block_stride = 0, token_stride = 0, head_stride = 0;
  int block_shift = 0;  // log2(block_size)
  // FP8 caches only (1.0 otherwise): stored = x / scale. The per-head arrays, when not NULL, are the
  // caller's host memory, valid only during the call (checked finite and > 0), and replace k/v_scale.
  float k_scale = 1.f, v_scale = 1.f;
  const float* k_head_scales = nullptr;
  const float* v_head_scales = nullptr;

  bool fp8() const { return is_fp8(dtype); }
  float k_scale_of(int64_t head) const { return k_head_scales ? k_head_scales[head] : k_scale; }
  float v_scale_of(int64_t head) const { return v_head_scales ? v_head_scales[head] : v_scale; }

  size_t elem() const { return dtype_size(dtype); }
  // True when one block is a dense run of block_size*num_kv_heads*head_dim elements (NHD or HND order).
  bool block_dense() const;
  int64_t block_elems() const { return block_size * num_kv_heads * head_dim; }
};

// What decode and prefill attention calls mean alike: the query heads over the cache's kv heads (GQA),
// the block table width, the logit transform and the window (validate.cpp: read_heads checks them once
// for both).
struct AttnHeads {
  int64_t num_seqs = 0, num_q_heads = 0, max_blocks = 0;
  float scale = 0.f, soft_cap = 0.f;
  int64_t window = 0, sink = 0;
  Dtype q_dtype = Dtype::f16;  // dtype of q and out: the cache's, or fp16/bf16/fp32 for an fp8 cache
};

}  // namespace kern
}  // namespace kvb
