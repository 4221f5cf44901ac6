// The tensor-core decode kernel's geometry (kernels/decode/decode_tiles.h), checked on the CPU: the chunks of a
// GQA group cover every query head once with at most 16 per CTA; over random sequence lengths,
// partition sizes, block sizes, windows and sinks, the simulated grid (partitions, pipeline stages, warps,
// key columns) scores every attended key exactly once per sequence, loads nothing outside the
// partition's block list, and masks every key the CPU reference does not attend; the shared memory fits
// an H100 / A100 SM; the prefill call's short sequences go to this kernel exactly when well-formed and
// short, and each of their query rows scores exactly the keys its position attends; and the kernel's ldmatrix / mma fragment addressing computes Q K^T and P V for each
// warp's 16 keys of a stage on an emulated warp.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "../../kernels/decode/decode_tiles.h"
#include "harness.h"
#include "warp_model.h"

namespace {

using namespace kvb::kern;

void test_chunks_cover_every_head_once() {
  int bad = 0;
  for (int group = 1; group <= 128; ++group) {
    std::vector<int> seen(size_t(group), 0);
    for (int c = 0; c < dtiles::num_chunks(group); ++c) {
      const int n = dtiles::chunk_count(group, c);
      if (n < 1 || n > dtiles::kRows) ++bad;
      for (int r = 0; r < n; ++r) {
        const int h = dtiles::chunk_first(group, c) + r;
        if (h < 0 || h >= group) ++bad; else ++seen[size_t(h)];
      }
    }
    for (int x : seen) bad += x != 1;
  }
  CHECK(bad == 0);
}

// The kernel's walk over one sequence, as in decode_mma_kernel: per partition its block list, the
// stages of 64 keys, each warp's 16 key columns; counts per key of "scored" (not masked) and checks
// that a loaded key lies in the partition's block list.
int simulate(int len, int block_shift, int partition, int window, int sink) {
  const int max_ctx = len + int(std::rand() % 100);  // the launch's longest sequence
  const int np = (max_ctx + partition - 1) / partition;
  std::vector<int> scored(size_t(len), 0);
  int bad = 0;
  for (int part = 0; part < np; ++part) {
    const int t_begin = part * partition;
    if (np > 1 && t_begin >= len) continue;
    const int t_end = std::min(t_begin + partition, len);
    const int lo = window > 0 ? std::max(0, len - window) : 0, sk = window > 0 ? sink : 0;
    const bool any = t_begin < t_end && (t_end > lo || t_begin < sk);
    const int first_blk = t_begin >> block_shift;
    const int nblk = any ? ((t_end - 1) >> block_shift) - first_blk + 1 : 0;
    if (nblk > 2048) ++bad;
    const int n_st = any ? dtiles::stage_count(t_end - t_begin) : 0;
    for (int i = 0; i < n_st; ++i)
      for (int w = 0; w < dtiles::kWarps; ++w)
        for (int k = 0; k < dtiles::kWarpKeys; ++k) {
          const int t = dtiles::stage_key(t_begin, i, w, k);
          const bool load = t < t_end && dtiles::attends(t, len, window, sink);
          if (load) {
            const int slot = (t >> block_shift) - first_blk;
            if (slot < 0 || slot >= nblk) ++bad;
            ++scored[size_t(t)];
          }
        }
  }
  for (int t = 0; t < len; ++t) {
    const bool want = window <= 0 || t >= len - window || t < sink;  // the CPU reference's rule
    if (scored[size_t(t)] != (want ? 1 : 0) && bad++ < 3)
      fprintf(stderr, "  len %d partition %d window %d sink %d: key %d scored %d times\n", len, partition, window,
              sink, t, scored[size_t(t)]);
  }
  return bad;
}

void test_grid_scores_every_attended_key_once() {
  std::srand(7);
  std::mt19937 rng(11);
  int bad = 0;
  const int cases = kvbt_quick() ? 300 : 3000;
  for (int n = 0; n < cases; ++n) {
    const int len = int(rng() % 9000);
    const int block_shift = 3 + int(rng() % 4);                  // blocks of 8 .. 64
    const int partition = std::max(256, 1 << block_shift) << (rng() % 6);  // plan (>= 256) x 2^k, as the launch
    const int window = rng() % 3 == 0 ? 0 : int(rng() % 3000);
    const int sink = int(rng() % 40);
    bad += simulate(len, block_shift, partition, window, sink);
  }
  CHECK(bad == 0);
}

// Mixed prefill batches: exactly the short, well-formed sequences go to the decode kernel, and there each
// of the q_len * group packed rows of a kv head scores exactly the keys the reference attends at its own
// position (over the plan's key splits, stages, warps), with the rows fitting one 16-row tile.
void test_short_queries_owned_and_covered() {
  std::mt19937 rng(23);
  int bad = 0;
  const int batches = kvbt_quick() ? 200 : 2000;
  for (int b = 0; b < batches; ++b) {
    const int G = 1 << (rng() % 5), num_seqs = 1 + int(rng() % 6);
    const int max_tokens = 4096, window = rng() % 2 ? 0 : 1 + int(rng() % 300), sink = int(rng() % 8);
    std::vector<int> qs(size_t(num_seqs) + 1, 0), lens(static_cast<size_t>(num_seqs), 0);
    for (int i = 0; i < num_seqs; ++i) {
      const int q_len = rng() % 2 ? int(rng() % 6) : int(rng() % 80);
      qs[size_t(i) + 1] = qs[size_t(i)] + q_len;
      lens[size_t(i)] = q_len + int(rng() % 1500);
    }
    const bool faulty = rng() % 4 == 0;  // one broken value somewhere
    if (faulty) {
      if (rng() % 2) qs[rng() % qs.size()] += int(rng() % 5) - 2; else lens[rng() % lens.size()] = int(rng() % 8) - 2;
    }
    const int total_q = faulty && rng() % 3 == 0 ? qs.back() + 1 : qs.back();
    const int splits = 1 << (rng() % 3), split_tokens = 256 << (rng() % 3);
    for (int s = 0; s < num_seqs; ++s) {
      const int q0 = qs[size_t(s)], q1 = qs[size_t(s) + 1], len = lens[size_t(s)], q_len = q1 - q0;
      // The prefill kernels' contract (prefill_common.cuh seq_view), written out again.
      const bool ok = !(s == 0 && q0 != 0) && q0 >= 0 && q1 >= q0 && q1 <= total_q &&
                      !(s == num_seqs - 1 && q1 != total_q) && len >= q_len && len <= max_tokens;
      const bool owned = dtiles::decode_path_owns(s, num_seqs, q0, q1, total_q, len, max_tokens, G);
      if (owned != (ok && q_len >= 1 && q_len <= 4 && q_len * G <= dtiles::kRows) && bad++ < 3)
        fprintf(stderr, "  seq %d q [%d, %d) len %d G %d: owned %d\n", s, q0, q1, len, G, owned);
      if (!owned) continue;
      // The kernel's walk: partition = split (or the whole sequence), rows at their positions.
      const int P = splits > 1 ? split_tokens : max_tokens, np = splits > 1 ? splits : 1;
      if (splits > 1 && (len + P - 1) / P > np) continue;  // the plan sizes splits to cover every sequence
      const int rows = q_len * G;
      std::vector<int> scored(size_t(rows) * size_t(len), 0);
      for (int part = 0; part < np; ++part) {
        const int t_begin = part * P, t_end = std::min(t_begin + P, len);
        const int lo = dtiles::first_window_key(len, q_len, window), sk = window > 0 ? sink : 0;
        const bool any = t_begin < t_end && (t_end > lo || t_begin < sk);
        const int n_st = any ? dtiles::stage_count(t_end - t_begin) : 0;
        for (int i = 0; i < n_st; ++i)
          for (int w = 0; w < dtiles::kWarps; ++w)
            for (int k = 0; k < dtiles::kWarpKeys; ++k) {
              const int t = dtiles::stage_key(t_begin, i, w, k);
              const bool loaded = t < t_end && (t >= lo || t < sk);
              for (int r = 0; r < rows; ++r) {
                const int pos = dtiles::row_pos(r, G, q_len, len);
                if (t < t_end && dtiles::attends_at(t, pos, window, sink)) {
                  if (!loaded) ++bad;  // scored but zero-filled
                  ++scored[size_t(r) * size_t(len) + size_t(t)];
                }
              }
            }
      }
      for (int r = 0; r < rows; ++r) {
        const int pos = len - q_len + r / G;  // token r / G of the sequence's last q_len
        for (int t = 0; t < len; ++t) {
          const bool want = t <= pos && (window <= 0 || t > pos - window || t < sink);
          if (scored[size_t(r) * size_t(len) + size_t(t)] != (want ? 1 : 0) && bad++ < 3)
            fprintf(stderr, "  short seq len %d q_len %d G %d row %d key %d: scored %d\n", len, q_len, G, r, t,
                    scored[size_t(r) * size_t(len) + size_t(t)]);
        }
      }
    }
  }
  CHECK(bad == 0);
}

void test_shared_memory_fits() {
  const int kStatic = 4 + 2 * dtiles::kWarps * dtiles::kRows * 4;  // flag, merge (max, sum)
  CHECK(kStatic <= dtiles::kStaticSmem);
  const int a100 = 163 * 1024, h100 = 227 * 1024;  // opt-in shared memory per block
  for (int limit : {a100, h100})
    for (int D : {64, 128, 256}) {
      const int st = dtiles::stages(D, limit);
      CHECK(st >= 2);
      // The warps' O (float [4][16][D]) reuses the stage memory.
      CHECK(dtiles::smem_bytes(D, st) - dtiles::kRows * D * 2 >= dtiles::kWarps * dtiles::kRows * D * 4);
      CHECK(dtiles::smem_bytes(D, st) + kStatic <= limit);
    }
  CHECK(dtiles::stages(256, h100) == 3 && dtiles::stages(256, a100) == 2);
  CHECK(2 * (dtiles::smem_bytes(128, dtiles::stages(128, h100)) + kStatic + 1024) <= 228 * 1024);  // 2 CTAs / SM
}

using emu::Warp;

// decode_mma_kernel's S and O steps for warp w of one stage, against direct products (small integers:
// exact in float); returns mismatches.
int emulate(int D, int w, std::mt19937& rng) {
  using namespace dtiles;
  const int C = D / 8, DT = D / 8, R = kRows, N = kStageKeys;
  Warp wp;
  const uint32_t q0 = 0, k0 = uint32_t(R * D * 2), v0 = k0 + uint32_t(N * D * 2);
  wp.smem.assign(size_t(R * D + 2 * N * D), 0.f);
  std::vector<float> Q(size_t(R * D)), K(size_t(N * D)), V(size_t(N * D));
  auto put = [&](uint32_t base, int r, int d, float x) { wp.smem[(base + swz(C, r, d / 8)) / 2 + uint32_t(d % 8)] = x; };
  auto val = [&]() { return float(int(rng() % 5) - 2); };
  for (int r = 0; r < R; ++r)
    for (int d = 0; d < D; ++d) put(q0, r, d, Q[size_t(r * D + d)] = val());
  for (int r = 0; r < N; ++r)
    for (int d = 0; d < D; ++d) {
      put(k0, r, d, K[size_t(r * D + d)] = val());
      put(v0, r, d, V[size_t(r * D + d)] = val());
    }
  int bad = 0;
  float s[2][32][4] = {};
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t addr[32];
    Warp::Regs a, b;
    for (int l = 0; l < 32; ++l) addr[l] = q0 + swz(C, q_row(l), q_chunk(kk, l));
    wp.ldsm(addr, false, a);
    for (int l = 0; l < 32; ++l) addr[l] = k0 + swz(C, k_row(w, l), k_chunk(kk, l));
    wp.ldsm(addr, false, b);
    Warp::mma(s[0], a, b, 0, 1);
    Warp::mma(s[1], a, b, 2, 3);
  }
  for (int n = 0; n < 2; ++n)
    for (int l = 0; l < 32; ++l)
      for (int e = 0; e < 4; ++e) {
        const int row = c_row(l, e), key = w * kWarpKeys + n * 8 + c_col(l, e);
        float want = 0;
        for (int d = 0; d < D; ++d) want += Q[size_t(row * D + d)] * K[size_t(key * D + d)];
        if (s[n][l][e] != want && bad++ < 3) fprintf(stderr, "  D=%d warp %d S row %d key %d: %g want %g\n", D, w, row, key, s[n][l][e], want);
      }
  // O = P V with P = S repacked into the A fragment as the kernel does.
  Warp::Regs a, b;
  for (int l = 0; l < 32; ++l)
    for (int h = 0; h < 2; ++h) {
      a[l][0][h] = s[0][l][h];
      a[l][1][h] = s[0][l][2 + h];
      a[l][2][h] = s[1][l][h];
      a[l][3][h] = s[1][l][2 + h];
    }
  std::vector<float> o(size_t(DT) * 128, 0.f);
  for (int d2 = 0; d2 < DT / 2; ++d2) {
    uint32_t addr[32];
    for (int l = 0; l < 32; ++l) addr[l] = v0 + swz(C, v_row(w, l), v_chunk(d2, l));
    wp.ldsm(addr, true, b);
    Warp::mma(*reinterpret_cast<float(*)[32][4]>(&o[size_t(2 * d2) * 128]), a, b, 0, 1);
    Warp::mma(*reinterpret_cast<float(*)[32][4]>(&o[size_t(2 * d2 + 1) * 128]), a, b, 2, 3);
  }
  for (int dt = 0; dt < DT; ++dt)
    for (int l = 0; l < 32; ++l)
      for (int e = 0; e < 4; ++e) {
        const int r = c_row(l, e), col = dt * 8 + c_col(l, e);
        float want = 0;
        for (int k = 0; k < kWarpKeys; ++k) {
          const int key = w * kWarpKeys + k;
          float sk = 0;
          for (int d = 0; d < D; ++d) sk += Q[size_t(r * D + d)] * K[size_t(key * D + d)];
          want += sk * V[size_t(key * D + col)];
        }
        const float got = o[size_t(dt) * 128 + size_t(l) * 4 + size_t(e)];
        if (got != want && bad++ < 3) fprintf(stderr, "  D=%d warp %d O row %d col %d: %g want %g\n", D, w, r, col, got, want);
      }
  return bad;
}

