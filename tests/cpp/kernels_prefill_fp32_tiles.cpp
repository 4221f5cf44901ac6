// The TF32 prefill kernel's geometry (kernels/prefill/prefill_fp32_tiles.h), checked on the CPU: over random
// ragged batches, windows and sinks, the CTAs' row segments cover every query row once, each within one
// sequence, and their key walks score every (row, attended key) pair exactly once, loading every key
// some row attends; the mma.sync m16n8k8 fragment addressing (Q and K as A / B of S = Q K^T, P from the
// S accumulators as A of O += P V with V rows permuted to match) computes both products on an emulated
// warp; the shared memory fits an A100 / H100 SM and the fragment loads are bank-conflict-free.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "../../kernels/prefill/prefill_fp32_tiles.h"
#include "harness.h"

namespace {

using namespace kvb::kern;

void test_segments_and_key_walks_cover_once() {
  std::mt19937 rng(5);
  int bad = 0;
  const int batches = kvbt_quick() ? 200 : 2000;
  for (int b = 0; b < batches; ++b) {
    const int num_seqs = 1 + int(rng() % 6);
    const int window = rng() % 2 ? 0 : 1 + int(rng() % 200), sink = window > 0 ? int(rng() % 40) : 0;
    const int D = rng() % 3 == 0 ? 256 : 128, bn = f32tiles::key_tile(D);
    std::vector<int> qs(size_t(num_seqs) + 1, 0), lens(static_cast<size_t>(num_seqs), 0);
    for (int i = 0; i < num_seqs; ++i) {
      const int q_len = rng() % 4 == 0 ? int(rng() % 3) : int(rng() % 70);
      qs[size_t(i) + 1] = qs[size_t(i)] + q_len;
      lens[size_t(i)] = q_len + int(rng() % 300);
    }
    const int total_q = qs.back();
    std::vector<int> row_seen(size_t(total_q), 0);
    for (int x = 0; x < std::max((total_q + 15) / 16, num_seqs); ++x) {
      const int r_end = std::min(x * 16 + 16, total_q);
      for (int r = x * 16; r < r_end;) {
        int seq = 0;  // seq_of_row: the last i with query_start[i] <= r
        while (seq + 1 < num_seqs && qs[size_t(seq) + 1] <= r) ++seq;
        const int row0 = qs[size_t(seq)], q_len = qs[size_t(seq) + 1] - row0, len = lens[size_t(seq)];
        if (r < row0 || r >= row0 + q_len) { ++bad; ++r; continue; }  // well-formed batches have none
        const int e = std::min(r_end, row0 + q_len), n = e - r;
        const int pos_first = len - q_len + (r - row0), pos_last = pos_first + n - 1;
        const f32tiles::KeyWalk w = f32tiles::key_walk(pos_first, pos_last, window, sink, bn);
        std::vector<int> scored(size_t(n) * size_t(len), 0);
        for (int i = 0; i < w.count(); ++i) {
          const int tile = w.tile(i);
          if (tile < 0 || tile * bn > pos_last) ++bad;
          for (int k = 0; k < bn; ++k) {
            const int t = tile * bn + k;
            const bool loaded = f32tiles::key_needed(t, pos_first, pos_last, window, sink);
            if (loaded && t >= len) ++bad;  // never past the sequence
            for (int row = 0; row < 16; ++row) {
              const int pos = pos_first + std::min(row, n - 1);
              if (!f32tiles::attends(t, pos, window, sink) || row >= n) continue;
              if (!loaded) ++bad;  // scored but zero-filled
              ++scored[size_t(row) * size_t(len) + size_t(t)];
            }
          }
        }
        for (int row = 0; row < n; ++row) {
          ++row_seen[size_t(r + row)];
          const int pos = pos_first + row;
          for (int t = 0; t < len; ++t) {
            const bool want = t <= pos && (window <= 0 || t > pos - window || t < sink);  // CPU reference
            if (scored[size_t(row) * size_t(len) + size_t(t)] != (want ? 1 : 0) && bad++ < 3)
              fprintf(stderr, "  len %d pos %d window %d sink %d key %d: scored %d\n", len, pos, window, sink, t,
                      scored[size_t(row) * size_t(len) + size_t(t)]);
          }
        }
        r = e;
      }
    }
    for (int x : row_seen) bad += x != 1;
  }
  CHECK(bad == 0);
}

// One warp's S = Q K^T (16 rows x 8 keys per n-tile, D dims) and O = P V (16 x D over 8-key k-steps)
// through the kernel's fragment addressing, against the plain products.
void test_fragment_addressing_on_an_emulated_warp() {
  constexpr int D = 32, BN = 16;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> Q(16 * D), K(BN * D), V(BN * D), P(16 * BN);
  for (float& x : Q) x = u(rng);
  for (float& x : K) x = u(rng);
  for (float& x : V) x = u(rng);
  for (float& x : P) x = u(rng);
  // mma m16n8k8 with the PTX fragment layouts, lane by lane.
  auto mma = [](float (&c)[32][4], const float (&a)[32][4], const float (&b)[32][2]) {
    float A[16][8], B[8][8];
    for (int l = 0; l < 32; ++l) {
      const int g = l >> 2, q = l & 3;
      A[g][q] = a[l][0], A[g + 8][q] = a[l][1], A[g][q + 4] = a[l][2], A[g + 8][q + 4] = a[l][3];
      B[q][g] = b[l][0], B[q + 4][g] = b[l][1];
    }
    for (int l = 0; l < 32; ++l)
      for (int e = 0; e < 4; ++e) {
        const int row = (l >> 2) + (e >> 1) * 8, col = 2 * (l & 3) + (e & 1);
        for (int k = 0; k < 8; ++k) c[l][e] += A[row][k] * B[k][col];
      }
  };
  int bad = 0;
  // S: n-tiles j of 8 keys; also keep P's accumulators in the same layout for the P V check.
  float S[BN / 8][32][4] = {}, Pc[BN / 8][32][4];
  for (int j = 0; j < BN / 8; ++j) {
    for (int kk = 0; kk < D / 8; ++kk) {
      float a[32][4], b[32][2];
      for (int l = 0; l < 32; ++l) {
        for (int r = 0; r < 4; ++r) a[l][r] = Q[size_t(f32tiles::a_row(l, r) * D + kk * 8 + f32tiles::a_col(l, r))];
        for (int r = 0; r < 2; ++r)
          b[l][r] = K[size_t((j * 8 + f32tiles::sk_key(l)) * D + kk * 8 + f32tiles::sk_dim(l, r))];
      }
      mma(S[j], a, b);
    }
    for (int l = 0; l < 32; ++l)
      for (int e = 0; e < 4; ++e) {
        const int row = f32tiles::c_row(l, e), key = j * 8 + f32tiles::c_col(l, e);
        double want = 0;
        for (int d = 0; d < D; ++d) want += double(Q[size_t(row * D + d)]) * K[size_t(key * D + d)];
        if (std::fabs(S[j][l][e] - want) > 1e-4) ++bad;
        Pc[j][l][e] = P[size_t(row * BN + key)];  // P in the accumulator layout, as the kernel holds it
      }
  }
  float O[D / 8][32][4] = {};
  for (int j = 0; j < BN / 8; ++j) {
    float a[32][4];
    for (int l = 0; l < 32; ++l)
      for (int r = 0; r < 4; ++r) a[l][r] = Pc[j][l][f32tiles::pv_from_c(r)];
    for (int n = 0; n < D / 8; ++n) {
      float b[32][2];
      for (int l = 0; l < 32; ++l)
        for (int r = 0; r < 2; ++r)
          b[l][r] = V[size_t((j * 8 + f32tiles::pv_key(l, r)) * D + n * 8 + f32tiles::pv_dim(l))];
      mma(O[n], a, b);
    }
  }
  for (int n = 0; n < D / 8; ++n)
    for (int l = 0; l < 32; ++l)
      for (int e = 0; e < 4; ++e) {
        const int row = f32tiles::c_row(l, e), d = n * 8 + f32tiles::c_col(l, e);
        double want = 0;
        for (int k = 0; k < BN; ++k) want += double(P[size_t(row * BN + k)]) * V[size_t(k * D + d)];
        if (std::fabs(O[n][l][e] - want) > 1e-4 && bad++ < 3)
          fprintf(stderr, "  O[%d][%d] = %g, want %g\n", row, d, double(O[n][l][e]), want);
      }
  CHECK(bad == 0);
}

void test_shared_memory_and_banks() {
  const int a100 = 163 * 1024;
  for (int D : {64, 128, 256})
    for (int warps : {1, 2, 4}) {
      CHECK(f32tiles::smem_bytes(D, warps) + 1024 <= a100);
      CHECK(f32tiles::row_stride(D) % 4 == 0);  // 16-byte rows for cp.async
    }
  CHECK(2 * (f32tiles::smem_bytes(128, 4) + 1024) <= 228 * 1024);  // 2 CTAs per H100 SM at D 128
  for (int g : {1, 2, 3, 4, 6, 8, 12}) CHECK(g % f32tiles::heads_per_cta(g) == 0);
  // Each fragment load instruction: 32 lanes on 32 distinct banks (4-byte words).
  int conflicts = 0;
  for (int D : {64, 128, 256}) {
    const int RS = f32tiles::row_stride(D);
    for (int r = 0; r < 4; ++r) {
      std::vector<int> qa(32, 0), kb(32, 0), vb(32, 0);
      for (int l = 0; l < 32; ++l) {
        ++qa[size_t((f32tiles::a_row(l, r) * RS + f32tiles::a_col(l, r)) % 32)];
        if (r < 2) {
          ++kb[size_t((f32tiles::sk_key(l) * RS + f32tiles::sk_dim(l, r)) % 32)];
          ++vb[size_t((f32tiles::pv_key(l, r) * RS + f32tiles::pv_dim(l)) % 32)];
        }
      }
      for (int i = 0; i < 32; ++i) conflicts += qa[size_t(i)] > 1 || (r < 2 && (kb[size_t(i)] > 1 || vb[size_t(i)] > 1));
    }
  }
  CHECK(conflicts == 0);
}

}  // namespace

int main() {
  RUN_TEST(test_segments_and_key_walks_cover_once);
  RUN_TEST(test_fragment_addressing_on_an_emulated_warp);
  RUN_TEST(test_shared_memory_and_banks);
  TEST_SUMMARY();
}
