// The prefill test problem shared by the prefill kernel tests (kernels_prefill.cpp, kernels_tree.cpp): a
// paged cache with random block placement, a ragged batch of query rows and the float64 reference.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "kernels_util.h"

namespace kt {

inline bool quick() { return kvbt_quick() != 0; }

struct Config {
  uint32_t dtype, head_dim, block_size, num_kv_heads, group;
  uint32_t window, sink;
  float soft_cap;
  bool strided;  // padded q / out strides
  unsigned seed;
};

struct SeqSpec {
  int32_t q_len, cached;  // new tokens, tokens already in the cache before them
};

// One prefill call on the CPU: cache, q, tables, and the float64 expected output. Optionally a tree
// mask (one word per query row, kvb_prefill_args.tree_mask) and queries of another dtype than the cache
// (fp8 caches: q and out in q_dtype).
struct Problem {
  Config cf;
  uint32_t q_dtype;
  std::vector<uint64_t> tree;  // empty: no tree mask
  HostCache cache;
  std::vector<SeqSpec> seqs;
  uint32_t num_q_heads = 0, max_blocks = 0;
  int32_t total_q = 0;
  std::vector<int32_t> qstart, lens, tables;
  Tensor q, out;
  int64_t q_hs = 0, q_ts = 0, o_hs = 0, o_ts = 0;
  std::vector<double> ref;  // [row][head][d]
  bool tf32 = false;  // fp32 on CUDA: allow_tf32 (TF32 has fp16's 11-bit significand: fp16's tolerance)
  uint32_t tol_dtype() const { return tf32 ? uint32_t(KVB_DTYPE_FP16) : q_dtype; }

