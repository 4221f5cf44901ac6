#include "validate.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "../../libkvblock/capi_guard.h"
#include "../../libkvblock/capi_struct.h"
#include "../decode/decode.h"
#include "cache.h"
#include "../write_kv/write_kv.h"

namespace kvb {
namespace kern {

const char* dtype_name(Dtype d) {
  switch (d) {
    case Dtype::f16: return "fp16";
    case Dtype::bf16: return "bf16";
    case Dtype::f32: return "fp32";
    case Dtype::e4m3: return "fp8_e4m3";
    case Dtype::e5m2: return "fp8_e5m2";
  }
  return "?";
}

bool Cache::block_dense() const {
  const bool nhd = head_stride == head_dim && token_stride == num_kv_heads * head_dim;
  const bool hnd = token_stride == head_dim && head_stride == block_size * head_dim;
  return nhd || hnd;
}

namespace {

constexpr int64_t kMaxOffset = int64_t(1) << 60;

// An fp8 cache's scales: finite and > 0 (stored = x / scale), per-head arrays included.
void read_fp8_scales(const kvb_cache_desc& d, const char* what, Cache& c) {
  KVB_REQUIRE_ARG(std::isfinite(d.k_scale) && d.k_scale > 0.f, "%s: k_scale %g is not a finite value > 0", what,
                  (double)d.k_scale);
  KVB_REQUIRE_ARG(std::isfinite(d.v_scale) && d.v_scale > 0.f, "%s: v_scale %g is not a finite value > 0", what,
                  (double)d.v_scale);
  for (const float* arr : {d.k_head_scales, d.v_head_scales}) {
    if (!arr) continue;
    const char* name = arr == d.k_head_scales ? "k_head_scales" : "v_head_scales";
    if (c.cuda)
      KVB_REQUIRE_ARG(c.num_kv_heads <= kMaxHeadScales,
                      "%s: %s on a CUDA cache need num_kv_heads <= %lld (they travel in the launch parameters), "
                      "not %lld", what, name, (long long)kMaxHeadScales, (long long)c.num_kv_heads);
    for (int64_t h = 0; h < c.num_kv_heads; ++h)
      KVB_REQUIRE_ARG(std::isfinite(arr[h]) && arr[h] > 0.f, "%s: %s[%lld] = %g is not a finite value > 0", what, name,
                      (long long)h, (double)arr[h]);
  }
  c.k_scale = d.k_scale;
  c.v_scale = d.v_scale;
  c.k_head_scales = d.k_head_scales;
  c.v_head_scales = d.v_head_scales;
}

}  // namespace

Dtype read_query_dtype(const Cache& c, uint32_t q_dtype, const char* field) {
  if (!c.fp8()) return c.dtype;
  KVB_REQUIRE_ARG(q_dtype <= KVB_DTYPE_FP32, "args: %s %u is not fp16 (0), bf16 (1) or fp32 (2) for the %s cache",
                  field, q_dtype, dtype_name(c.dtype));
  return static_cast<Dtype>(q_dtype);
}

void refuse_cuda_fp8_attention(const Cache& c, Dtype q_dtype) {
  if (!c.cuda || !c.fp8()) return;
  if (q_dtype == Dtype::f32)
    fail(Code::unsupported, "fp8 KV cache: CUDA attention takes q_dtype fp16 or bf16, not fp32 (cache dtype %s)",
         dtype_name(c.dtype));
}

// True when [extent_i] x stride_i boxes nested in increasing stride order never overlap
// (the innermost dimension is `inner` contiguous elements).
bool non_overlapping(int64_t inner, std::initializer_list<std::pair<int64_t, int64_t>> dims) {
  std::vector<std::pair<int64_t, int64_t>> d(dims);  // (stride, extent)
  std::sort(d.begin(), d.end());
  int64_t span = inner;
  for (auto& [stride, extent] : d) {
    if (extent <= 1) continue;
    if (stride < span) return false;
    if (stride > kMaxOffset / extent) return false;
    span += stride * (extent - 1);
    if (span > kMaxOffset) return false;
  }
  return true;
}

int64_t stride_or(int64_t s, int64_t count, int64_t unit, const char* what, const char* name) {
  KVB_REQUIRE_ARG(s >= 0, "%s: %s %lld is negative (negative strides are not supported)", what, name, (long long)s);
  KVB_REQUIRE_ARG(s <= kMaxOffset, "%s: %s %lld exceeds 2^60 elements", what, name, (long long)s);
  if (s != 0) return s;
  int64_t d = 0;
  if (__builtin_mul_overflow(count, unit, &d) || d > kMaxOffset)
    fail(Code::invalid_argument, "%s: default %s = %lld * %lld exceeds 2^60 elements", what, name, (long long)count,
         (long long)unit);
  return d;
}

int64_t check_extent(const char* what, const void* base, size_t elem, int64_t inner, std::initializer_list<Dim> dims) {
  // Largest offset reached = inner - 1 + sum (extent - 1) * stride; a tensor with an empty dimension
  // touches nothing.
  int64_t last = inner - 1;
  for (const Dim& d : dims) {
    KVB_REQUIRE_ARG(d.stride >= 0, "%s: %s %lld is negative (negative strides are not supported)", what, d.name,
                    (long long)d.stride);
    KVB_REQUIRE_ARG(d.extent >= 0, "%s: extent %lld of %s is negative", what, (long long)d.extent, d.name);
    if (d.extent == 0) return 0;
    int64_t step = 0;
    if (__builtin_mul_overflow(d.stride, d.extent - 1, &step) || __builtin_add_overflow(last, step, &last) ||
        last >= kMaxOffset)
      fail(Code::invalid_argument, "%s: %s %lld times %lld reaches beyond 2^60 elements", what, d.name,
           (long long)d.stride, (long long)(d.extent - 1));
  }
  const uint64_t bytes = uint64_t(last + 1) * elem;  // < 2^63: last < 2^60, elem <= 4
  KVB_REQUIRE_ARG(base == nullptr || uint64_t(reinterpret_cast<uintptr_t>(base)) <= UINT64_MAX - bytes,
                  "%s: %llu bytes from %p wrap around the address space", what, (unsigned long long)bytes, base);
  return last + 1;
}

void check_workspace(size_t needed, const void* ws, size_t size, const char* size_query) {
  if (needed == 0) return;
  if (size < needed)
    fail(Code::buffer_too_small, "args: workspace_size %zu is smaller than the %zu bytes needed (%s)", size, needed,
         size_query);
  KVB_REQUIRE_ARG(ws != nullptr, "args: workspace is NULL");
  KVB_REQUIRE_ARG(reinterpret_cast<uintptr_t>(ws) % 16 == 0, "args: workspace is not 16-byte aligned");
}

Cache read_cache(const kvb_cache_desc* desc, const char* what) {
  const kvb_cache_desc d =
      read_versioned(desc, offsetof(kvb_cache_desc, alloc_kind), kvb_cache_desc_init, what, "kvb_cache_desc_init");
  Cache c;
  KVB_REQUIRE_ARG(d.device_type == KVB_DEVICE_CPU || d.device_type == KVB_DEVICE_CUDA,
                  "%s: unknown device_type %u", what, d.device_type);
  c.cuda = d.device_type == KVB_DEVICE_CUDA;
  KVB_REQUIRE_ARG(!c.cuda || d.device_index >= 0, "%s: device_index %d is negative", what, d.device_index);
  c.device_index = c.cuda ? d.device_index : 0;
  KVB_REQUIRE_ARG(d.dtype <= KVB_DTYPE_FP8_E5M2, "%s: unknown dtype %u", what, d.dtype);
  c.dtype = static_cast<Dtype>(d.dtype);
  KVB_REQUIRE_ARG(d.k != nullptr, "%s: k is NULL", what);
  KVB_REQUIRE_ARG(d.v != nullptr, "%s: v is NULL", what);
  c.k = d.k;
  c.v = d.v;
  KVB_REQUIRE_ARG(d.num_blocks >= 1 && d.num_blocks <= 0x7fffffffu, "%s: num_blocks %u out of range", what, d.num_blocks);
  KVB_REQUIRE_ARG(d.block_size >= 1 && d.block_size <= 1024 && (d.block_size & (d.block_size - 1)) == 0,
                  "%s: block_size %u is not a power of two in [1, 1024]", what, d.block_size);
  KVB_REQUIRE_ARG(d.num_kv_heads >= 1 && d.num_kv_heads <= 65536, "%s: num_kv_heads %u out of range", what, d.num_kv_heads);
  KVB_REQUIRE_ARG(d.head_dim >= 1 && d.head_dim <= 65536, "%s: head_dim %u out of range", what, d.head_dim);
  c.num_blocks = d.num_blocks;
  c.block_size = d.block_size;
  c.num_kv_heads = d.num_kv_heads;
  c.head_dim = d.head_dim;
  while ((int64_t(1) << c.block_shift) < c.block_size) c.block_shift++;
  c.head_stride = stride_or(d.head_stride, c.head_dim, 1, what, "head_stride");
  c.token_stride = stride_or(d.token_stride, c.num_kv_heads, c.head_stride, what, "token_stride");
  c.block_stride = stride_or(d.block_stride, c.block_size, c.token_stride, what, "block_stride");
  if (c.fp8()) read_fp8_scales(d, what, c);
  for (const void* base : {c.k, c.v})
    check_extent(what, base, c.elem(), c.head_dim, {{"head_stride", c.head_stride, c.num_kv_heads},
                                                    {"token_stride", c.token_stride, c.block_size},
                                                    {"block_stride", c.block_stride, c.num_blocks}});
  KVB_REQUIRE_ARG(non_overlapping(c.head_dim, {{c.head_stride, c.num_kv_heads},
                                               {c.token_stride, c.block_size},
                                               {c.block_stride, c.num_blocks}}),
                  "%s: strides (block %lld, token %lld, head %lld) make elements overlap or overflow", what,
                  (long long)c.block_stride, (long long)c.token_stride, (long long)c.head_stride);
  return c;
}

void require_backend(const Cache& c, const char* what) {
  if (!c.cuda) return;
  if (!cuda::built())
    fail(Code::unsupported, "%s: CUDA cache, but libkvblock was built without CUDA (make CUDA=0 or no nvcc)", what);
  cuda::check_device(c.device_index);
}

void require_same_shape(const Cache& a, const Cache& b, const char* what_a, const char* what_b) {
  KVB_REQUIRE_ARG(a.dtype == b.dtype, "%s dtype %s differs from %s dtype %s", what_b, dtype_name(b.dtype), what_a,
                  dtype_name(a.dtype));
  KVB_REQUIRE_ARG(a.block_size == b.block_size && a.num_kv_heads == b.num_kv_heads && a.head_dim == b.head_dim,
                  "%s shape (block_size %lld, kv heads %lld, head_dim %lld) differs from %s (%lld, %lld, %lld)",
                  what_b, (long long)b.block_size, (long long)b.num_kv_heads, (long long)b.head_dim, what_a,
                  (long long)a.block_size, (long long)a.num_kv_heads, (long long)a.head_dim);
}

WriteKv read_write_kv(const Cache& c, const kvb_write_kv_args* args) {
  const kvb_write_kv_args a =
      read_versioned(args, sizeof(kvb_write_kv_args), kvb_write_kv_args_init, "args", "kvb_write_kv_args_init");
  WriteKv w;
  w.input_dtype = read_query_dtype(c, a.input_dtype, "input_dtype");
  const size_t in_es = dtype_size(w.input_dtype);
  KVB_REQUIRE_ARG(a.num_tokens <= (size_t(1) << 40), "num_tokens %zu is too large", a.num_tokens);
  w.num_tokens = (int64_t)a.num_tokens;
  w.key_head_stride = stride_or(a.key_head_stride, c.head_dim, 1, "args", "key_head_stride");
  w.key_token_stride = stride_or(a.key_token_stride, c.num_kv_heads, w.key_head_stride, "args", "key_token_stride");
  w.value_head_stride = stride_or(a.value_head_stride, c.head_dim, 1, "args", "value_head_stride");
  w.value_token_stride =
      stride_or(a.value_token_stride, c.num_kv_heads, w.value_head_stride, "args", "value_token_stride");
  check_extent("args: key", a.key, in_es, c.head_dim,
               {{"key_head_stride", w.key_head_stride, c.num_kv_heads},
                {"key_token_stride", w.key_token_stride, w.num_tokens}});
  check_extent("args: value", a.value, in_es, c.head_dim,
               {{"value_head_stride", w.value_head_stride, c.num_kv_heads},
                {"value_token_stride", w.value_token_stride, w.num_tokens}});
  if (w.num_tokens == 0) return w;
  KVB_REQUIRE_ARG(a.key != nullptr, "args: key is NULL");
  KVB_REQUIRE_ARG(a.value != nullptr, "args: value is NULL");
  KVB_REQUIRE_ARG(a.slot_mapping != nullptr, "args: slot_mapping is NULL");
  w.key = a.key;
  w.value = a.value;
  w.slots = a.slot_mapping;
  return w;
}

AttnPlan plan_attention(int64_t num_seqs, int64_t num_q_heads, int64_t num_kv_heads, int64_t head_dim,
                        int64_t block_size, int64_t max_blocks) {
  // Partitions of at least 256 tokens (and a whole number of blocks). Grow them while the grid keeps at
  // least 4096 (sequence, kv head, partition) work items: larger partitions write less workspace, but
  // enough items are needed to fill a GPU without a long tail. Depends on shapes only, so the workspace
  // query agrees with the launch and with every device.
  const int64_t max_ctx = max_blocks * block_size;
  AttnPlan p;
  p.partition_size = std::max<int64_t>(256, block_size);
  const int64_t rows = num_seqs * num_kv_heads;
  while (p.partition_size < 2048 &&
         rows * ((max_ctx + 2 * p.partition_size - 1) / (2 * p.partition_size)) >= 4096)
    p.partition_size *= 2;
  p.num_partitions = std::max<int64_t>(1, (max_ctx + p.partition_size - 1) / p.partition_size);
  if (p.num_partitions > 1) {
    // num_seqs * num_q_heads * num_partitions rows of head_dim + 2 floats; refused rather than wrapped.
    uint64_t bytes = sizeof(float) * uint64_t(head_dim + 2);
    for (int64_t f : {num_seqs, num_q_heads, p.num_partitions})
      if (__builtin_mul_overflow(bytes, uint64_t(f), &bytes) || bytes > uint64_t(SIZE_MAX))
        fail(Code::invalid_argument, "attention workspace for %lld sequences x %lld query heads x %lld partitions "
             "of %lld floats exceeds the address space", (long long)num_seqs, (long long)num_q_heads,
             (long long)p.num_partitions, (long long)(head_dim + 2));
    p.workspace_bytes = size_t(bytes);
  }
  return p;
}

AttnCall read_heads(const Cache& c, const HeadArgs& a, const char* kernel) {
  AttnCall t;
  t.q_dtype = read_query_dtype(c, a.q_dtype, "q_dtype");
  refuse_cuda_fp8_attention(c, t.q_dtype);
  KVB_REQUIRE_ARG(c.head_dim == 64 || c.head_dim == 128 || c.head_dim == 256,
                  "%s: head_dim %lld is not supported (64, 128 or 256)", kernel, (long long)c.head_dim);
  KVB_REQUIRE_ARG(a.num_seqs <= 65535, "args: num_seqs %u exceeds 65535", a.num_seqs);
  KVB_REQUIRE_ARG(a.num_q_heads >= 1, "args: num_q_heads is 0");
  KVB_REQUIRE_ARG(a.num_q_heads % c.num_kv_heads == 0, "args: num_q_heads %u is not a multiple of num_kv_heads %lld",
                  a.num_q_heads, (long long)c.num_kv_heads);
  KVB_REQUIRE_ARG(a.num_q_heads / c.num_kv_heads <= 256, "args: %lld query heads per kv head exceeds 256",
                  (long long)(a.num_q_heads / c.num_kv_heads));
  KVB_REQUIRE_ARG(a.max_blocks_per_seq >= 1, "args: max_blocks_per_seq is 0");
  KVB_REQUIRE_ARG(int64_t(a.max_blocks_per_seq) * c.block_size <= 0x7fffffff,
                  "args: max_blocks_per_seq %u * block_size %lld exceeds 2^31-1 tokens", a.max_blocks_per_seq,
                  (long long)c.block_size);
  KVB_REQUIRE_ARG(std::isfinite(a.scale) && a.scale >= 0.f, "args: scale %g is not a finite value >= 0", (double)a.scale);
  KVB_REQUIRE_ARG(std::isfinite(a.logits_soft_cap) && a.logits_soft_cap >= 0.f,
                  "args: logits_soft_cap %g is not a finite value >= 0", (double)a.logits_soft_cap);
  KVB_REQUIRE_ARG(a.window_tokens > 0 || a.sink_tokens == 0, "args: sink_tokens %u without window_tokens",
                  a.sink_tokens);
  t.num_seqs = a.num_seqs;
  t.num_q_heads = a.num_q_heads;
  t.max_blocks = a.max_blocks_per_seq;
  t.scale = a.scale > 0.f ? a.scale : float(1.0 / std::sqrt(double(c.head_dim)));
  t.soft_cap = a.logits_soft_cap;
  t.window = a.window_tokens;
  t.sink = a.sink_tokens;
  return t;
}

void read_q_out(const Cache& c, AttnCall& t, int64_t rows, const char* row, const void* q, int64_t q_row_stride,
                int64_t q_head_stride, const void* out, int64_t out_row_stride, int64_t out_head_stride) {
  const std::string q_row = std::string("q_") + row + "_stride", out_row = std::string("out_") + row + "_stride";
  const int64_t H = t.num_q_heads, D = c.head_dim;
  const size_t q_es = dtype_size(t.q_dtype);
  const int64_t q_head = stride_or(q_head_stride, D, 1, "args", "q_head_stride");
  const int64_t q_rows = stride_or(q_row_stride, H, q_head, "args", q_row.c_str());
  const int64_t out_head = stride_or(out_head_stride, D, 1, "args", "out_head_stride");
  const int64_t out_rows = stride_or(out_row_stride, H, out_head, "args", out_row.c_str());
  check_extent("args: q", q, q_es, D, {{"q_head_stride", q_head, H}, {q_row.c_str(), q_rows, rows}});
  check_extent("args: out", out, q_es, D, {{"out_head_stride", out_head, H}, {out_row.c_str(), out_rows, rows}});
  KVB_REQUIRE_ARG(non_overlapping(D, {{out_head, H}, {out_rows, rows}}),
                  "args: out strides (%s %lld, head %lld) make elements overlap", row, (long long)out_rows,
                  (long long)out_head);
  t.q_row_stride = q_rows, t.q_head_stride = q_head;
  t.out_row_stride = out_rows, t.out_head_stride = out_head;
}

Attention read_attention(const Cache& c, const kvb_attention_args* args, bool need_pointers) {
  const kvb_attention_args a = read_versioned(args, offsetof(kvb_attention_args, q_dtype), kvb_attention_args_init,
                                              "args", "kvb_attention_args_init");
  Attention t;
  static_cast<AttnCall&>(t) = read_heads(c, head_args(a), "attention");
  read_q_out(c, t, t.num_seqs, "seq", need_pointers ? a.q : nullptr, a.q_seq_stride, a.q_head_stride,
             need_pointers ? a.out : nullptr, a.out_seq_stride, a.out_head_stride);
  t.plan = plan_attention(t.num_seqs, t.num_q_heads, c.num_kv_heads, c.head_dim, c.block_size, t.max_blocks);
  if (!need_pointers || t.num_seqs == 0) return t;
  read_io_pointers(t, a, true, t.plan.workspace_bytes, "kvb_paged_attention_workspace_size");
  return t;
}

}  // namespace kern
}  // namespace kvb
