// Shared by the fp8 attention tests (kernels_fp8.cpp: CPU; kernels_fp8_cuda.cpp: CUDA): an independent
// reference of the two formats (from their definitions, in double) and one attention problem on a paged
// fp8 cache with its float64 reference on the dequantized and on the unquantized values.
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "kernels_util.h"

namespace fp8t {

using namespace kt;

// ---- independent reference: the formats from their definitions, in double ----

struct Format {
  bool e5m2;
  int man_bits, bias;
  uint8_t max_code;  // largest finite magnitude code
};
const Format kE4m3{false, 3, 7, 0x7e};
const Format kE5m2{true, 2, 15, 0x7b};

bool ref_is_nan(const Format& f, uint8_t c) {
  const uint8_t m = c & 0x7f;
  return f.e5m2 ? m > 0x7c : m == 0x7f;
}

// Value of a code from sign / exponent / mantissa fields; NaN codes give NaN, e5m2 0x7c gives inf.
double ref_decode(const Format& f, uint8_t c) {
  if (ref_is_nan(f, c)) return std::numeric_limits<double>::quiet_NaN();
  const double sign = (c & 0x80) ? -1.0 : 1.0;
  const int m = c & ((1 << f.man_bits) - 1), e = (c & 0x7f) >> f.man_bits;
  if (f.e5m2 && e == 31) return sign * std::numeric_limits<double>::infinity();
  const double frac = double(m) / double(1 << f.man_bits);
  if (e == 0) return sign * std::ldexp(frac, 1 - f.bias);
  return sign * std::ldexp(1.0 + frac, e - f.bias);
}

// The stored code for x by the header's rule: nearest finite code (ties to the even code), saturated.
uint8_t ref_encode(const Format& f, float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  if (std::isnan(x)) return uint8_t(sign | 0x7f);
  const double a = std::fabs(double(x));
  if (a >= ref_decode(f, f.max_code)) return uint8_t(sign | f.max_code);
  uint8_t lo = 0;  // largest code with value <= a
  while (lo < f.max_code && ref_decode(f, uint8_t(lo + 1)) <= a) ++lo;
  if (ref_decode(f, lo) == a) return uint8_t(sign | lo);
  const double dlo = a - ref_decode(f, lo), dhi = ref_decode(f, uint8_t(lo + 1)) - a;
  const uint8_t pick = dlo < dhi ? lo : dhi < dlo ? uint8_t(lo + 1) : ((lo & 1) ? uint8_t(lo + 1) : lo);
  return uint8_t(sign | pick);
}


// ---- attention on fp8 caches ----

struct Seq {
  int32_t len, q_len;
};

// One attention configuration: cache and query dtypes, kv heads, GQA group, head dim, per-head scales,
// window + sinks, soft cap.
struct AttnCase {
  uint32_t cd, qd, H, G, D;
  bool per_head;
  uint32_t window, sink;
  float cap;
};

// One problem: a paged fp8 cache written by kvb_write_kv from fp32 values, the dequantized values read
// back through the reference decoder, and q in q_dtype.
struct Fp8Problem {
  uint32_t cd, qd, H, G, D, bs;
  bool per_head;
  std::vector<Seq> seqs;
  HostCache cache;
  std::vector<float> kh, vh;  // per-head scales
  std::vector<int32_t> tables, lens, qstart;
  uint32_t max_blocks = 0, total_q = 0;
  std::vector<std::vector<float>> kraw, vraw;  // [seq][t*H*D]
  Tensor q;

