// CPU paged decode attention: the same split-K plan and workspace layout as the CUDA kernels (so results
// and the workspace contract agree), online softmax in fp32 with exp2, one (sequence, kv head) at a
// time so that each K/V row is converted once for all query heads of its GQA group.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../../libkvblock/error.h"
#include "../backends.h"
#include "convert.h"

namespace kvb {
namespace kern {
namespace cpu {

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Window {
  int64_t len, lo, sink;
  bool attended(int64_t t) const { return t >= lo || t < sink; }
};

Window window_of(const Attention& a, int64_t len) {
  Window w{len, 0, 0};
  if (a.window > 0) {
    w.lo = std::max<int64_t>(0, len - a.window);
    w.sink = a.sink;
  }
  return w;
}

// Dot product with 8 independent partial sums (D is a multiple of 8), so the compiler can vectorise
// without reassociating a single fp32 chain.
float dot8(const float* a, const float* b, int64_t n) {
  float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i < n; i += 8)
    for (int j = 0; j < 8; ++j) part[j] += a[i + j] * b[i + j];
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

// Everything the kernel will read must be valid before anything is written.
void check_inputs(const Cache& c, const Attention& a) {
  const int64_t max_len = a.max_blocks * c.block_size;
  for (int64_t s = 0; s < a.num_seqs; ++s) {
    const int64_t len = a.seq_lens[s];
    if (len < 0 || len > max_len)
      fail(Code::invalid_argument, "seq_lens[%lld] = %lld is not in [0, max_blocks_per_seq * block_size = %lld]",
           (long long)s, (long long)len, (long long)max_len);
    const Window w = window_of(a, len);
    const int64_t nblk = (len + c.block_size - 1) >> c.block_shift;
    for (int64_t b = 0; b < nblk; ++b) {
      const int64_t first = b * c.block_size, last = std::min(len, first + c.block_size) - 1;
      if (!(last >= w.lo || first < w.sink)) continue;  // wholly outside the window: never read
      const int32_t id = a.block_tables[s * a.max_blocks + b];
      if (id < 0 || id >= c.num_blocks)
        fail(Code::invalid_argument, "block_tables[%lld][%lld] = %d is not in [0, %lld) (sequence length %lld)",
             (long long)s, (long long)b, id, (long long)c.num_blocks, (long long)len);
    }
  }
}

}  // namespace

void paged_attention(const Cache& c, const Attention& a) {
  check_inputs(c, a);
  const int64_t D = c.head_dim, G = a.num_q_heads / c.num_kv_heads;
  const int64_t P = a.plan.partition_size, NP = a.plan.num_partitions;
  const int64_t es = int64_t(c.elem());
  const size_t nd = static_cast<size_t>(D), ng = static_cast<size_t>(G);
  std::vector<float> q(ng * nd), kf(nd), vf(nd), acc(ng * nd), m(ng), l(ng);
  float* ws_m = static_cast<float*>(a.workspace);
  float* ws_l = ws_m ? ws_m + a.num_seqs * a.num_q_heads * NP : nullptr;
  float* ws_o = ws_l ? ws_l + a.num_seqs * a.num_q_heads * NP : nullptr;

  for (int64_t s = 0; s < a.num_seqs; ++s) {
    const int64_t len = a.seq_lens[s];
    const Window w = window_of(a, len);
    const int32_t* table = a.block_tables + s * a.max_blocks;
    for (int64_t kvh = 0; kvh < c.num_kv_heads; ++kvh) {
      const int64_t h0 = kvh * G;
      for (int64_t g = 0; g < G; ++g) {
        const char* qp = static_cast<const char*>(a.q) + (s * a.q_seq_stride + (h0 + g) * a.q_head_stride) * es;
        load_row(qp, c.dtype, D, &q[size_t(g * D)]);
        for (int64_t d = 0; d < D; ++d) q[size_t(g * D + d)] *= a.scale;
      }
      const int64_t nparts = NP == 1 ? 1 : (len + P - 1) / P;
      for (int64_t p = 0; p < nparts; ++p) {
        std::fill(m.begin(), m.end(), kNegInf);
        std::fill(l.begin(), l.end(), 0.f);
        std::fill(acc.begin(), acc.end(), 0.f);
        const int64_t t_end = std::min(len, (p + 1) * P);
        for (int64_t t = p * P; t < t_end; ++t) {
          if (!w.attended(t)) continue;
          const int64_t off = int64_t(table[t >> c.block_shift]) * c.block_stride +
                              (t & (c.block_size - 1)) * c.token_stride + kvh * c.head_stride;
          load_row(static_cast<const char*>(c.k) + off * es, c.dtype, D, kf.data());
          load_row(static_cast<const char*>(c.v) + off * es, c.dtype, D, vf.data());
          for (int64_t g = 0; g < G; ++g) {
            const float* qg = &q[size_t(g * D)];
            float dot = dot8(qg, kf.data(), D);
            if (a.soft_cap > 0.f) dot = a.soft_cap * std::tanh(dot / a.soft_cap);
            const float x = dot * kLog2e;
            float* ag = &acc[size_t(g * D)];
            if (x > m[size_t(g)]) {
              const float alpha = std::exp2(m[size_t(g)] - x);  // 0 while m is -inf
              l[size_t(g)] *= alpha;
              for (int64_t d = 0; d < D; ++d) ag[d] *= alpha;
              m[size_t(g)] = x;
            }
            const float pr = std::exp2(x - m[size_t(g)]);
            l[size_t(g)] += pr;
            for (int64_t d = 0; d < D; ++d) ag[d] += pr * vf[size_t(d)];
          }
        }
        for (int64_t g = 0; g < G; ++g) {
          const float inv = l[size_t(g)] > 0.f ? 1.f / l[size_t(g)] : 0.f;
          const float* ag = &acc[size_t(g * D)];
          if (NP == 1) {
            char* op = static_cast<char*>(a.out) + (s * a.out_seq_stride + (h0 + g) * a.out_head_stride) * es;
            for (int64_t d = 0; d < D; ++d) store_elem(op, c.dtype, d, ag[d] * inv);
          } else {
            const int64_t row = (s * a.num_q_heads + h0 + g) * NP + p;
            ws_m[row] = m[size_t(g)];
            ws_l[row] = l[size_t(g)];
            for (int64_t d = 0; d < D; ++d) ws_o[row * D + d] = ag[d] * inv;
          }
        }
      }
      if (NP == 1) continue;
      // Reduce the partitions of each query head: weights l_p * 2^(m_p - M).
      for (int64_t g = 0; g < G; ++g) {
        const int64_t row0 = (s * a.num_q_heads + h0 + g) * NP;
        float M = kNegInf;
        for (int64_t p = 0; p < nparts; ++p)
          if (ws_l[row0 + p] > 0.f) M = std::max(M, ws_m[row0 + p]);
        float W = 0.f;
        std::fill(kf.begin(), kf.end(), 0.f);
        for (int64_t p = 0; p < nparts; ++p) {
          if (!(ws_l[row0 + p] > 0.f)) continue;
          const float wp = ws_l[row0 + p] * std::exp2(ws_m[row0 + p] - M);
          W += wp;
          for (int64_t d = 0; d < D; ++d) kf[size_t(d)] += wp * ws_o[(row0 + p) * D + d];
        }
        const float inv = W > 0.f ? 1.f / W : 0.f;
        char* op = static_cast<char*>(a.out) + (s * a.out_seq_stride + (h0 + g) * a.out_head_stride) * es;
        for (int64_t d = 0; d < D; ++d) store_elem(op, c.dtype, d, kf[size_t(d)] * inv);
      }
    }
  }
}

}  // namespace cpu
}  // namespace kern
}  // namespace kvb
