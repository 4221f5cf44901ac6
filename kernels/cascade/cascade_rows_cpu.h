// The state that the shared-prefix loops (cascade_tile_cpu.inc on every vector path, cascade_amx_cpu.cpp with
// AMX tiles) share with their driver, kernels/cascade/cascade_cpu.cpp: the mask of a call and the online-softmax
// state of a block of query rows.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "../common/types.h"

namespace kvb {
namespace kern {
namespace cpu {
namespace casc {

constexpr int kKeyTile = 32;  // keys per tile (one AMX tile of P's bf16 pairs)

struct Mask {
  float soft_cap;
  int64_t window, sink;
  bool whole_rows;  // prefetch every kv head's rows of each token (see cascade_tile_cpu.inc)
};

// Per-thread state of R query rows (arrays 64-byte aligned). R4: R rounded up to 16 (the AMX row tiles),
// which the driver zeroes past R (finish_rows).
struct Rows {
  int64_t R = 0;
  float* q;      // [R4][D] pre-scaled queries
  float* acc;    // [R4][D]
  float* m;      // [R4]
  float* l;      // [R4]
  float* s;      // [R4][kKeyTile]
  float* kt;     // [D][kKeyTile]
  float* vt;     // [kKeyTile][D]
  int64_t* pos;  // [R4]
  uint64_t* tree_word;  // [R4] with a tree: the row's mask word (kvb_prefill_args.tree_mask)
  // Token tree of the rows' sequence: a key at draft0 + b below a row's own position is seen iff bit b of
  // its tree_word. Without a tree draft0 is past every key.
  int64_t draft0 = INT64_MAX;
  // The query scale (with an fp8 cache's K scale) goes on q (q_factor: the vector loops) or on the scores
  // (score_scale: the AMX loop, whose bf16 queries then stay exact: no low parts, q_bf16); the other is 1.
  float q_factor = 1.f, score_scale = 1.f;
  bool q_bf16 = false;

  static int64_t pad(int64_t n) { return (n + 15) / 16 * 16; }
  static size_t floats(int64_t RM, int64_t D) {
    return size_t(2 * pad(RM * D) + 2 * pad(RM) + pad(RM * kKeyTile) + 2 * pad(D * kKeyTile) + 4 * pad(RM));
  }
  Rows(float* base, int64_t RM, int64_t D) {
    q = base;
    acc = q + pad(RM * D);
    m = acc + pad(RM * D);
    l = m + pad(RM);
    s = l + pad(RM);
    kt = s + pad(RM * kKeyTile);
    vt = kt + pad(D * kKeyTile);
    pos = reinterpret_cast<int64_t*>(vt + pad(D * kKeyTile));
    tree_word = reinterpret_cast<uint64_t*>(pos + pad(RM));
  }
};

// The keys of [k0, k1) that some row of rw attends: up to two ranges (the sinks, then from the lowest
// window start), cut at the highest row position (causal).
struct KeyRanges {
  int64_t range[2][2];
  int nr = 0;
  int64_t pmin = INT64_MAX, pmax = -1, window, sink, lo_last, draft0;
  KeyRanges(const Rows& rw, int64_t k0, int64_t k1, const Mask& mk)
      : window(mk.window), sink(mk.window > 0 ? mk.sink : 0), draft0(rw.draft0) {
    for (int64_t r = 0; r < rw.R; ++r) {
      pmin = std::min(pmin, rw.pos[r]);
      pmax = std::max(pmax, rw.pos[r]);
    }
    k1 = std::min(k1, pmax + 1);  // causal: no row sees a key past its own position
    const int64_t lo_first = window > 0 ? std::max<int64_t>(0, pmin - window + 1) : 0;  // lowest window start
    lo_last = window > 0 ? std::max<int64_t>(0, pmax - window + 1) : 0;                  // highest window start
    if (k0 >= k1) return;
    if (sink >= lo_first) {
      range[nr][0] = k0, range[nr][1] = k1, ++nr;
    } else {
      if (k0 < sink) range[nr][0] = k0, range[nr][1] = std::min(sink, k1), ++nr;
      range[nr][0] = std::max(k0, lo_first), range[nr][1] = k1, ++nr;
    }
  }
  // Every row attends every key of [t0, t0 + n): no key past the lowest row position, none in
  // [sink, highest window start), none of a token tree's draft keys.
  bool full(int64_t t0, int64_t n) const {
    return t0 + n - 1 <= pmin && (window == 0 || std::max(t0, sink) >= std::min(t0 + n, lo_last)) && t0 + n <= draft0;
  }
};

// Runs rw's rows over keys [k0, k1) of one block table for kv head kvh (cascade_tile_cpu.inc).
using AttendFn = void (*)(const Cache&, int64_t, const int32_t*, int64_t, int64_t, const Mask&, Rows&);

}  // namespace casc
}  // namespace cpu
}  // namespace kern
}  // namespace kvb