  Fp8Problem(uint32_t cdt, uint32_t qdt, uint32_t heads, uint32_t group, uint32_t head_dim, bool ph,
             std::vector<Seq> ss, unsigned seed)
      : cd(cdt), qd(qdt), H(heads), G(group), D(head_dim), bs(16), per_head(ph), seqs(std::move(ss)),
        cache(cdt, 1, 16, heads, head_dim) {
    std::mt19937 rng(seed);
    uint32_t blocks = 0;
    for (const Seq& s : seqs) {
      max_blocks = std::max(max_blocks, uint32_t((s.len + bs - 1) / bs));
      blocks += uint32_t((s.len + bs - 1) / bs);
    }
    max_blocks = std::max(max_blocks, 1u);
    cache = HostCache(cd, blocks + 3, bs, H, D);
    cache.desc.k_scale = 0.02f;  // |x| <= 4 -> |x / scale| up to 200: inside e4m3's range
    cache.desc.v_scale = 0.05f;
    for (uint32_t h = 0; h < H; ++h) {
      kh.push_back(0.01f * float(h + 1));
      vh.push_back(0.03f / float(h + 1));
    }
    if (per_head) {
      cache.desc.k_head_scales = kh.data();
      cache.desc.v_head_scales = vh.data();
    }
    std::vector<int32_t> ids(blocks + 3);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    tables.assign(seqs.size() * max_blocks, -1);
    size_t next = 0;
    qstart.push_back(0);
    std::uniform_real_distribution<float> u(-2.f, 2.f);
    for (size_t s = 0; s < seqs.size(); ++s) {
      const Seq& sq = seqs[s];
      for (int32_t b = 0; b * int32_t(bs) < sq.len; ++b) tables[s * max_blocks + b] = ids[next++];
      lens.push_back(sq.len);
      qstart.push_back(qstart.back() + sq.q_len);
      std::vector<float> kv(size_t(sq.len) * H * D), vv(kv.size());
      for (float& x : kv) x = u(rng);
      for (float& x : vv) x = u(rng) * 1.5f;
      std::vector<int64_t> slots(size_t(sq.len));
      for (int32_t t = 0; t < sq.len; ++t) slots[t] = int64_t(tables[s * max_blocks + t / bs]) * bs + t % bs;
      if (sq.len > 0) {
        kvb_write_kv_args a;
        kvb_write_kv_args_init(&a);
        a.input_dtype = KVB_DTYPE_FP32;
        a.num_tokens = size_t(sq.len);
        a.key = kv.data();
        a.value = vv.data();
        a.slot_mapping = slots.data();
        CHECK_OK(kvb_write_kv(&cache.desc, &a, nullptr));
      }
      kraw.push_back(std::move(kv));
      vraw.push_back(std::move(vv));
    }
    total_q = uint32_t(qstart.back());
    q = Tensor(qd, size_t(std::max(total_q, 1u)) * H * G * D);
    q.fill_random(rng, -1.f, 1.f);
  }

  // Cache value of (seq, t, head, d): dequantized (the kernel's input) or the unquantized original.
  double kval(size_t s, int32_t t, uint32_t h, uint32_t d, bool dequant) const { return val(cache.k, s, t, h, d, dequant, true); }
  double vval(size_t s, int32_t t, uint32_t h, uint32_t d, bool dequant) const { return val(cache.v, s, t, h, d, dequant, false); }
  double val(const Tensor& tn, size_t s, int32_t t, uint32_t h, uint32_t d, bool dequant, bool is_k) const {
    if (!dequant) return (is_k ? kraw : vraw)[s][(size_t(t) * H + h) * D + d];
    const Format& f = cd == KVB_DTYPE_FP8_E5M2 ? kE5m2 : kE4m3;
    const uint8_t code = static_cast<const uint8_t*>(tn.data())[cache.offset(tables[s * max_blocks + t / bs], t % bs, h, d)];
    const double scale = per_head ? (is_k ? kh : vh)[h] : (is_k ? cache.desc.k_scale : cache.desc.v_scale);
    return ref_decode(f, code) * scale;
  }

