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
#include "../common/simd_cpu.h"

namespace kvb {
namespace kern {
namespace cpu {
namespace casc {

#if KVB_AMX_BUILD

namespace {

// Per-thread bf16 operands: queries [R16][D] and P [R16][32] split in two; K and V packed, two halves.
struct Scratch {
  std::vector<uint16_t> qh, ql, ph, pl;
  std::vector<uint32_t> kh, kl, vh, vl;
  void fit(int64_t rows, int64_t D) {
    for (auto* v : {&qh, &ql})
      if (int64_t(v->size()) < rows * D) v->resize(size_t(rows * D));
    for (auto* v : {&ph, &pl})
      if (int64_t(v->size()) < rows * kKeyTile) v->resize(size_t(rows * kKeyTile));
    for (auto* v : {&kh, &kl, &vh, &vl})
      if (int64_t(v->size()) < kKeyTile * D / 2) v->resize(size_t(kKeyTile * D / 2));
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

template <Dtype DT>
inline vf load_kv(const char* p) {
  if constexpr (DT == Dtype::f16)
    return load_f16(p);
  else
    return load_bf16(p);
}

template <int D, Dtype DT>
void attend(const Cache& c, int64_t kvh, const int32_t* table, int64_t k0, int64_t k1, const Mask& mk, Rows& rw) {
  constexpr int64_t ES = 2;
  constexpr bool kExact = DT == Dtype::bf16;  // bf16 K and V rows have no low part
  const KeyRanges kr(rw, k0, k1, mk);
  if (kr.nr == 0) return;
  const int64_t R16 = (rw.R + 15) / 16 * 16;
  Scratch& sc = scratch();
  sc.fit(R16, D);
  amx::split_bf16(rw.q, R16 * D, sc.qh.data(), sc.ql.data());  // rows past R are zero (finish_rows)
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
  amx::tile_begin();
  for (int rg = 0; rg < kr.nr; ++rg) {
    const int64_t end = kr.range[rg][1];
    for (int64_t t0 = kr.range[rg][0]; t0 < end; t0 += kKeyTile) {
      const int n = int(std::min<int64_t>(kKeyTile, end - t0));
      if (t0 == kr.range[rg][0]) prefetch_tile(t0, std::min(end, t0 + kKeyTile));
      prefetch_tile(std::min(end, t0 + kKeyTile), std::min(end, t0 + 2 * kKeyTile));
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
      amx::pack_values(vst, D, D, sc.vh.data(), vl);
      for (int64_t r0 = 0; r0 < R16; r0 += 32)
        amx::tile_scores(sc.qh.data() + r0 * D, sc.ql.data() + r0 * D, D, D, sc.kh.data(), kl,
                         int(std::min<int64_t>(32, R16 - r0)), rw.s + r0 * kKeyTile);
      const bool full = kr.full(t0, n);
      softmax_tile_rows<D>(rw, rw.s, R16, n, t0, full, mk);
      amx::split_bf16(rw.s, R16 * kKeyTile, sc.ph.data(), sc.pl.data());
      for (int64_t r0 = 0; r0 < R16; r0 += 32)
        amx::tile_values(sc.ph.data() + r0 * kKeyTile, sc.pl.data() + r0 * kKeyTile, sc.vh.data(), vl, D,
                         int(std::min<int64_t>(32, R16 - r0)), rw.acc + r0 * D);
    }
  }
  amx::tile_end();
}

template <int D>
AttendFn pick_dtype(Dtype dt) {
  switch (dt) {
    case Dtype::f16: return attend<D, Dtype::f16>;
    case Dtype::bf16: return attend<D, Dtype::bf16>;
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
