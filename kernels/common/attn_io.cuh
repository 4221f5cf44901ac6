// What every paged attention kernel (decode, prefill, shared-prefix) reads and writes, first in its
// launch parameters: K / V with the cache's paged strides, q and out with the call's strides (all in
// elements; a row is a sequence's one token in a decode, a query token in a prefill). PagedIo (decode)
// and PrefillParams add their own fields after it.
#pragma once
#include <climits>
#include <cstdint>

#include "cache.h"
#include "paged.h"
#include "types.h"

namespace kvb {
namespace kern {
namespace cuda {

struct AttnIo {
  const char* k;
  const char* v;
  PagedKv kv;
  const char* q;
  int64_t q_row_stride, q_head_stride;
  char* out;
  int64_t out_row_stride, out_head_stride;
};

inline AttnIo attn_io(const Cache& c, const AttnCall& a) {
  return AttnIo{static_cast<const char*>(c.k), static_cast<const char*>(c.v), c, static_cast<const char*>(a.q),
                a.q_row_stride, a.q_head_stride, static_cast<char*>(a.out), a.out_row_stride, a.out_head_stride};
}

// The launch-parameter fields every attention kernel reads alike: the cache's shape, the GQA ratio, the
// window and sinks. Each kernel's parameters (decode's AttnParams, PrefillParams, CascadeParams) keep
// them in their own places, the layout their code is compiled against; put_attn_shape fills them from
// an AttnShape or from another kernel's parameters (a prefill call's short queries on the decode kernel).
struct AttnShape {
  int num_blocks, block_shift, max_blocks, num_q_heads, group, window, sink;
};
inline AttnShape attn_shape(const Cache& c, const AttnCall& a) {
  return AttnShape{int(c.num_blocks), c.block_shift, int(a.max_blocks), int(a.num_q_heads),
                   int(a.num_q_heads / c.num_kv_heads), a.window > INT_MAX ? INT_MAX : int(a.window),
                   a.sink > INT_MAX ? INT_MAX : int(a.sink)};
}
template <class To, class From>
void put_attn_shape(To& to, const From& from) {
  to.num_blocks = from.num_blocks;
  to.block_shift = from.block_shift;
  to.max_blocks = from.max_blocks;
  to.num_q_heads = from.num_q_heads;
  to.group = from.group;
  to.window = from.window;
  to.sink = from.sink;
}

// Every device pointer of an attention call is usable on the cache's device: the caches, q and out
// (unless the call has no rows: a prefill with total_q 0 may pass NULL), the sequence lengths and
// block tables. The caller checks its own (query_start, tree_mask, workspace) after.
inline void check_attn_pointers(const Cache& c, const AttnCall& a, bool has_rows = true) {
  check_pointer(c.k, c.device_index, "cache.k");
  check_pointer(c.v, c.device_index, "cache.v");
  if (has_rows) {
    check_pointer(a.q, c.device_index, "args.q");
    check_pointer(a.out, c.device_index, "args.out");
  }
  check_pointer(a.block_tables, c.device_index, "args.block_tables");
  check_pointer(a.seq_lens, c.device_index, "args.seq_lens");
}

}  // namespace cuda
}  // namespace kern
}  // namespace kvb