  // Reference output row for query row r of sequence s (position pos), query head qh.
  void ref_row(size_t s, int64_t row, int32_t pos, uint32_t qh, float scale, float cap, uint32_t window, uint32_t sink,
               bool dequant, double* out) const {
    const uint32_t h = qh / G;
    std::vector<double> logits;
    std::vector<int32_t> ts;
    for (int32_t t = 0; t <= pos; ++t) {
      if (window > 0 && t <= pos - int32_t(window) && t >= int32_t(sink)) continue;
      double dot = 0;
      for (uint32_t d = 0; d < D; ++d) dot += double(q.get((size_t(row) * H * G + qh) * D + d)) * kval(s, t, h, d, dequant);
      double x = dot * scale;
      if (cap > 0) x = cap * std::tanh(x / cap);
      logits.push_back(x);
      ts.push_back(t);
    }
    double mx = -INFINITY, sum = 0;
    for (double x : logits) mx = std::max(mx, x);
    for (uint32_t d = 0; d < D; ++d) out[d] = 0;
    for (size_t i = 0; i < logits.size(); ++i) sum += std::exp(logits[i] - mx);
    for (size_t i = 0; i < logits.size(); ++i) {
      const double p = std::exp(logits[i] - mx) / sum;
      for (uint32_t d = 0; d < D; ++d) out[d] += p * vval(s, ts[i], h, d, dequant);
    }
  }
};

// Decode / prefill arguments for p under case cs on p's host arrays, writing out (a CUDA run points q,
// out and the index arrays at device copies). The fields both argument structs have, set once:
template <class Args>
void set_common_args(Args& a, const Fp8Problem& p, const AttnCase& cs, void* out) {
  a.q_dtype = cs.qd;
  set_paged(a, uint32_t(p.seqs.size()), cs.H * cs.G, p.max_blocks, p.q.data(), out, p.tables.data(), p.lens.data());
  set_mask(a, cs.cap, cs.window, cs.sink);
}

inline kvb_attention_args decode_args(const Fp8Problem& p, const AttnCase& cs, void* out) {
  kvb_attention_args a;
  kvb_attention_args_init(&a);
  set_common_args(a, p, cs, out);
  return a;
}

inline kvb_prefill_args prefill_args(const Fp8Problem& p, const AttnCase& cs, void* out) {
  kvb_prefill_args a;
  kvb_prefill_args_init(&a);
  set_common_args(a, p, cs, out);
  a.total_q_tokens = p.total_q;
  a.query_start = p.qstart.data();
  return a;
}

// Max |got - want| over the outputs (out: rows x H*G x D in q dtype), checking the dequantized reference
// within the q dtype's tolerance; returns the largest difference from the unquantized reference.
double check_rows(const Fp8Problem& p, const Tensor& out, const std::vector<std::pair<size_t, int32_t>>& rows,
                  float scale, float cap, uint32_t window, uint32_t sink, int* bad, double* worst = nullptr) {
  double worst_raw = 0;
  std::vector<double> ref(p.D), raw(p.D);
  for (size_t r = 0; r < rows.size(); ++r) {
    for (uint32_t qh = 0; qh < p.H * p.G; ++qh) {
      const size_t s = rows[r].first;
      const int32_t pos = rows[r].second;
      if (pos < 0) {  // empty sequence: zeros
        for (uint32_t d = 0; d < p.D; ++d) ref[d] = raw[d] = 0;
      } else {
        p.ref_row(s, int64_t(r), pos, qh, scale, cap, window, sink, true, ref.data());
        p.ref_row(s, int64_t(r), pos, qh, scale, cap, window, sink, false, raw.data());
      }
      for (uint32_t d = 0; d < p.D; ++d) {
        const double got = out.get((r * p.H * p.G + qh) * p.D + d);
        if (!close(got, ref[d], p.qd) && (*bad)++ < 3)
          fprintf(stderr, "  %s q %s row %zu head %u d %u: got %.6f want %.6f (dequantized)\n", dname(p.cd), dname(p.qd),
                  r, qh, d, got, ref[d]);
        worst_raw = std::max(worst_raw, std::fabs(got - raw[d]));
        if (worst) *worst = std::max(*worst, std::fabs(got - ref[d]));
      }
    }
  }
  return worst_raw;
}

// Documented tolerance against the unquantized values (|K| <= 2, |V| <= 3): rounding moves an element by
// at most half a step, 2^-4 (e4m3) or 2^-3 (e5m2) of its magnitude, so an output row (a convex mix of V
// rows; a row at position 0 is V[0] itself) moves by up to 3 * 2^-4 = 0.19 (e4m3) / 0.38 (e5m2), plus
// what the K error does to the weights. Measured worst: 0.146 (e4m3), 0.27 (e5m2).
double raw_tolerance(uint32_t cd) { return cd == KVB_DTYPE_FP8_E5M2 ? 0.5 : 0.25; }

}  // namespace fp8t
