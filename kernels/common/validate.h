// The argument checks every kernel entry point shares (strides, extents, workspaces, q's dtype, the
// attention heads); each operation's own checker is declared in its header (read_cache in cache.h,
// read_write_kv in write_kv.h, read_attention in decode.h, read_prefill in prefill.h) and defined in
// validate.cpp / prefill_validate.cpp. Every function throws kvb::Error(invalid_argument, message naming
// the bad value) on bad input.
#pragma once
#include <initializer_list>
#include <utility>

#include "../../abi/kvblock.h"
#include "../../libkvblock/capi_guard.h"
#include "types.h"

namespace kvb {
namespace kern {

// Strides of caller tensors. Every stride is in elements, >= 0 (negative strides are refused: no kernel
// walks backwards, and refusing them keeps every offset a sum of non-negative terms) and <= 2^60.
// 0 stands for the dense default count * unit, computed here with overflow checks.
int64_t stride_or(int64_t s, int64_t count, int64_t unit, const char* what, const char* name);

// One dimension of a strided tensor: `extent` indices `stride` elements apart (`name` for messages).
struct Dim {
  const char* name;
  int64_t stride;
  int64_t extent;
};
// Checks, with overflow-checked arithmetic, that every element of a tensor of `inner` contiguous
// elements and dims (any order) lies at an offset below 2^60 elements, and that `base` (when not NULL)
// plus its byte size (elem bytes per element) does not wrap the address space. Returns the span
// (largest offset + 1, 0 if an extent is 0). Kernels may then compute any index * stride in int64.
int64_t check_extent(const char* what, const void* base, size_t elem, int64_t inner, std::initializer_list<Dim> dims);

// True when (stride, extent) boxes nested in increasing stride order never overlap (the innermost
// dimension is `inner` contiguous elements): distinct indices never share an element.
bool non_overlapping(int64_t inner, std::initializer_list<std::pair<int64_t, int64_t>> dims);

// A caller workspace of `size` bytes at `ws` for a kernel that needs `needed` bytes (nothing when 0):
// BUFFER_TOO_SMALL naming the size query `size_query`, or INVALID_ARGUMENT when NULL or not 16-byte aligned.
void check_workspace(size_t needed, const void* ws, size_t size, const char* size_query);

// The most kv heads a CUDA cache may give per-head fp8 scales for: they travel by value in the launch
// parameters (2 x 128 floats = 1 KiB of the 4 KiB).
constexpr int64_t kMaxHeadScales = 128;

// The dtype of q / out (or of write_kv's key / value): the cache's own, or for an fp8 cache the
// caller's field (fp16, bf16 or fp32), named `field` in the message when refused.
Dtype read_query_dtype(const Cache& c, uint32_t q_dtype, const char* field);
// CUDA attention (decode and prefill) on fp8 caches reads them with fp16 / bf16 queries, not fp32
// (KVB_ERR_UNSUPPORTED).
void refuse_cuda_fp8_attention(const Cache& c, Dtype q_dtype);

// The fields of kvb_attention_args and kvb_prefill_args that mean the same in both, as given.
struct HeadArgs {
  uint32_t q_dtype, num_seqs, num_q_heads, max_blocks_per_seq;
  float scale, logits_soft_cap;
  uint32_t window_tokens, sink_tokens;
};
template <class Args>  // kvb_attention_args or kvb_prefill_args
HeadArgs head_args(const Args& a) {
  return {a.q_dtype, a.num_seqs, a.num_q_heads, a.max_blocks_per_seq, a.scale, a.logits_soft_cap, a.window_tokens,
          a.sink_tokens};
}
// Checks them against the cache for one attention kernel (`kernel` in messages: the head dims it
// supports, q's dtype, the GQA group, positions below 2^31, the logit transform, the window) and
// returns them with the defaults filled in (scale 0 = 1/sqrt(head_dim)).
AttnCall read_heads(const Cache& c, const HeadArgs& a, const char* kernel);

// q and out of an attention call, each [rows][num_q_heads][head_dim] with the caller's strides in
// elements (0 = dense), into t's strides; `row` names the row dimension in messages ("seq":
// q_seq_stride, "token": q_token_stride). The extents are checked (with the base pointers unless
// NULL), and out's elements must not overlap.
void read_q_out(const Cache& c, AttnCall& t, int64_t rows, const char* row, const void* q, int64_t q_row_stride,
                int64_t q_head_stride, const void* out, int64_t out_row_stride, int64_t out_head_stride);

// The pointers of an attention call into t: q and out (not NULL when the call has rows), the block
// tables and sequence lengths (not NULL), the workspace (at least `workspace_bytes`, the size `size_fn`
// reports). Args: kvb_attention_args or kvb_prefill_args.
template <class Args>
void read_io_pointers(AttnCall& t, const Args& a, bool has_rows, size_t workspace_bytes, const char* size_fn) {
  if (has_rows) {
    KVB_REQUIRE_ARG(a.q != nullptr, "args: q is NULL");
    KVB_REQUIRE_ARG(a.out != nullptr, "args: out is NULL");
  }
  KVB_REQUIRE_ARG(a.block_tables != nullptr, "args: block_tables is NULL");
  KVB_REQUIRE_ARG(a.seq_lens != nullptr, "args: seq_lens is NULL");
  check_workspace(workspace_bytes, a.workspace, a.workspace_size, size_fn);
  t.q = a.q;
  t.out = a.out;
  t.block_tables = a.block_tables;
  t.seq_lens = a.seq_lens;
  t.workspace = a.workspace;
}


}  // namespace kern
}  // namespace kvb