  Problem(const Config& c, std::vector<SeqSpec> specs, std::vector<uint64_t> tree_words = {}, int qdt = -1)
      : cf(c), q_dtype(qdt < 0 ? c.dtype : uint32_t(qdt)), tree(std::move(tree_words)),
        cache(c.dtype, 1, c.block_size, c.num_kv_heads, c.head_dim), seqs(std::move(specs)) {
    std::mt19937 rng(c.seed);
    const int32_t bs = int32_t(c.block_size);
    num_q_heads = c.num_kv_heads * c.group;
    qstart.push_back(0);
    int32_t longest = 1;
    for (const SeqSpec& s : seqs) {
      qstart.push_back(qstart.back() + s.q_len);
      lens.push_back(s.cached + s.q_len);
      longest = std::max(longest, s.cached + s.q_len);
    }
    total_q = qstart.back();
    max_blocks = uint32_t((longest + bs - 1) / bs + 1);  // one spare padded column
    uint32_t total_blocks = 7;                            // never-used blocks too
    for (int32_t L : lens) total_blocks += uint32_t((L + bs - 1) / bs);
    cache = HostCache(c.dtype, total_blocks, c.block_size, c.num_kv_heads, c.head_dim);
    cache.k.fill_random(rng);
    cache.v.fill_random(rng);
    std::vector<int32_t> ids(total_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    tables.assign(seqs.size() * max_blocks, -1);
    size_t next = 0;
    for (size_t s = 0; s < seqs.size(); ++s) {
      const int32_t L = lens[s], first = seqs[s].cached;  // position of the first query row
      for (int32_t b = 0; b * bs < L; ++b) {
        const int32_t t0 = b * bs, t1 = std::min(L, t0 + bs);
        // Blocks no row can see (before the first row's window, after the sinks) read -1, as a window
        // that released them would leave them.
        const bool unseen = c.window > 0 && t1 <= first - int32_t(c.window) + 1 && t0 >= int32_t(c.sink);
        tables[s * max_blocks + size_t(b)] = unseen ? -1 : ids[next];
        next++;
      }
    }
    const int64_t pad = c.strided ? 8 : 0;
    q_hs = c.head_dim + pad;
    q_ts = int64_t(num_q_heads) * q_hs + (c.strided ? 24 : 0);
    o_hs = c.head_dim + pad;
    o_ts = int64_t(num_q_heads) * o_hs + (c.strided ? 40 : 0);
    q = Tensor(q_dtype, size_t(q_ts) * size_t(std::max(total_q, 1)));
    q.fill_random(rng, -2.f, 2.f);
    out = Tensor(q_dtype, size_t(o_ts) * size_t(std::max(total_q, 1)));
    out.poison();
    reference();
  }

  double scale() const { return 1.0 / std::sqrt(double(cf.head_dim)); }

  // Does the row at position pos of sequence s (its j-th new token) see key t? Causal, the window with
  // its sinks, and for a tree (q_len <= 64) the row's bit of every new key before itself.
  bool sees(size_t s, int32_t j, int64_t pos, int64_t t) const {
    if (t > pos) return false;
    if (cf.window > 0 && !(t > pos - int64_t(cf.window) || t < int64_t(cf.sink))) return false;
    const int64_t first_new = lens[s] - seqs[s].q_len;
    if (tree.empty() || seqs[s].q_len > 64 || t < first_new || t == pos) return true;
    return (tree[size_t(qstart[s] + j)] >> (t - first_new)) & 1;
  }

  // Float64, one (row, head) at a time: the attended positions, their logits, softmax, sum of V.
  void reference() {
    const int64_t D = cf.head_dim, bs = cf.block_size;
    ref.assign(size_t(total_q) * num_q_heads * D, 0.0);
    for (size_t s = 0; s < seqs.size(); ++s)
      for (int32_t j = 0; j < seqs[s].q_len; ++j) {
        const int64_t row = qstart[s] + j, pos = lens[s] - seqs[s].q_len + j;
        std::vector<int64_t> keys;
        for (int64_t t = 0; t <= pos; ++t)
          if (sees(s, j, pos, t)) keys.push_back(t);
        for (uint32_t h = 0; h < num_q_heads; ++h) {
          const uint32_t kvh = h / cf.group;
          std::vector<double> w(keys.size());
          for (size_t i = 0; i < keys.size(); ++i) {
            const int32_t blk = tables[s * max_blocks + size_t(keys[i] / bs)];
            double dot = 0;
            for (int64_t d = 0; d < D; ++d)
              dot += double(q.get(size_t(row * q_ts + h * q_hs + d))) *
                     double(cache.k.get(cache.offset(blk, keys[i] % bs, kvh, d)));
            double x = scale() * dot;
            if (cf.soft_cap > 0) x = cf.soft_cap * std::tanh(x / cf.soft_cap);
            w[i] = x;
          }
          const double mx = *std::max_element(w.begin(), w.end());
          double sum = 0;
          for (double& x : w) sum += (x = std::exp(x - mx));
          for (size_t i = 0; i < keys.size(); ++i) {
            const int32_t blk = tables[s * max_blocks + size_t(keys[i] / bs)];
            for (int64_t d = 0; d < D; ++d)
              ref[(size_t(row) * num_q_heads + h) * D + d] +=
                  w[i] / sum * double(cache.v.get(cache.offset(blk, keys[i] % bs, kvh, d)));
          }
        }
      }
  }

  // tree_ptr: where the tree words are for this call (host or device); nullptr: tree's host copy.
  kvb_prefill_args args(const void* q_ptr, void* out_ptr, const int32_t* qs, const int32_t* len, const int32_t* tab,
                        void* ws, size_t ws_size, const uint64_t* tree_ptr = nullptr) const {
    kvb_prefill_args a;
    kvb_prefill_args_init(&a);
    set_paged(a, uint32_t(seqs.size()), num_q_heads, max_blocks, q_ptr, out_ptr, tab, len);
    set_mask(a, cf.soft_cap, cf.window, cf.sink);
    a.total_q_tokens = uint32_t(total_q);
    a.query_start = qs;
    a.q_token_stride = q_ts;
    a.q_head_stride = q_hs;
    a.out_token_stride = o_ts;
    a.out_head_stride = o_hs;
    a.scale = float(scale());
    a.workspace = ws;
    a.workspace_size = ws_size;
    a.allow_tf32 = tf32 ? 1u : 0u;
    if (cf.dtype == KVB_DTYPE_FP8_E4M3 || cf.dtype == KVB_DTYPE_FP8_E5M2) a.q_dtype = q_dtype;
    a.tree_mask = tree_ptr ? tree_ptr : tree.empty() ? nullptr : tree.data();
    return a;
  }
  kvb_prefill_args host_args() { return args(q.data(), out.data(), qstart.data(), lens.data(), tables.data(), nullptr, 0); }

  // Every output element matches want(row, h, d); the padding between rows still holds the poison.
  template <class Want>
  int compare(const Tensor& got, Want want, const char* what) const {
    int bad = 0;
    std::vector<bool> logical(got.n, false);
    for (int32_t r = 0; r < total_q; ++r)
      for (uint32_t h = 0; h < num_q_heads; ++h)
        for (uint32_t d = 0; d < cf.head_dim; ++d) {
          const size_t i = size_t(r * o_ts + h * o_hs + d);
          logical[i] = true;
          const double w = want(r, h, d), g = got.get(i);
          if (!close(g, w, tol_dtype()) && bad++ < 3)
            fprintf(stderr, "  %s %s%s D=%u bs=%u G=%u win=%u sink=%u cap=%g: row %d head %u d %u: got %g want %g\n", what,
                    dname(cf.dtype), tf32 ? " (tf32)" : "", cf.head_dim, cf.block_size, cf.group, cf.window, cf.sink, (double)cf.soft_cap, r, h,
                    d, g, w);
        }
    return padding_overwritten(got, logical, what, bad);
  }
  int compare_ref(const Tensor& got, const char* what) const {
    const uint32_t D = cf.head_dim, H = num_q_heads;
    return compare(got, [&](int32_t r, uint32_t h, uint32_t d) { return ref[(size_t(r) * H + h) * D + d]; }, what);
  }
};

// Every q_len of {1, 2, bs-1, bs, bs+1, 100} over a cached prefix of 0, a partial block and several
// blocks, plus a sequence with no new tokens; shuffled so long and short rows interleave.
inline std::vector<SeqSpec> ragged(uint32_t bs, std::mt19937& rng, bool small) {
  const int32_t b = int32_t(bs);
  std::vector<int32_t> qlens = {1, 2, std::max(b - 1, 1), b, b + 1, 100};
  std::vector<int32_t> cached = {0, b / 2 + 1, 3 * b + 5};
  if (small) qlens = {1, b + 1, 37}, cached = {0, 3 * b + 5};
  std::vector<SeqSpec> out;
  for (int32_t ql : qlens)
    for (int32_t c : cached) out.push_back({ql, c});
  out.push_back({0, 9});
  std::shuffle(out.begin(), out.end(), rng);
  return out;
}

}  // namespace kt