void test_fragment_addressing_on_an_emulated_warp() {
  std::mt19937 rng(5);
  int bad = 0;
  for (int D : {64, 128, 256})
    for (int w = 0; w < dtiles::kWarps; ++w) bad += emulate(D, w, rng);
  CHECK(bad == 0);
}

}  // namespace

// The launch's partition size (dtiles::mma_partition_size): a power-of-two multiple of the plan's (so the
// workspace the plan sized suffices), within the lone-CTA cap and the int token range, the plan's own
// when it has one partition; and on an H100 (132 SMs; 2 CTAs per SM at D 128, 1 at D 256, 3 stages)
// the shapes of the first GPU run get the partitions the cost model was fitted for. Uses the library's
// shape-only plan rule, written out again (validate.cpp plan_attention).
int64_t plan_partition(int64_t seqs, int64_t kv_heads, int64_t max_ctx, int64_t block) {
  int64_t P = std::max<int64_t>(256, block);
  while (P < 2048 && seqs * kv_heads * ((max_ctx + 2 * P - 1) / (2 * P)) >= 4096) P *= 2;
  return P;
}

void test_partition_size_for_waves() {
  int bad = 0;
  struct Shape { int64_t seqs, kv_heads, ctx, wave, want; };
  // 16 x 32768, 64 x 8192 (Hq 32 or 64 over 8 kv heads), 32 x 4096, 128 x 2048, 256 x 1024, group 8 over 4
  // kv heads, D 256 (one CTA per SM), 1 x 4096 (one partial wave: the plan's 256).
  const Shape shapes[] = {{16, 8, 32768, 264, 4096}, {64, 8, 8192, 264, 4096}, {32, 8, 4096, 264, 4096},
                          {128, 8, 2048, 264, 2048}, {256, 8, 1024, 264, 1024}, {64, 4, 8192, 264, 4096},
                          {32, 8, 8192, 132, 4096},  {1, 8, 4096, 264, 256}};
  for (const Shape& s : shapes) {
    const int64_t pp = plan_partition(s.seqs, s.kv_heads, s.ctx, 16), pn = (s.ctx + pp - 1) / pp;
    const int64_t P = dtiles::mma_partition_size(pp, pn, s.ctx, s.seqs * s.kv_heads, s.wave, 3, INT32_MAX - 4096);
    if (P != s.want && bad++ < 5)
      fprintf(stderr, "  %lld x %lld (kv heads %lld, wave %lld): P %lld, want %lld\n", (long long)s.seqs,
              (long long)s.ctx, (long long)s.kv_heads, (long long)s.wave, (long long)P, (long long)s.want);
  }
  std::mt19937 rng(29);
  for (int i = 0; i < (kvbt_quick() ? 2000 : 20000); ++i) {
    const int64_t block = int64_t(1) << (rng() % 7), max_ctx = block * (1 + int64_t(rng() % 70000));
    const int64_t seqs = 1 + rng() % 300, kv = 1 + rng() % 16, wave = 1 + rng() % 600;
    const int stages = 2 + int(rng() % 3);
    const int64_t pp = plan_partition(seqs, kv, max_ctx, block), pn = std::max<int64_t>(1, (max_ctx + pp - 1) / pp);
    const int64_t limit = rng() % 8 == 0 ? max_ctx + 2 * pp + int64_t(rng() % 10000) : INT32_MAX - 4096;
    const int64_t P = dtiles::mma_partition_size(pp, pn, max_ctx, seqs * kv, wave, stages, limit);
    const int64_t np = (max_ctx + P - 1) / P;
    bool ok = P >= pp && P % pp == 0 && ((P / pp) & (P / pp - 1)) == 0 && np <= pn && np >= 1;
    if (pn <= 1) ok = ok && P == pp;
    if (P != pp) ok = ok && P <= dtiles::max_partition_keys(stages) && P + max_ctx < limit;
    if (!ok && bad++ < 5)
      fprintf(stderr, "  ctx %lld block %lld plan %lld x %lld: P %lld\n", (long long)max_ctx, (long long)block,
              (long long)pp, (long long)pn, (long long)P);
  }
  CHECK(bad == 0);
}

int main() {
  RUN_TEST(test_chunks_cover_every_head_once);
  RUN_TEST(test_grid_scores_every_attended_key_once);
  RUN_TEST(test_short_queries_owned_and_covered);
  RUN_TEST(test_shared_memory_fits);
  RUN_TEST(test_partition_size_for_waves);
  RUN_TEST(test_fragment_addressing_on_an_emulated_warp);
  TEST_SUMMARY();
}
