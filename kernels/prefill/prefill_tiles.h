// The CUDA prefill kernel's work decomposition and fragment addressing as plain functions, compiled
// both into the kernel (__host__ __device__) and into a CPU test (tests/cpp/kernels_prefill_tiles.cpp)
// that checks, without a GPU, that the CTAs of a ragged batch cover every (query row, attended key)
// pair exactly once and mask exactly where needed, and that the swizzled ldmatrix / mma fragment
// addressing computes Q K^T and P V (on an emulated warp). Positions and counts are int.
#pragma once
#include <cstdint>

#include "../common/host_device.h"

namespace kvb {
namespace kern {
namespace tiles {

KVB_HD int imax(int a, int b) { return a > b ? a : b; }
KVB_HD int imin(int a, int b) { return a < b ? a : b; }
// ceil(a / b) for a >= 0, b > 0 without forming a + b - 1: positions reach 2^31 - 2, where that wraps.
KVB_HD int ceil_div(int a, int b) { return a / b + (a % b != 0); }

// First tile of sequence i: floor(query_start[i] * group / rows_per_tile) + i (see kvblock.h).
KVB_HD int64_t tile_base(int32_t query_start_i, int i, int group, int rows_per_tile) {
  return int64_t(query_start_i) * group / rows_per_tile + i;
}

// The sequence owning tile `tile`: the last i in [0, num_seqs) with tile_base(i) <= tile.
KVB_HD int seq_of_tile(const int32_t* query_start, int num_seqs, int group, int rows_per_tile, int tile) {
  int lo = 0, hi = num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (tile_base(query_start[mid], mid, group, rows_per_tile) <= tile) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// Tile `tile` of the grid as a tile of sequence seq (0 = its first 128 packed rows). Walked backwards
// (reverse): with a causal mask a sequence's last tiles attend the most keys, and the GPU starts CTAs
// roughly in grid order, so the longest CTAs start first and the short ones fill the tail of the
// last wave. Sequence seq owns [tile_base(seq), tile_base(seq + 1)); a valid query_start[seq + 1]
// is needed for reverse (the kernel walks a faulty sequence forwards, as before).
KVB_HD int64_t local_tile(const int32_t* query_start, int seq, int group, int rows_per_tile, int tile, bool reverse) {
  return reverse ? tile_base(query_start[seq + 1], seq + 1, group, rows_per_tile) - 1 - tile
                 : tile - tile_base(query_start[seq], seq, group, rows_per_tile);
}

// The (query tile, kv head) of CTA x of the grid, kv head fastest: the GPU starts CTAs roughly in
// grid order, so with local_tile's reverse walk every kv head's longest tiles start in the first wave
// (with the tile fastest, kv head 7's longest tiles of a single long prompt started in the last wave
// and ran alone at the end).
struct CtaTile {
  int tile, kv_head;
};
KVB_HD CtaTile cta_tile(int x, int num_kv_heads) {
  CtaTile c;
  c.tile = x / num_kv_heads;
  c.kv_head = x - c.tile * num_kv_heads;
  return c;
}

// Does a query at position pos attend key position key?
KVB_HD bool attends(int key, int pos, int window, int sink) {
  return key <= pos && (window <= 0 || key > pos - window || key < sink);
}

// The tree part of the mask (kvb_prefill_args.tree_mask) for a key the row attends causally: keys before
// the new ones (base) and the row itself are seen, a new key below the row by its bit of the row's word.
KVB_HD bool tree_sees(int key, int pos, int base, uint64_t word) {
  return key < base || key == pos || ((word >> ((key - base) & 63)) & 1) != 0;
}


// The key tiles (of bn tokens) a CTA walks for query positions [pos_first, pos_last] within key split
// `split` of split_tiles tiles: the sinks [a0, a1), then the window [b0, b1); count() tiles in all.
struct KeyTiles {
  int a0, a1, b0, b1;
  int pos_first, pos_last, lo_first, lo_last, window, sink, bn;
  KVB_HD int count() const { return imax(0, a1 - a0) + imax(0, b1 - b0); }
  KVB_HD int tile(int i) const { return i < imax(0, a1 - a0) ? a0 + i : b0 + i - imax(0, a1 - a0); }
  // Every row of the CTA attends every key of tile t: no mask needed.
  KVB_HD bool full(int t) const {
    const int k0 = t * bn;
    return k0 + bn - 1 <= pos_first && (window <= 0 || imax(k0, sink) >= imin(k0 + bn, lo_last));
  }
  // Keys from `key` on go through the mask in every tile that holds one (a token tree's new keys, whose
  // rows see them by their words): no tile reaching them is full.
  KVB_HD void mask_from(int key) { pos_first = imin(pos_first, key - 1); }
};

KVB_HD KeyTiles key_tiles(int pos_first, int pos_last, int window, int sink, int bn, int split, int split_tiles) {
  KeyTiles k;
  k.pos_first = pos_first, k.pos_last = pos_last, k.window = window, k.bn = bn;
  k.sink = window > 0 ? sink : 0;
  k.lo_first = window > 0 ? imax(0, pos_first - window + 1) : 0;
  k.lo_last = window > 0 ? imax(0, pos_last - window + 1) : 0;
  const int s0 = split * split_tiles, s1 = s0 + split_tiles;
  const int sink_eff = imin(k.sink, k.lo_first);
  k.a0 = imax(0, s0);
  k.a1 = imin(ceil_div(sink_eff, bn), s1);
  k.b0 = imax(imax(k.lo_first / bn, ceil_div(sink_eff, bn)), s0);
  k.b1 = imin(pos_last / bn + 1, s1);
  return k;
}

// CTA shape per head dim: kPrefillTileRows (128) packed rows = warps x m-tiles per warp x 16. Two
// m-tiles per warp (D 64 / 128) let each K / V fragment loaded by ldmatrix feed two mma.sync, halving
// shared-memory reads per MMA and giving the warp twice the independent MMAs; D 256 has no registers
// for a second m-tile of O (2 x 128 floats), so it takes 8 warps of one.
KVB_HD constexpr int cta_warps(int head_dim) { return head_dim == 256 ? 8 : 4; }
KVB_HD constexpr int mtiles_per_warp(int head_dim) { return head_dim == 256 ? 1 : 2; }
// The 16-row m-tile of the CTA that m-tile mi of warp w computes (rows 16 m .. 16 m + 15).
KVB_HD int mtile_of(int warp, int mi, int mtiles) { return warp * mtiles + mi; }

// K / V (and block offset) double buffers: key tile i of the walk lives in stage i & 1. Iteration i
// waits for all its copies, then one barrier (tile i visible; every warp done with tile i - 1, the
// last reader of stage (i + 1) & 1), then issues tile i + 1 and computes tile i; block offsets of
// tile i + 2 are written after that compute (their stage's last reader, load_kv(i), ran before the barrier).
KVB_HD int kv_stage(int i) { return i & 1; }

// Online softmax with a lazy row max. The reference max m (raw logits, before the scale qs in log2
// units) moves to a tile's max mx only when qs (mx - m) exceeds kMaxSlackLog2 (or m is still -inf):
// the exponents qs x - qs m then reach at most 2^8 = 256, harmless in the fp32 sums and in the
// fp16 / bf16 P fed to the MMA (floating point, so no precision is lost), and the final O / l is the
// same softmax for any reference. Once a row's first tiles have set m, later tiles almost never move
// it, so the kernel's warp vote skips the row-max shuffles and the D / 2 multiplies per row pair that
// rescale O (and the sum) on nearly every tile, not only once the exact max has settled. A NaN tile
// max leaves m alone (the NaN still reaches the output through its exponent); all -inf (masked so
// far) leaves -inf. The slack in raw units is computed once (qs > 0) and kept finite, so a first
// finite max always moves m from -inf.
constexpr float kMaxSlackLog2 = 8.f;
KVB_HD float max_slack_raw(float qs) {
  const float t = kMaxSlackLog2 / qs;
  return t < 3.0e38f ? t : 3.0e38f;
}
KVB_HD bool row_max_moves(float m, float mx, float slack_raw) { return mx - m > slack_raw; }

// Shared-memory tiles and mma.sync m16n8k16 fragments of one warp (16 query rows). Tiles are row-major
// [rows][C chunks of 16 bytes] with chunk c of row r stored at chunk c ^ (r & 7). A ldmatrix.x4 takes
// one row address per lane: lanes 8j..8j+7 give rows 0..7 of matrix j, and matrix j lands in register
// j of every lane. These say which row and chunk each lane addresses; the m16n8k16 layouts (PTX ISA:
// A a0..a3 = rows g / g+8 x k 2c.. / 2c+8.., B b0/b1 = k 2c.. / 2c+8.. x n g, C c0..c3 = rows g / g+8
// x n 2c, 2c+1, with g = lane / 4, c = lane % 4) then place the values.
namespace frag {

KVB_HD uint32_t swz(int chunks_per_row, int r, int c) { return uint32_t((r * chunks_per_row + (c ^ (r & 7))) * 16); }

// Q as the A operand of S = Q K^T, k-step kk (dims 16kk..16kk+15): matrices (rows 0-7, 8-15) x (k lo, hi).
KVB_HD int q_row(int warp, int lane) { return warp * 16 + (lane & 15); }
KVB_HD int q_chunk(int kk, int lane) { return 2 * kk + (lane >> 4); }
// K (rows = keys) as the B operand, keys 16n2..16n2+15, k-step kk: matrices (keys 0-7: k lo, hi),
// (keys 8-15: k lo, hi), i.e. b0 b1 of n-tile 2 n2, then of 2 n2 + 1.
KVB_HD int k_row(int n2, int lane) { return n2 * 16 + ((lane >> 4) << 3) + (lane & 7); }
KVB_HD int k_chunk(int kk, int lane) { return 2 * kk + ((lane >> 3) & 1); }
// V (rows = keys) as the B operand of O += P V through ldmatrix.trans, keys 16kk.., dims 16 d2..:
// matrices (keys 0-7, 8-15) x (dim chunk 2 d2, 2 d2 + 1), i.e. b0 b1 of d-tile 2 d2, then 2 d2 + 1.
KVB_HD int v_row(int kk, int lane) { return kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7); }
KVB_HD int v_chunk(int d2, int lane) { return 2 * d2 + (lane >> 4); }
// Accumulator element e (0..3) of an n-tile: row of the warp's 16 and column within the 8.
KVB_HD int c_row(int lane, int e) { return (lane >> 2) + (e >> 1) * 8; }
KVB_HD int c_col(int lane, int e) { return 2 * (lane & 3) + (e & 1); }
// The output is staged in the (swizzled) Q tile so that it leaves in 16-byte stores: the pair
// (e = 2 half, 2 half + 1) of d-tile dt of m-tile mt goes to this byte; row r's chunk c is then read back
// at swz(C, r, c).
KVB_HD uint32_t o_stage(int chunks_per_row, int mt, int lane, int half, int dt) {
  return swz(chunks_per_row, mt * 16 + c_row(lane, 2 * half), dt) + uint32_t(4 * (lane & 3));
}

// The same addresses as one per-lane base plus what the unrolled loops add: in a swizzled tile whose
// rows are C >= 8 chunks (a power of two), chunk 2 j + b (b = 0, 1 from the lane) of row r sits at
// (r C + (b ^ (r & 7))) 16 ^ 32 j, and 16 rows further is + 16 C 16. So each ldmatrix needs at most one
// XOR of a per-lane register with a constant, the rest being the instruction's immediate offset
// (valid when the tile starts at a multiple of 16 C bytes; the kernel aligns shared memory to 1 KiB).
KVB_HD uint32_t q_base(int chunks_per_row, int mt, int lane) { return swz(chunks_per_row, q_row(mt, lane), q_chunk(0, lane)); }
KVB_HD uint32_t q_addr(uint32_t base, int kk) { return base ^ uint32_t(32 * kk); }
KVB_HD uint32_t k_base(int chunks_per_row, int lane) { return swz(chunks_per_row, k_row(0, lane), k_chunk(0, lane)); }
KVB_HD uint32_t k_addr(int chunks_per_row, uint32_t base, int n2, int kk) {
  return (base ^ uint32_t(32 * kk)) + uint32_t(n2 * 16 * chunks_per_row * 16);
}
KVB_HD uint32_t v_base(int chunks_per_row, int lane) { return swz(chunks_per_row, v_row(0, lane), v_chunk(0, lane)); }
KVB_HD uint32_t v_addr(int chunks_per_row, uint32_t base, int kk, int d2) {
  return (base ^ uint32_t(32 * d2)) + uint32_t(kk * 16 * chunks_per_row * 16);
}

}  // namespace frag

}  // namespace tiles
}  // namespace kern
}  // namespace kvb
