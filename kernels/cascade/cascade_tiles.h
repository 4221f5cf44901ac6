// The work list of the CUDA tensor-core shared-prefix kernel (kernels/cascade/cascade_mma.cu) as plain
// functions, compiled into the kernel (__host__ __device__) and into a CPU test
// (tests/cpp/kernels_cascade_tiles.cpp) that checks, without a GPU, that the CTAs of a description cover
// every (member query row, head, shared key) and every (query row, head, own key) exactly once.
//
// Packed rows. A group's shared part is one non-causal "virtual sequence" whose query rows are gathered
// from its members: member k (description order) contributes q_len(members[k]) x G packed rows
// (token-major: packed row j G + h is its query row j, head h of the kv head's G query heads), so that
// 256 decode members x 4 GQA heads fill 16 tiles of 64 rows that read the shared keys once each. The
// row counts depend on query_start, which lives on the device: each CTA rebuilds the prefix sums from it
// (member_rows) rather than the host reading it, and the host launches an upper bound of tiles
// (shared_tile_bound); surplus CTAs return. A sequence's own keys (prefill / extend) are tiled as the
// plain prefill tiles them (tile_base over query_start), with kTileRows rows per tile.
#pragma once
#include <cstdint>

#include "../prefill/prefill_tiles.h"

namespace kvb {
namespace kern {
namespace ctiles {

constexpr int kTileRows = 64;  // packed rows per CTA: 4 warps x one 16-row m-tile
constexpr int kWarps = 4;
// Keys per tile: D 256 has no registers for a 64-key S beside its 128-float O.
KVB_HD constexpr int key_tile(int head_dim) { return head_dim == 256 ? 32 : 64; }

// Upper bound of the shared tiles of any description whose members hold total_q query rows in all:
// sum over groups of ceil(rows_g / T) <= floor(sum rows_g / T) + num_groups.
KVB_HD int64_t shared_tile_bound(int64_t total_q, int group, int64_t num_groups) {
  return total_q * group / kTileRows + num_groups;
}
// Own tiles (prefill / extend): the plain prefill's count for kTileRows-row tiles.
KVB_HD int64_t own_tile_count(int64_t total_q, int group, int64_t num_seqs) {
  return total_q * group / kTileRows + num_seqs;
}

// From the member row counts (packed rows, description order) the exclusive prefix mrow[0..n] and,
// per group, its packed rows grows[g] and first tile tbase[g] (tbase[num_groups] = tiles in all).
// Serial: the kernel runs the group part on one thread over at most 32 groups.
KVB_HD void group_tiles(const int* mrow, const int* group_start, int num_groups, int* grows, int* tbase) {
  int t = 0;
  for (int g = 0; g < num_groups; ++g) {
    grows[g] = mrow[group_start[g + 1]] - mrow[group_start[g]];
    tbase[g] = t;
    t += tiles::ceil_div(grows[g], kTileRows);
  }
  tbase[num_groups] = t;
}

// Shared tile `tile`: group (-1 for a surplus CTA), its first packed row within the group, row count.
struct SharedTile {
  int group, row0, rows;
};
KVB_HD SharedTile shared_tile(const int* tbase, const int* grows, int num_groups, int tile) {
  SharedTile s{-1, 0, 0};
  if (num_groups <= 0 || tile < 0 || tile >= tbase[num_groups]) return s;
  int lo = 0, hi = num_groups - 1;  // the last g with tbase[g] <= tile (empty groups share a base)
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (tbase[mid] <= tile) lo = mid; else hi = mid - 1;
  }
  s.group = lo;
  s.row0 = (tile - tbase[lo]) * kTileRows;
  s.rows = tiles::imin(kTileRows, grows[lo] - s.row0);
  return s;
}

// Packed row `packed` of the group whose members are [m0, m1): member index, its query row j, head h
// (within the kv head's G). The member is the last k in [m0, m1) with mrow[k] <= mrow[m0] + packed, so
// members with no rows are skipped.
struct RowRef {
  int member, j, h;
};
KVB_HD RowRef row_of(const int* mrow, int m0, int m1, int group, int packed) {
  const int target = mrow[m0] + packed;
  int lo = m0, hi = m1 - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (mrow[mid] <= target) lo = mid; else hi = mid - 1;
  }
  const int local = target - mrow[lo];
  return RowRef{lo, local / group, local % group};
}

// Keys [k0, k1) of split `split` of the range [begin, end) cut every split_tokens tokens (empty past it).
struct KeyRange {
  int k0, k1;
};
KVB_HD KeyRange split_range(int begin, int end, int split, int split_tokens) {
  const int64_t a = int64_t(begin) + int64_t(split) * split_tokens;
  if (a >= end) return KeyRange{end, end};
  const int64_t b = a + split_tokens;
  return KeyRange{int(a), int(b < end ? b : end)};
}

// The key tiles (bn keys from k0: tile i is [k0 + i bn, k0 + i bn + bn)) a CTA walks for rows at
// positions [pos_min, pos_max] over keys [k0, k1): the tiles holding sinks, then those from the first
// window key of the lowest row (pos_min - window + 1) to pos_max. A key no row attends (past every
// position, or in every row's window gap) is never walked; tiles are masked per row (full() says when
// no mask is needed). pos_max < 0 (no valid row): nothing.
struct Walk {
  int k0, k1, bn, a1, b0, b1;  // tiles [0, a1) then [b0, b1)
  int pos_min, pos_max, window, sink;
  KVB_HD int count() const { return a1 + tiles::imax(0, b1 - b0); }
  KVB_HD int tile(int i) const { return i < a1 ? i : b0 + (i - a1); }
  KVB_HD int first_key(int i) const { return k0 + tile(i) * bn; }
  // Every row attends every key of the tile (and the tile lies inside [k0, k1)).
  KVB_HD bool full(int i) const {
    const int a = first_key(i), z = a + bn - 1;
    return z < k1 && z <= pos_min && (window <= 0 || a > pos_max - window || z < sink);
  }
};
KVB_HD Walk walk(int k0, int k1, int bn, int pos_min, int pos_max, int window, int sink) {
  Walk w;
  w.k0 = k0, w.k1 = k1, w.bn = bn, w.pos_min = pos_min, w.pos_max = pos_max;
  w.window = window, w.sink = window > 0 ? sink : 0;
  const int kend = tiles::imin(k1, pos_max + 1);  // keys past every row are never walked
  const int n = kend > k0 ? tiles::ceil_div(kend - k0, bn) : 0;
  if (window <= 0) {
    w.a1 = 0, w.b0 = 0, w.b1 = n;
    return w;
  }
  const int lo_min = tiles::imax(0, pos_min - window + 1);  // below it only sinks are attended
  const int sink_end = tiles::imin(w.sink, lo_min);
  w.a1 = tiles::imin(n, sink_end > k0 ? tiles::ceil_div(sink_end - k0, bn) : 0);
  w.b0 = tiles::imax(w.a1, lo_min > k0 ? (lo_min - k0) / bn : 0);
  w.b1 = n;
  return w;
}

// Workspace part of (query row, head): parts_per_row = shared splits then own splits.
KVB_HD int64_t part_index(int row, int head, int num_q_heads, int parts_per_row, int part) {
  return (int64_t(row) * num_q_heads + head) * parts_per_row + part;
}

}  // namespace ctiles
}  // namespace kern
}  // namespace kvb
