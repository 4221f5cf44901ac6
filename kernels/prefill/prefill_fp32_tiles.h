// The tiled prefill kernel for fp32 caches (kernels/prefill/prefill_fp32.cu: exact fp32 on CUDA cores, or
// TF32 tensor cores when the caller sets kvb_prefill_args.allow_tf32): its work decomposition and mma.sync m16n8k8 fragment addressing as
// plain functions, compiled into the kernel (__host__ __device__) and into a CPU test
// (tests/cpp/kernels_prefill_fp32_tiles.cpp) that checks, without a GPU, that the CTAs cover every
// (query row, attended key) pair once and that the fragment addressing computes Q K^T and P V on an
// emulated warp.
//
// CTA x owns the 16 query rows [16x, 16x + 16) of the batch (rows of the packed q / out, all sequences);
// its warps are heads_per_cta query heads of one kv head (the largest of 4, 2, 1 dividing the GQA
// group), so one K / V tile in shared memory serves them all. The rows of a CTA are walked as segments,
// each the rows of one sequence (a tile straddling a sequence boundary computes one segment, then the
// next): each segment is one m16 tile, padded with rows that compute and are dropped. Key tiles of kBN
// keys (16 at D 256, 32 below) are walked over the keys some row of the segment attends (the sinks, then
// the causal window) in two cp.async stages.
#pragma once
#include <cstdint>

#include "../common/host_device.h"

namespace kvb {
namespace kern {
namespace f32tiles {

constexpr int kRows = 16;  // query rows per CTA (mma M)
KVB_HD constexpr int key_tile(int head_dim) { return head_dim >= 256 ? 16 : 32; }
// Row stride of the shared-memory tiles in floats: head_dim + 4 keeps 16-byte rows for cp.async and
// makes the fragment loads below conflict-free (lanes g = 0..7, t = 0..3 reach banks 4g + t, or 8t + g).
KVB_HD constexpr int row_stride(int head_dim) { return head_dim + 4; }
// Dynamic shared memory: Q of each warp (16 rows), 2 stages of K and V tiles, then each warp's P
// (16 x key_tile + 4 floats; the exact variant's scores shared by the lanes).
KVB_HD constexpr int smem_bytes(int head_dim, int warps) {
  return 4 * row_stride(head_dim) * (warps * kRows + 2 * 2 * key_tile(head_dim)) +
         4 * warps * kRows * (key_tile(head_dim) + 4);
}
// Query heads per CTA (warps): the largest of 4, 2, 1 that divides the group (so every warp of a CTA
// reads the same kv head).
KVB_HD int heads_per_cta(int group) { return group % 4 == 0 ? 4 : group % 2 == 0 ? 2 : 1; }

// The key range a segment walks: rows at positions [pos_first, pos_last] attend keys [lo, pos_last] and,
// with a window, the sinks [0, sink); as key tiles: [0, sink_tiles) then [win_first, win_last].
struct KeyWalk {
  int sink_tiles, win_first, win_last;  // win_last < win_first: no window tiles
  KVB_HD int count() const { return sink_tiles + (win_last >= win_first ? win_last - win_first + 1 : 0); }
  KVB_HD int tile(int i) const { return i < sink_tiles ? i : win_first + i - sink_tiles; }
};
KVB_HD KeyWalk key_walk(int pos_first, int pos_last, int window, int sink, int bn) {
  KeyWalk w;
  const int lo = window > 0 ? (pos_first - window + 1 > 0 ? pos_first - window + 1 : 0) : 0;
  const int s = window > 0 ? (sink < lo ? sink : lo) : 0;  // sinks below the window start
  w.sink_tiles = (s + bn - 1) / bn;
  const int first = lo / bn;
  w.win_first = first > w.sink_tiles ? first : w.sink_tiles;
  w.win_last = pos_last < 0 ? -1 : pos_last / bn;
  return w;
}
// Is key t loaded for the segment (attended by some row in [pos_first, pos_last])? Others are zero-filled
// and their block ids never read.
KVB_HD bool key_needed(int t, int pos_first, int pos_last, int window, int sink) {
  const int lo = window > 0 ? pos_first - window + 1 : 0;
  return t >= 0 && t <= pos_last && (window <= 0 || t >= lo || t < sink);
}
// Does the query at position pos attend key t (the CPU reference's rule)?
KVB_HD bool attends(int t, int pos, int window, int sink) {
  return t <= pos && (window <= 0 || t > pos - window || t < sink);
}

// mma.sync m16n8k8 .tf32 fragments (PTX ISA), g = lane / 4, q = lane % 4:
// A a0..a3 = (row g, k q), (g + 8, q), (g, q + 4), (g + 8, q + 4); B b0, b1 = (k q, n g), (k q + 4, n g);
// C c0..c3 = (row g, n 2q), (g, 2q + 1), (g + 8, 2q), (g + 8, 2q + 1).
KVB_HD int frag_g(int lane) { return lane >> 2; }
KVB_HD int frag_q(int lane) { return lane & 3; }
// S = Q K^T, k-step kk (dims 8kk..8kk+7), key n-tile j: A register r of Q is (row a_row(lane, r), dim
// 8kk + a_col(lane, r)); B register r of K is key 8j + g, dim 8kk + q + 4r.
KVB_HD int a_row(int lane, int r) { return frag_g(lane) + (r & 1) * 8; }
KVB_HD int a_col(int lane, int r) { return frag_q(lane) + (r >> 1) * 4; }
KVB_HD int sk_key(int lane) { return frag_g(lane); }
KVB_HD int sk_dim(int lane, int r) { return frag_q(lane) + 4 * r; }
// O += P V, k-step j (keys 8j..8j+7), dim n-tile n: the A operand is P straight from S's accumulators
// of n-tile j, re-read as A (a0 = c0, a1 = c2, a2 = c1, a3 = c3): A column q then holds key 2q and
// column q + 4 key 2q + 1, so B register r of V is key 8j + pv_key(lane, r), dim 8n + g.
KVB_HD int pv_from_c(int r) { return r == 0 ? 0 : r == 1 ? 2 : r == 2 ? 1 : 3; }
KVB_HD int pv_key(int lane, int r) { return 2 * frag_q(lane) + r; }
KVB_HD int pv_dim(int lane) { return frag_g(lane); }
// Accumulator element e (0..3): row and column.
KVB_HD int c_row(int lane, int e) { return frag_g(lane) + (e >> 1) * 8; }
KVB_HD int c_col(int lane, int e) { return 2 * frag_q(lane) + (e & 1); }

}  // namespace f32tiles
}  // namespace kern
}  // namespace kvb
