// CUDA shared-prefix ("cascade") prefill / extend (kvb_prefix_groups on a CUDA cache, fp16 / bf16).
//
// All members' new tokens follow their group's shared prefix, so a group's shared keys are one
// non-causal product for all its members' query rows (cascade_mma.cu shared tiles, q_len rows per
// member instead of decode's one; masked only where a window cuts into the shared keys or a member's
// new tokens lie inside the shared blocks), read once per 64-row tile instead of once per sequence. Each
// sequence's own keys (all of them for a sequence in no group) run in the same kernel as own tiles,
// tiled as the plain prefill tiles a sequence. Every part goes to the caller's workspace
// ([query row][head][part]: the shared splits, then the own splits; a sequence in no group gets empty
// shared parts), and cascade_merge combines a row's parts by log-sum-exp, as the plain prefill's
// split reduction does. Nothing is planned on the host beyond the launch shape (query_start is read on
// the device only) and nothing is allocated.
#include <algorithm>
#include <climits>

#include "../common/cache.h"
#include "cascade.h"
#include "cascade_tiles.h"
#include "../prefill/prefill.h"
#include "cascade_mma.cuh"
#include "../common/cuda.cuh"

namespace kvb {
namespace kern {
namespace cuda {

namespace {

constexpr int64_t kMaxOwnSplits = 8;  // bounds the workspace: total_q x heads x parts x (head_dim + 2) floats

// One CTA of D threads per (query row, head): out = sum_i 2^(m_i - M) acc_i / sum_i 2^(m_i - M) l_i over
// the parts with l_i > 0; any NaN sum (a fault) makes the row NaN.
template <typename T, int D>
__global__ void __launch_bounds__(D) cascade_merge(const PrefillParams b, int parts) {
  const int row = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
  const int64_t w0 = ctiles::part_index(row, h, b.num_q_heads, parts, 0);
  float M = -INFINITY;
  bool poisoned = false;
  for (int i = 0; i < parts; ++i) {
    const float li = b.ws_l[w0 + i];
    poisoned |= li != li;
    if (li > 0.f) M = fmaxf(M, b.ws_m[w0 + i]);
  }
  float L = 0.f, A = 0.f;
  for (int i = 0; i < parts; ++i) {
    const float li = b.ws_l[w0 + i];
    if (!(li > 0.f)) continue;
    const float w = exp2f(b.ws_m[w0 + i] - M);
    L += li * w;
    A += w * b.ws_o[(w0 + i) * D + d];
  }
  T* op = reinterpret_cast<T*>(b.out) + int64_t(row) * b.out_row_stride + int64_t(h) * b.out_head_stride;
  op[d] = Vec<T>::from_float(poisoned ? __int_as_float(0x7fffffff) : L > 0.f ? A / L : 0.f);
}

template <typename T>
void launch_merge(const PrefillParams& b, int parts, int D, cudaStream_t s) {
  const dim3 grid(unsigned(b.total_q), unsigned(b.num_q_heads));
  switch (D) {
    case 64: cascade_merge<T, 64><<<grid, 64, 0, s>>>(b, parts); break;
    case 128: cascade_merge<T, 128><<<grid, 128, 0, s>>>(b, parts); break;
    default: cascade_merge<T, 256><<<grid, 256, 0, s>>>(b, parts); break;
  }
  check(cudaGetLastError(), "cascade_merge launch");
}

// The launch shape, or fits = false (the plain prefill runs).
struct Shape {
  bool fits = false;
  int shared_tiles = 0, own_tiles = 0, shared_splits = 1, own_splits = 1, shared_st = 0, own_st = 0;
  size_t workspace_bytes = 0;
};

Shape shape_of(const Cache& c, const Prefill& a, const kvb_prefix_groups& g) {
  Shape s;
  if (!cascade_mma_supported(c) || g.num_groups == 0 || g.num_groups > uint32_t(kCascadeMaxGroups)) return s;
  if (g.group_start[g.num_groups] > kCascadeMaxMembers || a.num_seqs > INT16_MAX || a.total_q <= 0) return s;
  const int64_t G = a.num_q_heads / c.num_kv_heads;
  const int64_t max_tokens = a.max_blocks * c.block_size;
  if (a.total_q * G > int64_t(INT_MAX) / 2 || max_tokens > int64_t(INT_MAX) - 4096 || c.num_kv_heads > 65535) return s;
  int64_t max_shared = 0;
  for (uint32_t gi = 0; gi < g.num_groups; ++gi)
    max_shared = std::max<int64_t>(max_shared, int64_t(g.shared_blocks[gi]) * c.block_size);
  const int64_t st = ctiles::shared_tile_bound(a.total_q, int(G), g.num_groups);
  const int64_t ot = ctiles::own_tile_count(a.total_q, int(G), a.num_seqs);
  if ((st + ot) * c.num_kv_heads > INT_MAX) return s;
  s.shared_tiles = int(st);
  s.own_tiles = int(ot);
  cascade_mma_splits(st * c.num_kv_heads, max_shared, c.head_dim, 65535, &s.shared_splits, &s.shared_st);
  cascade_mma_splits(ot * c.num_kv_heads, max_tokens, c.head_dim, kMaxOwnSplits, &s.own_splits, &s.own_st);
  const size_t parts = size_t(s.shared_splits) + size_t(s.own_splits);
  const size_t rows = size_t(a.total_q) * size_t(a.num_q_heads) * parts;
  s.workspace_bytes = rows * (size_t(c.head_dim) + 2) * sizeof(float) + 64;
  s.fits = true;
  return s;
}

}  // namespace

size_t cascade_prefill_workspace(const Cache& c, const Prefill& a, const kvb_prefix_groups& g) {
  check_prefix_groups(a.num_seqs, a.max_blocks, g, "prefill attention");
  const Shape s = shape_of(c, a, g);
  return s.fits ? s.workspace_bytes : 0;
}

bool cascade_prefill(const Cache& c, const Prefill& a, const kvb_prefix_groups& g, void* workspace,
                     size_t workspace_size, void* stream) {
  check_prefix_groups(a.num_seqs, a.max_blocks, g, "prefill attention");
  const Shape s = shape_of(c, a, g);
  if (!s.fits || workspace == nullptr || workspace_size < s.workspace_bytes) return false;
  // What the plain kernel reports as an error (misalignment) it reports: run it.
  const int64_t es = int64_t(c.elem());
  const uint64_t align = kv_align_bits(c) | uint64_t(uintptr_t(a.q)) | uint64_t(uintptr_t(a.out)) |
                         uint64_t(a.q_row_stride * es) | uint64_t(a.q_head_stride * es) |
                         uint64_t(a.out_row_stride * es) | uint64_t(a.out_head_stride * es);
  if (align % 16 != 0 || uintptr_t(a.query_start) % 4 != 0 || uintptr_t(a.seq_lens) % 4 != 0 ||
      uintptr_t(a.block_tables) % 4 != 0 || c.num_blocks > INT_MAX || a.num_q_heads > 65535)
    return false;
  DeviceGuard guard(c.device_index);
  check_attn_pointers(c, a);
  check_pointer(a.query_start, c.device_index, "args.query_start");
  check_pointer(workspace, c.device_index, "args.workspace");

  CascadeMmaParams p{};
  PrefillParams& b = p.b;
  static_cast<AttnIo&>(b) = attn_io(c, a);
  b.query_start = a.query_start;
  b.seq_lens = a.seq_lens;
  b.block_tables = a.block_tables;
  const int parts = s.shared_splits + s.own_splits;
  const size_t rows = size_t(a.total_q) * size_t(a.num_q_heads) * size_t(parts);
  char* ws = static_cast<char*>(workspace);
  while (uintptr_t(ws) % 16 != 0) ++ws;
  b.ws_m = reinterpret_cast<float*>(ws);
  b.ws_l = b.ws_m + rows;
  b.ws_o = b.ws_l + rows;
  b.num_seqs = int(a.num_seqs), b.total_q = int(a.total_q);
  b.num_blocks = int(c.num_blocks), b.block_shift = c.block_shift, b.max_blocks = int(a.max_blocks);
  b.num_q_heads = int(a.num_q_heads), b.group = int(a.num_q_heads / c.num_kv_heads);
  b.window = a.window > INT_MAX ? INT_MAX : int(a.window);
  b.sink = a.sink > INT_MAX ? INT_MAX : int(a.sink);
  b.num_splits = parts, b.split_tokens = s.own_st;
  b.scale = a.scale, b.soft_cap = a.soft_cap, b.q_scale = a.scale * kLog2e;
  b.fault = fault_record(c.device_index);
  cascade_mma_describe(p, g, c.block_size);
  p.shared_tiles = s.shared_tiles, p.own_tiles = s.own_tiles;
  p.shared_splits = s.shared_splits, p.own_splits = s.own_splits, p.parts = parts;
  p.shared_split_tokens = s.shared_st, p.own_split_tokens = s.own_st;
  p.by_member = 0;
  p.kernel = KVB_KERNEL_PREFILL_ATTENTION;

  cudaStream_t st = as_stream(stream);
  if (!launch_cascade_mma(p, c, a.soft_cap > 0.f, st)) return false;
  if (c.dtype == Dtype::f16) launch_merge<__half>(b, parts, int(c.head_dim), st);
  else launch_merge<__nv_bfloat16>(b, parts, int(c.head_dim), st);
  return true;
}

}  // namespace cuda
}  // namespace kern
}  // namespace kvb
