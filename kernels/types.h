// Internal, validated forms of the kernel arguments. The C boundary (kernels/*.cpp) turns the public
// structs into these after checking them; the CPU and CUDA implementations only ever see these.
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

struct WriteKv {
  int64_t num_tokens = 0;
  const void* key = nullptr;
  const void* value = nullptr;
  int64_t key_token_stride = 0, key_head_stride = 0, value_token_stride = 0, value_head_stride = 0;
  const int64_t* slots = nullptr;
  Dtype input_dtype = Dtype::f16;  // dtype of key/value: the cache's, or fp16/bf16/fp32 for an fp8 cache
};

// Split-K plan: partitions of partition_size tokens; num_partitions == 1 means a single pass.
struct AttnPlan {
  int64_t partition_size = 0;
  int64_t num_partitions = 1;
  size_t workspace_bytes = 0;  // num_seqs*num_q_heads*num_partitions*(head_dim+2) floats when split
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

struct Attention : AttnHeads {
  const void* q = nullptr;
  int64_t q_seq_stride = 0, q_head_stride = 0;
  void* out = nullptr;
  int64_t out_seq_stride = 0, out_head_stride = 0;
  const int32_t* block_tables = nullptr;
  const int32_t* seq_lens = nullptr;
  void* workspace = nullptr;
  AttnPlan plan;
};

// Workspace layout when split: m[seq][head][part], l[seq][head][part], acc[seq][head][part][head_dim].
// m is the running max in log2 units (logit * log2(e)), l the sum of exp2(s - m), acc = sum(p*v)/l.
// Throws invalid_argument when the workspace size would not fit size_t.
AttnPlan plan_attention(int64_t num_seqs, int64_t num_q_heads, int64_t num_kv_heads, int64_t head_dim,
                        int64_t block_size, int64_t max_blocks);

// Copy (same cache) or swap (src != dst) of block pairs over several layers; all layers share shape.
struct BlockCopy {
  const Cache* src = nullptr;  // [num_layers]
  const Cache* dst = nullptr;  // [num_layers]
  int64_t num_layers = 0;
  const int32_t* pairs = nullptr;  // host memory, pairs[2i] = src block, pairs[2i+1] = dst block
  int64_t num_pairs = 0;
  uint32_t flags = 0;  // kvb_swap_flags
};

}  // namespace kern
}  // namespace kvb
