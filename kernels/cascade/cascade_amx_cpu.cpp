// The shared-prefix loop on AMX tiles (cascade_amx_cpu.h): for each tile of 32 keys, K and V rows are
// converted to fp32, split into bf16 high and low parts and packed (amx_tiles_cpu.h); the scores of every
// 32 (or 16) query rows are one set of TDPBF16PS products (q_hi.k_hi + q_lo.k_hi + q_hi.k_lo), the mask
// and online softmax stay fp32 on AVX-512 (cascade_softmax_cpu.inc), and P V is the same three products
// with P split likewise, accumulated into the rows' fp32 acc. The key ranges, masks and prefetching are
// those of cascade_tile_cpu.inc, so the results are the vector loops' up to the fp32 rounding of sums.
#include "cascade_amx_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "../common/amx_cpu.h"
#include "../common/amx_tiles_cpu.h"
#include "../common/convert_cpu.h"
#include "../common/simd_cpu.h"

namespace kvb {
namespace kern {
namespace cpu {
namespace casc {

#if KVB_AMX_BUILD

namespace {

// Per-thread operands: queries [R16][D] split in two; P of two key tiles [R16][64] split in two; K packed
// (both halves); V of two key tiles packed; the second tile's scores and the first tile's row maxima.
struct Scratch {
  std::vector<uint16_t> qh, ql, ph, pl;
  std::vector<uint32_t> kh, kl, vh, vl;
  std::vector<float> s2, m1;
  void fit(int64_t rows, int64_t D) {
    for (auto* v : {&qh, &ql})
      if (int64_t(v->size()) < rows * D) v->resize(size_t(rows * D));
    for (auto* v : {&ph, &pl})
      if (int64_t(v->size()) < 2 * rows * kKeyTile) v->resize(size_t(2 * rows * kKeyTile));
    for (auto* v : {&kh, &kl})
      if (int64_t(v->size()) < kKeyTile * D / 2) v->resize(size_t(kKeyTile * D / 2));
    for (auto* v : {&vh, &vl})
      if (int64_t(v->size()) < kKeyTile * D) v->resize(size_t(kKeyTile * D));
    if (int64_t(s2.size()) < rows * kKeyTile) s2.resize(size_t(rows * kKeyTile));
    if (int64_t(m1.size()) < rows) m1.resize(size_t(rows));
  }
};

Scratch& scratch() {
  static thread_local Scratch s;
  return s;
}

}  // namespace

KVB_SIMD_BEGIN_AVX512
namespace amx_loop {
#define KVB_SIMD_ISA 2
#include "../common/simd_vec_cpu.inc"
#include "cascade_softmax_cpu.inc"
#include "cascade_softmax_rows_cpu.inc"
#undef KVB_SIMD_ISA

static_assert(kKeyTile == amx::kKeys, "a key tile is one packed K / V tile set");

template <int D, Dtype DT>
void attend(const Cache& c, int64_t kvh, const int32_t* table, int64_t k0, int64_t k1, const Mask& mk, Rows& rw) {
  constexpr int64_t ES = es_of(DT);
  // bf16 and fp8 K and V rows have no low part (an fp8 value, even times 2^-8, is exact in bf16)
  constexpr bool kExact = DT != Dtype::f16;
  const KeyRanges kr(rw, k0, k1, mk);
  if (kr.nr == 0) return;
  const int64_t R16 = (rw.R + 15) / 16 * 16;
  Scratch& sc = scratch();
  sc.fit(R16, D);
  uint16_t* ql = rw.q_bf16 ? nullptr : sc.ql.data();
  amx::split_bf16(rw.q, R16 * D, sc.qh.data(), ql);  // rows past R are zero (finish_rows)
  const vf qscale = vsplat(rw.score_scale);
  uint32_t* kl = kExact ? nullptr : sc.kl.data();
  uint32_t* vl = kExact ? nullptr : sc.vl.data();
  float* kst = rw.kt;  // [kKeyTile][D] fp32 rows of the tile
  float* vst = rw.vt;
  const char* kbase = static_cast<const char*>(c.k) + kvh * c.head_stride * ES;
  const char* vbase = static_cast<const char*>(c.v) + kvh * c.head_stride * ES;
  // Prefetch as cascade_tile_cpu.inc: the next tile's rows, every kv head's with mk.whole_rows.
  const bool whole = mk.whole_rows && c.token_stride >= c.num_kv_heads * c.head_stride;
  const char* kpre = whole ? static_cast<const char*>(c.k) : kbase;
  const char* vpre = whole ? static_cast<const char*>(c.v) : vbase;
  const int64_t pre_bytes = whole ? c.num_kv_heads * c.head_stride * ES : D * ES;
  auto prefetch_tile = [&](int64_t p0, int64_t p1) {
    for (int64_t tok = p0; tok < p1; ++tok) {
      const int64_t off = c.seq_row(table, tok);
      for (int64_t o = 0; o < pre_bytes; o += 64) {
        __builtin_prefetch(kpre + off * ES + o);
        __builtin_prefetch(vpre + off * ES + o);
      }
    }
  };
  // P.V runs once per two key tiles (acc loaded and stored once for 64 keys): the first tile's P waits in
  // rw.s, its V in the first half of vh / vl, its row maxima in m1; the second tile's softmax rescales acc
  // where a row's maximum grew, and the waiting P likewise.
  const int64_t vtile = int64_t(kKeyTile) * D / 2;
  bool waiting = false;
  auto values = [&](int tiles) {
    for (int64_t r = 0; r < R16; ++r)
      for (int kt = 0; kt < tiles; ++kt)
        amx::split_bf16((kt ? sc.s2.data() : rw.s) + r * kKeyTile, kKeyTile, sc.ph.data() + (r * tiles + kt) * kKeyTile,
                        sc.pl.data() + (r * tiles + kt) * kKeyTile);
    for (int64_t r0 = 0; r0 < R16; r0 += 32)
      amx::tile_values(sc.ph.data() + r0 * tiles * kKeyTile, sc.pl.data() + r0 * tiles * kKeyTile, sc.vh.data(), vl,
                       D, int(std::min<int64_t>(32, R16 - r0)), rw.acc + r0 * D, tiles);
  };
  amx::tile_begin();
  for (int rg = 0; rg < kr.nr; ++rg) {
    const int64_t end = kr.range[rg][1];
    for (int64_t t0 = kr.range[rg][0]; t0 < end; t0 += kKeyTile) {
      const int n = int(std::min<int64_t>(kKeyTile, end - t0));
      if (t0 == kr.range[rg][0]) prefetch_tile(t0, std::min(end, t0 + kKeyTile));
      prefetch_tile(std::min(end, t0 + kKeyTile), std::min(end, t0 + 2 * kKeyTile));
      uint32_t* vdst = sc.vh.data() + (waiting ? vtile : 0);
      if constexpr (DT == Dtype::bf16 || DT == Dtype::f16) {
        // 16-bit rows: packed straight from the cache, fp16 split on the way (keys past n read a zero row).
        alignas(64) static const uint16_t zero[256] = {};
        const uint16_t* krows[kKeyTile];
        const uint16_t* vrows[kKeyTile];
        for (int t = 0; t < kKeyTile; ++t) {
          const int64_t off = t < n ? c.seq_row(table, t0 + t) : -1;
          krows[t] = off < 0 ? zero : reinterpret_cast<const uint16_t*>(kbase + off * ES);
          vrows[t] = off < 0 ? zero : reinterpret_cast<const uint16_t*>(vbase + off * ES);
        }
        amx::pack_keys_rows(krows, DT == Dtype::f16, D, sc.kh.data(), kl);
        amx::pack_values_rows(vrows, DT == Dtype::f16, D, vdst, vl ? vl + (waiting ? vtile : 0) : nullptr);
      } else {
        for (int t = 0; t < n; ++t) {
          const int64_t off = c.seq_row(table, t0 + t);
          const char* kp = kbase + off * ES;
          const char* vp = vbase + off * ES;
          for (int d = 0; d < D; d += W) {
            vstore(kst + t * D + d, load_kv<DT>(kp + d * ES));
            vstore(vst + t * D + d, load_kv<DT>(vp + d * ES));
          }
        }
        // Keys past n: zero K (scored, then masked) and zero V (p is 0 there, and 0 * V must stay 0).
        std::memset(kst + n * D, 0, sizeof(float) * size_t((kKeyTile - n) * D));
        std::memset(vst + n * D, 0, sizeof(float) * size_t((kKeyTile - n) * D));
        amx::pack_keys(kst, D, D, sc.kh.data(), kl);
        amx::pack_values(vst, D, D, vdst, vl ? vl + (waiting ? vtile : 0) : nullptr);
      }
      float* sp = waiting ? sc.s2.data() : rw.s;
      for (int64_t r0 = 0; r0 < R16; r0 += 32)
        amx::tile_scores(sc.qh.data() + r0 * D, ql ? ql + r0 * D : nullptr, D, D, sc.kh.data(), kl,
                         int(std::min<int64_t>(32, R16 - r0)), sp + r0 * kKeyTile);
      for (int64_t i = 0; i < R16 * kKeyTile; i += W) vstore(sp + i, vload(sp + i) * qscale);
      const bool full = kr.full(t0, n);
      softmax_tile_rows<D>(rw, sp, R16, n, t0, full, mk);
      if (!waiting) {
        std::memcpy(sc.m1.data(), rw.m, sizeof(float) * size_t(R16));
        waiting = true;
        continue;
      }
      for (int64_t r = 0; r < rw.R; ++r)
        if (rw.m[r] != sc.m1[r]) {  // (the row's acc got the same factor)
          const vf al = vsplat(std::exp2(sc.m1[r] - rw.m[r]));
          for (int i = 0; i < kKeyTile; i += W) vstore(rw.s + r * kKeyTile + i, vload(rw.s + r * kKeyTile + i) * al);
        }
      values(2);
      waiting = false;
    }
  }
  if (waiting) values(1);
  amx::tile_end();
}

template <int D>
AttendFn pick_dtype(Dtype dt) {
  switch (dt) {
    case Dtype::f16: return attend<D, Dtype::f16>;
    case Dtype::bf16: return attend<D, Dtype::bf16>;
    case Dtype::e4m3: return attend<D, Dtype::e4m3>;
    case Dtype::e5m2: return attend<D, Dtype::e5m2>;
    default: return nullptr;
  }
}

}  // namespace amx_loop
KVB_SIMD_END

AttendFn amx_attend(int64_t D, Dtype dt) {
  switch (D) {
    case 64: return amx_loop::pick_dtype<64>(dt);
    case 128: return amx_loop::pick_dtype<128>(dt);
    case 256: return amx_loop::pick_dtype<256>(dt);
    default: return nullptr;
  }
}

#else

AttendFn amx_attend(int64_t, Dtype) { return nullptr; }

#endif

}  // namespace casc
}  // namespace cpu
}  // namespace kern
}  // namespace kvb
