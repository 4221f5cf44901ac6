// The types every kernel shares: element types, the validated form of one layer's cache, and what
// decode and prefill attention calls have in common. Each operation's own validated arguments, checker
// and back ends are in its header (write_kv.h, decode.h, prefill.h, cascade.h, copy.h; the cache
// descriptor and devices in cache.h); the C boundary (kernels/capi_*.cpp) checks the public structs
// into these forms, and the CPU and CUDA implementations only ever see them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <limits>

#include "paged.h"

namespace kvb {
namespace kern {

// exp(x) = exp2(x * kLog2e): the kernels keep logits in base-2 units.
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

enum class Dtype : int { f16 = 0, bf16 = 1, f32 = 2, e4m3 = 3, e5m2 = 4 };

constexpr bool is_fp8(Dtype d) { return d == Dtype::e4m3 || d == Dtype::e5m2; }
inline size_t dtype_size(Dtype d) { return d == Dtype::f32 ? 4 : is_fp8(d) ? 1 : 2; }
const char* dtype_name(Dtype d);

// One layer's K/V caches; its paged strides (PagedKv) in elements and positive.
struct Cache : PagedKv {
  bool cuda = false;
  int device_index = 0;
  Dtype dtype = Dtype::f16;
  void* k = nullptr;
  void* v = nullptr;
  int64_t num_blocks = 0, block_size = 0, num_kv_heads = 0, head_dim = 0;
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

  // Row (head 0, elements) of position `pos` of a sequence whose block table (already checked) is
  // `table`, and of cache slot `slot`: the CPU kernels' two uses of the paged rule.
  int64_t seq_row(const int32_t* table, int64_t pos) const {
    return row(table[pos >> block_shift], pos, block_size - 1);
  }
  using PagedKv::slot_row;
  int64_t slot_row(int64_t slot) const { return slot_row(slot, block_shift, block_size - 1); }
};

// What decode and prefill attention calls mean alike: the query heads over the cache's kv heads (GQA),
// the block table width, the logit transform and the window (validate.cpp: read_heads checks them once
// for both), and q / out, [rows][num_q_heads][head_dim] with strides in elements (read_q_out), where a
// row is a sequence's one token (decode) or a query token (prefill).
struct AttnCall {
  int64_t num_seqs = 0, num_q_heads = 0, max_blocks = 0;
  float scale = 0.f, soft_cap = 0.f;
  int64_t window = 0, sink = 0;
  Dtype q_dtype = Dtype::f16;  // dtype of q and out: the cache's, or fp16/bf16/fp32 for an fp8 cache
  const void* q = nullptr;
  int64_t q_row_stride = 0, q_head_stride = 0;
  void* out = nullptr;
  int64_t out_row_stride = 0, out_head_stride = 0;
  const int32_t* seq_lens = nullptr;
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks]
  void* workspace = nullptr;
};

}  // namespace kern
}  // namespace kvb
