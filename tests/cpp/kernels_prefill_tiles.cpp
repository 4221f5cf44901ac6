// The CUDA prefill kernel's work decomposition (kernels/prefill/prefill_tiles.h), checked on the CPU: over
// random ragged batches, GQA groups, key-tile sizes, windows with sinks and key splits, the simulated
// grid (tiles from total rows + num_seqs, sequence by binary search, key tiles per split) covers every
// packed query row exactly once and every (row, attended key) pair exactly once, and a tile it treats
// as unmasked ("full") holds only keys every row of the CTA attends; the kernel's ldmatrix / mma
// fragment addressing and output staging on an emulated warp, for every m-tile of the 128-row CTA;
// the double-buffer schedule of block offsets and K / V; and the online softmax with a lazy row max.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <vector>

#include "../../kernels/prefill/prefill.h"
#include "../../kernels/prefill/prefill_tiles.h"
#include "harness.h"
#include "warp_model.h"

namespace {

using namespace kvb::kern;

// Simulates one batch; returns the number of violations (first few printed).
int simulate(const std::vector<int>& q_lens, const std::vector<int>& cached, int G, int bn, int window, int sink,
             int splits, bool reverse) {
  const int BM = int(kPrefillTileRows), n = int(q_lens.size());
  std::vector<int32_t> qs(size_t(n) + 1, 0);
  int max_len = 1;
  for (int i = 0; i < n; ++i) {
    qs[size_t(i) + 1] = qs[size_t(i)] + q_lens[size_t(i)];
    max_len = std::max(max_len, cached[size_t(i)] + q_lens[size_t(i)]);
  }
  const int total_q = qs[size_t(n)];
  const int num_tiles = int(int64_t(total_q) * G / BM + n);  // plan_prefill's grid
  const int per = (max_len + splits - 1) / splits;
  const int split_tiles = (per + bn - 1) / bn;
  int bad = 0;
  auto complain = [&](const char* what, int a, int b) {
    if (bad++ < 5) fprintf(stderr, "  G=%d bn=%d win=%d sink=%d splits=%d: %s (%d, %d)\n", G, bn, window, sink, splits, what, a, b);
  };
  // cover[row][key] for every query row; rows_seen[packed row] per sequence.
  std::vector<std::vector<int>> cover(size_t(total_q) * G);
  std::vector<int> row_seen(size_t(total_q) * G, 0);
  for (int tile = 0; tile < num_tiles; ++tile) {
    const int seq = tiles::seq_of_tile(qs.data(), n, G, BM, tile);
    const int64_t lt = tiles::local_tile(qs.data(), seq, G, BM, tile, reverse);
    if (lt < 0) { complain("tile before its sequence", tile, seq); continue; }
    const int pr0 = int(lt) * BM, q_len = q_lens[size_t(seq)], len = cached[size_t(seq)] + q_len;
    const int rows = std::min(BM, q_len * G - pr0);
    if (rows <= 0) continue;  // surplus tile
    const int base = len - q_len, pos_first = base + pr0 / G, pos_last = base + (pr0 + rows - 1) / G;
    for (int r = 0; r < rows; ++r) row_seen[size_t(qs[size_t(seq)]) * G + size_t(pr0 + r)]++;
    for (int split = 0; split < splits; ++split) {
      const tiles::KeyTiles kt = tiles::key_tiles(pos_first, pos_last, window, sink, bn, split, split_tiles);
      std::vector<int> seen;
      for (int i = 0; i < kt.count(); ++i) {
        const int t = kt.tile(i);
        if (t < split * split_tiles || t >= (split + 1) * split_tiles) complain("tile outside its split", t, split);
        if (std::find(seen.begin(), seen.end(), t) != seen.end()) complain("tile walked twice", t, split);
        seen.push_back(t);
        const bool full = kt.full(t);
        for (int r = 0; r < rows; ++r) {
          const int grow = qs[size_t(seq)] * G + pr0 + r, pos = base + (pr0 + r) / G;
          for (int k = t * bn; k < (t + 1) * bn; ++k) {
            const bool att = tiles::attends(k, pos, window, sink) && k < len;
            if (full && !att) complain("unmasked tile holds a key the row does not attend", pos, k);
            if (att) cover[size_t(grow)].push_back(k);
          }
        }
      }
    }
  }
  for (int i = 0; i < n; ++i)
    for (int pr = 0; pr < q_lens[size_t(i)] * G; ++pr) {
      const size_t grow = size_t(qs[size_t(i)]) * G + size_t(pr);
      if (row_seen[grow] != 1) complain("packed row covered", int(grow), row_seen[grow]);
      const int pos = cached[size_t(i)] + pr / G;
      std::vector<int> want;
      for (int k = 0; k <= pos; ++k)
        if (tiles::attends(k, pos, window, sink)) want.push_back(k);
      std::vector<int> got = cover[grow];
      std::sort(got.begin(), got.end());
      if (got != want) complain("row's attended keys", pos, int(got.size()) - int(want.size()));
    }
  return bad;
}

void test_grid_covers_every_row_and_key_once() {
  std::mt19937 rng(11);
  int bad = 0, batches = 0;
  const int rounds = kvbt_quick() ? 20 : 200;
  for (int round = 0; round < rounds; ++round) {
    const int n = 1 + int(rng() % 6);
    std::vector<int> q_lens, cached;
    for (int i = 0; i < n; ++i) {
      const int kind = int(rng() % 4);
      q_lens.push_back(kind == 0 ? 0 : kind == 1 ? 1 : int(rng() % 150) + 1);
      cached.push_back(rng() % 3 == 0 ? 0 : int(rng() % 300));
    }
    const int groups[] = {1, 3, 4, 8, 12};
    const int key_tiles[] = {16, 32, 64};  // 16: D 256 where a block gets < 130 KB of shared memory
    const int G = groups[rng() % 5], bn = key_tiles[rng() % 3];
    const int window = rng() % 2 ? 0 : 1 + int(rng() % 120);
    const int sink = window > 0 && rng() % 2 ? int(rng() % 40) : 0;
    const int splits = 1 + int(rng() % 3);
    for (bool reverse : {false, true}) bad += simulate(q_lens, cached, G, bn, window, sink, splits, reverse);
    ++batches;
  }
  // Edges: a batch of decodes only, one long prompt, a window of 1 with a sink past it.
  for (bool reverse : {false, true}) {
    bad += simulate({1, 1, 1, 1}, {0, 5, 64, 200}, 4, 64, 0, 0, 2, reverse);
    bad += simulate({700}, {0}, 1, 64, 0, 0, 3, reverse);
    bad += simulate({40, 3}, {100, 0}, 8, 32, 1, 50, 1, reverse);
    bad += simulate({0, 129, 0, 128, 127}, {3, 0, 0, 1, 0}, 1, 16, 0, 0, 1, reverse);  // tile edges at G 1
  }
  CHECK(bad == 0);
  CHECK(batches > 0);
}

// The grid's x enumerates every (query tile, kv head) once, kv head fastest: the first CTAs the GPU
// starts are tile 0 (with the reverse walk, a sequence's longest) of every kv head.
void test_cta_order_covers_every_tile_and_head_once_kv_head_fastest() {
  int bad = 0;
  for (int heads : {1, 2, 8, 5})
    for (int tiles_n : {1, 3, 129}) {
      std::vector<int> seen(size_t(tiles_n * heads), 0);
      for (int x = 0; x < tiles_n * heads; ++x) {
        const tiles::CtaTile c = tiles::cta_tile(x, heads);
        if (c.tile < 0 || c.tile >= tiles_n || c.kv_head < 0 || c.kv_head >= heads) { ++bad; continue; }
        ++seen[size_t(c.tile * heads + c.kv_head)];
        if (x < heads && (c.tile != 0 || c.kv_head != x)) ++bad;
      }
      for (int v : seen) bad += v != 1;
    }
  CHECK(bad == 0);
}

// The kernel's addressing (tiles::frag) on the emulated warp must produce S = Q K^T and O = P V exactly
// (small integers: every sum is exact in float).
using emu::Warp;

// The kernel's S and O loops for one m-tile (16 rows, `warp` here = tiles::mtile_of(warp, mi)) of a
// D x BN tile, against direct products, then the output's round trip through the staging tile (pairs
// stored at frag::o_stage, rows read back as 16-byte chunks at swz); returns mismatches.
int emulate(int D, int BN, int warp, std::mt19937& rng) {
  namespace fr = tiles::frag;
  const int C = D / 8, NT = BN / 8, DT = D / 8, BM = int(kPrefillTileRows);
  Warp w;
  const uint32_t q0 = 0, k0 = uint32_t(BM * D * 2), v0 = k0 + uint32_t(BN * D * 2);  // byte bases
  w.smem.assign(size_t(BM * D + 2 * BN * D), 0.f);
  std::vector<float> Q(size_t(BM * D)), K(size_t(BN * D)), V(size_t(BN * D));
  auto put = [&](uint32_t base, int r, int d, float x) { w.smem[(base + fr::swz(C, r, d / 8)) / 2 + uint32_t(d % 8)] = x; };
  for (int r = 0; r < BM; ++r)
    for (int d = 0; d < D; ++d) put(q0, r, d, Q[size_t(r * D + d)] = float(int(rng() % 5) - 2));
  for (int r = 0; r < BN; ++r)
    for (int d = 0; d < D; ++d) {
      put(k0, r, d, K[size_t(r * D + d)] = float(int(rng() % 5) - 2));
      put(v0, r, d, V[size_t(r * D + d)] = float(int(rng() % 5) - 2));
    }
  int bad = 0;
  // The kernel's tiles start at multiples of 1 KiB, so base ^ constant addresses the tile's own chunks.
  if (k0 % 1024 != 0 || v0 % 1024 != 0) ++bad;
  // S = Q K^T, as the kernel's loop over kk and pairs of n-tiles.
  std::vector<float> s(size_t(NT) * 32 * 4, 0.f);
  auto S = [&](int n) { return reinterpret_cast<float(*)[4]>(&s[size_t(n) * 128]); };
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t addr[32];
    Warp::Regs a, b;
    for (int l = 0; l < 32; ++l) addr[l] = fr::q_addr(q0 + fr::q_base(C, warp, l), kk);  // as the kernel
    w.ldsm(addr, false, a);
    for (int n2 = 0; n2 < NT / 2; ++n2) {
      for (int l = 0; l < 32; ++l) addr[l] = fr::k_addr(C, k0 + fr::k_base(C, l), n2, kk);
      w.ldsm(addr, false, b);
      Warp::mma(*reinterpret_cast<float(*)[32][4]>(S(2 * n2)), a, b, 0, 1);
      Warp::mma(*reinterpret_cast<float(*)[32][4]>(S(2 * n2 + 1)), a, b, 2, 3);
    }
  }
  for (int n = 0; n < NT; ++n)
    for (int l = 0; l < 32; ++l)
      for (int e = 0; e < 4; ++e) {
        const int row = warp * 16 + fr::c_row(l, e), key = n * 8 + fr::c_col(l, e);
        float want = 0;
        for (int d = 0; d < D; ++d) want += Q[size_t(row * D + d)] * K[size_t(key * D + d)];
        if (S(n)[l][e] != want && bad++ < 3) fprintf(stderr, "  D=%d S row %d key %d: %g want %g\n", D, row, key, S(n)[l][e], want);
      }
  // O = P V with P = S repacked into A fragments as the kernel does.
  std::vector<float> o(size_t(DT) * 128, 0.f);
  for (int kk = 0; kk < BN / 16; ++kk) {
    Warp::Regs a, b;
    for (int l = 0; l < 32; ++l)
      for (int h = 0; h < 2; ++h) {
        a[l][0][h] = S(2 * kk)[l][h];
        a[l][1][h] = S(2 * kk)[l][2 + h];
        a[l][2][h] = S(2 * kk + 1)[l][h];
        a[l][3][h] = S(2 * kk + 1)[l][2 + h];
      }
    for (int d2 = 0; d2 < DT / 2; ++d2) {
      uint32_t addr[32];
      for (int l = 0; l < 32; ++l) addr[l] = fr::v_addr(C, v0 + fr::v_base(C, l), kk, d2);
      w.ldsm(addr, true, b);
      Warp::mma(*reinterpret_cast<float(*)[32][4]>(&o[size_t(2 * d2) * 128]), a, b, 0, 1);
      Warp::mma(*reinterpret_cast<float(*)[32][4]>(&o[size_t(2 * d2 + 1) * 128]), a, b, 2, 3);
    }
  }
  for (int dt = 0; dt < DT; ++dt)
    for (int l = 0; l < 32; ++l)
      for (int e = 0; e < 4; ++e) {
        const int r = fr::c_row(l, e), col = dt * 8 + fr::c_col(l, e);
        float want = 0;
        for (int n = 0; n < NT; ++n)
          for (int l2 = 0; l2 < 32; ++l2)
            for (int e2 = 0; e2 < 4; ++e2)
              if (fr::c_row(l2, e2) == r) want += S(n)[l2][e2] * V[size_t((n * 8 + fr::c_col(l2, e2)) * D + col)];
        if (o[size_t(dt) * 128 + size_t(l) * 4 + size_t(e)] != want && bad++ < 3)
          fprintf(stderr, "  D=%d O row %d col %d: %g want %g\n", D, r, col, o[size_t(dt) * 128 + size_t(l) * 4 + size_t(e)], want);
      }
  // Output staging: each lane stores its (e 2h, 2h + 1) pair of every d-tile as 4 bytes at o_stage (in
  // the Q tile); then the row is read back chunk by chunk as the 16-byte stores do. Every byte of the
  // warp's 16 rows must be written exactly once, and the chunks must hold O in order.
  std::vector<int> writes(size_t(BM * D), 0);
  std::vector<float> stage(size_t(BM * D), std::nanf(""));
  for (int dt = 0; dt < DT; ++dt)
    for (int l = 0; l < 32; ++l)
      for (int h = 0; h < 2; ++h) {
        const uint32_t byte = q0 + fr::o_stage(C, warp, l, h, dt);
        if (byte % 4 != 0) ++bad;
        for (int j = 0; j < 2; ++j) {
          writes[byte / 2 + uint32_t(j)]++;
          stage[byte / 2 + uint32_t(j)] = o[size_t(dt) * 128 + size_t(l) * 4 + size_t(2 * h + j)];
        }
      }
  for (int i = 0; i < BM * D; ++i) {
    const int in_warp = i / D / 16 == warp ? 1 : 0;  // the swizzle keeps a row inside its own D elements
    if (writes[size_t(i)] != in_warp && bad++ < 3) fprintf(stderr, "  D=%d staging element %d written %d times\n", D, i, writes[size_t(i)]);
  }
  for (int r = warp * 16; r < warp * 16 + 16; ++r)
    for (int c = 0; c < C; ++c)
      for (int x = 0; x < 8; ++x) {
        const float got = stage[(q0 + fr::swz(C, r, c)) / 2 + uint32_t(x)];
        float want = 0;
        const int col = 8 * c + x;
        for (int n = 0; n < NT; ++n)
          for (int l2 = 0; l2 < 32; ++l2)
            for (int e2 = 0; e2 < 4; ++e2)
              if (warp * 16 + fr::c_row(l2, e2) == r) want += S(n)[l2][e2] * V[size_t((n * 8 + fr::c_col(l2, e2)) * D + col)];
        if (got != want && bad++ < 3) fprintf(stderr, "  D=%d staged out row %d col %d: %g want %g\n", D, r, col, got, want);
      }
  return bad;
}

// A query at position 2^31 - 2 (the longest sequence a table may describe) with a window of 16 and
// sinks to INT_MAX (the kernel's clamp of sink_tokens near 2^32): every key is a sink or in the window,
// so the sink tiles run up to the query's tile. ceil(sinks / bn) was (sinks + bn - 1) / bn, past INT_MAX.
void test_key_tiles_near_int_max() {
  const int pos = 0x7ffffffe, bn = 64, split_tiles = pos / bn + 1;
  const tiles::KeyTiles kt = tiles::key_tiles(pos, pos, 16, 0x7fffffff, bn, 0, split_tiles);
  CHECK(kt.a0 == 0);
  CHECK(kt.a1 == split_tiles);
  CHECK(kt.count() == split_tiles);
  CHECK(kt.tile(kt.count() - 1) == pos / bn);
}

void test_fragment_addressing_on_an_emulated_warp() {
  std::mt19937 rng(5);
  int bad = 0;
  for (int D : {64, 128, 256}) {
    const int NW = tiles::cta_warps(D), MI = tiles::mtiles_per_warp(D);
    CHECK(16 * NW * MI == int(kPrefillTileRows));  // the CTA's warps cover its rows
    std::vector<int> mt_seen(size_t(kPrefillTileRows / 16), 0);
    for (int warp = 0; warp < NW; ++warp)
      for (int mi = 0; mi < MI; ++mi) mt_seen[size_t(tiles::mtile_of(warp, mi, MI))]++;
    for (int x : mt_seen) CHECK(x == 1);  // every m-tile by exactly one (warp, mi)
    for (int warp = 0; warp < NW; ++warp)
      for (int mi = 0; mi < MI; ++mi)
        if (!kvbt_quick() || warp == NW - 1) {
          bad += emulate(D, prefill_key_tile(D), tiles::mtile_of(warp, mi, MI), rng);
          if (D == 256) bad += emulate(D, 16, tiles::mtile_of(warp, mi, MI), rng);  // the small-smem variant
          if (D == 64) bad += emulate(D, 32, tiles::mtile_of(warp, mi, MI), rng);   // fp8 tree-mask kernels
        }
  }
  CHECK(bad == 0);
}

// The kernel's pipeline, event by event, for walks of 0..7 key tiles: block offsets of tile t are
// written to stage kv_stage(t) (tiles 0, 1 before the first barrier, tile i + 2 after iteration i's
// compute), load_kv(t) reads them and starts the asynchronous K / V copy into stage kv_stage(t) (tile
// 0 before the loop, tile i + 1 after the one barrier of iteration i), which lands at iteration t's
// wait (all copies) + barrier, where the MMAs read it. Between two barriers (an epoch) no stage may be
// both written and read; an in-flight copy may not overlap a read of its stage; every read must find
// its own tile.
void test_pipeline_stages_are_never_overwritten_before_use() {
  int bad = 0;
  for (int n = 0; n <= 7; ++n) {
    int epoch = 0;
    int off_tile[2] = {-1, -1}, off_w_epoch[2] = {-1, -1}, off_r_epoch[2] = {-1, -1};
    int kv_tile[2] = {-1, -1}, kv_inflight_from[2] = {-1, -1}, kv_r_epoch[2] = {-1, -1};
    auto off_write = [&](int t) {
      const int st = tiles::kv_stage(t);
      if (off_r_epoch[st] == epoch) ++bad;  // a reader in the same epoch
      off_tile[st] = t, off_w_epoch[st] = epoch;
    };
    auto load_kv = [&](int t) {  // reads the offsets, starts the copy
      const int st = tiles::kv_stage(t);
      if (off_tile[st] != t || off_w_epoch[st] == epoch) ++bad;
      off_r_epoch[st] = epoch;
      if (kv_r_epoch[st] == epoch || kv_inflight_from[st] >= 0) ++bad;  // stage still being read / filled
      kv_tile[st] = t, kv_inflight_from[st] = epoch;
    };
    auto wait_all_but_newest = [&](int newest_stage) {  // cp.async.wait_group 1 (0 when < 0)
      for (int st = 0; st < 2; ++st)
        if (st != newest_stage) kv_inflight_from[st] = -1;
    };
    if (n > 0) off_write(0);
    if (n > 1) off_write(1);
    ++epoch;  // barrier
    if (n > 0) load_kv(0);
    for (int i = 0; i < n; ++i) {
      wait_all_but_newest(-1);  // cp.async.wait_group 0
      ++epoch;  // the iteration's one barrier
      if (i + 1 < n) load_kv(i + 1);
      const int st = tiles::kv_stage(i);
      if (kv_tile[st] != i || kv_inflight_from[st] >= 0) ++bad;  // MMAs read K / V of tile i
      kv_r_epoch[st] = epoch;
      if (i + 2 < n) off_write(i + 2);
    }
    if (bad) fprintf(stderr, "  pipeline of %d tiles: %d violations\n", n, bad);
  }
  CHECK(bad == 0);
}

// The kernel's online softmax with the lazy row max (prefill_tiles.h row_max_moves), replayed on one
// row in float over key tiles of 32: the output must be the exact softmax-weighted sum (a double
// reference), every exponent qs x - u must stay <= kMaxSlackLog2 (P <= 256 fits fp16 / bf16 and the
// fp32 sums), and the reference max must move rarely: once for random logits at the scale of D 128;
// the kernel's vote on each thread's part of a row must decide as the row max would. Rows masked so
// far (-inf) and fully masked rows too.
void test_lazy_row_max_softmax_is_exact_and_rarely_rescales() {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  int bad = 0;
  const int BN = 32;
  for (int kind = 0; kind < 5; ++kind)
    for (float qs : {0.1275f, 1.f, 1e-3f, 30.f}) {
      const int n = 4096;
      std::vector<float> x(static_cast<size_t>(n)), v(static_cast<size_t>(n));
      for (int k = 0; k < n; ++k) {
        v[size_t(k)] = nd(rng);
        switch (kind) {
          case 0: x[size_t(k)] = 11.3f * nd(rng); break;                    // raw logits of D 128 unit q, k
          case 1: x[size_t(k)] = float(k) * 0.25f / qs; break;             // rising: the max moves every tile
          case 2: x[size_t(k)] = k < 1000 ? -INFINITY : 11.3f * nd(rng); break;  // masked prefix
          case 3: x[size_t(k)] = -INFINITY; break;                          // a fully masked row
          default: x[size_t(k)] = (k % 97 == 5 ? 200.f : 1.f) * nd(rng); break;  // rare large logits
        }
      }
      const float slack = tiles::max_slack_raw(qs);
      float m = -INFINITY, l = 0.f, o = 0.f, max_arg = -INFINITY;
      int moves = 0;
      for (int t = 0; t < n / BN; ++t) {
        float mx = m;
        for (int k = t * BN; k < (t + 1) * BN; ++k) mx = std::fmax(mx, x[size_t(k)]);
        const bool mv = tiles::row_max_moves(m, mx, slack);
        // The kernel votes on each thread's part of the row (thread c of the row's 4 holds columns 2c,
        // 2c + 1 of every 8-key n-tile) and shuffles the row max only when some part moves.
        bool part_moves = false;
        for (int c = 0; c < 4; ++c) {
          float part = m;
          for (int k = t * BN; k < (t + 1) * BN; ++k)
            if (tiles::frag::c_col(c, 0) / 2 == (k % 8) / 2) part = std::fmax(part, x[size_t(k)]);
          part_moves |= tiles::row_max_moves(m, part, slack);
        }
        if (part_moves != mv && ++bad <= 5)
          fprintf(stderr, "  kind %d tile %d: a part moves %d, the row %d\n", kind, t, int(part_moves), int(mv));
        const float mn = mv ? mx : m;
        const float u = mn == -INFINITY ? 0.f : mn * qs;
        const float al = mv ? std::exp2(m * qs - u) : 1.f;
        moves += mv;
        float lt = 0.f, ot = 0.f;
        for (int k = t * BN; k < (t + 1) * BN; ++k) {
          const float arg = std::fma(x[size_t(k)], qs, -u);
          max_arg = std::fmax(max_arg, arg);
          const float pk = std::exp2(arg);
          lt += pk, ot += pk * v[size_t(k)];
        }
        l = l * al + lt, o = o * al + ot, m = mn;
      }
      double M = -INFINITY, L = 0, O = 0;
      for (int k = 0; k < n; ++k) M = std::max(M, double(x[size_t(k)]));
      if (M > -INFINITY)
        for (int k = 0; k < n; ++k) {
          const double w = std::exp2((double(x[size_t(k)]) - M) * qs);
          L += w, O += w * v[size_t(k)];
        }
      const double want = L > 0 ? O / L : 0.0, got = l > 0.f ? double(o) / l : 0.0;
      // Random logits at a real scale (qs of D 128: the slack is 5.5 standard deviations) move it once,
      // on the first tile; others at most once a tile.
      const int max_moves = kind == 3 ? 0 : kind == 0 && qs < 0.2f ? 1 : n / BN;
      if (!(std::fabs(got - want) <= 1e-4 * (1 + std::fabs(want))) || !(max_arg <= tiles::kMaxSlackLog2 * 1.0001f) ||
          moves > max_moves || (kind != 3 && moves == 0)) {
        if (++bad <= 5)
          fprintf(stderr, "  kind %d qs %g: got %g want %g, max exponent %g, %d moves\n", kind, double(qs), got, want,
                  double(max_arg), moves);
      }
    }
  // The rule itself: -inf moves to any finite max, never to -inf or NaN; a kept max stays bit-exact.
  const float sl = tiles::max_slack_raw(1.f);
  CHECK(tiles::row_max_moves(-INFINITY, -1e30f, sl) && !tiles::row_max_moves(-INFINITY, -INFINITY, sl));
  CHECK(!tiles::row_max_moves(3.f, NAN, sl) && !tiles::row_max_moves(3.f, 3.f + tiles::kMaxSlackLog2, sl));
  CHECK(tiles::row_max_moves(3.f, 3.f + 2 * tiles::kMaxSlackLog2, sl));
  CHECK(tiles::row_max_moves(-INFINITY, -1e30f, tiles::max_slack_raw(1e-40f)));  // a tiny scale: slack stays finite
  CHECK(bad == 0);
}

}  // namespace

// The tree part of the CUDA mask: after mask_from(base) no tile holding a key >= base is full (so every
// tree key goes through the words), tiles wholly before it stay full as before; tree_sees reads the
// word's bits below the row (and sees the row itself and everything before the tree).
void test_tree_mask_tiles_and_columns() {
  std::mt19937 rng(17);
  int bad = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const int bn = trial % 2 ? 32 : 64, q_len = 1 + int(rng() % 64), base = int(rng() % 300);
    const int pos_first = base + int(rng() % uint32_t(q_len)), pos_last = base + q_len - 1;
    tiles::KeyTiles kt = tiles::key_tiles(pos_first, pos_last, 0, 0, bn, 0, 1 << 20);
    const tiles::KeyTiles plain = kt;
    kt.mask_from(base);
    for (int i = 0; i < kt.count(); ++i) {
      const int t = kt.tile(i);
      if (kt.full(t) && (t + 1) * bn > base) bad++;               // a full tile reaching the tree
      if (kt.full(t) != (plain.full(t) && (t + 1) * bn <= base)) bad++;  // anything else changed
    }
    const uint64_t word = uint64_t(rng()) << 32 | rng();
    const int pos = base + int(rng() % uint32_t(q_len));
    for (int key = std::max(0, base - 40); key <= pos; ++key) {
      const bool want = key < base || key == pos || ((word >> (key - base)) & 1);
      if (tiles::tree_sees(key, pos, base, word) != want) bad++;
    }
  }
  CHECK(bad == 0);
}

int main() {
  RUN_TEST(test_grid_covers_every_row_and_key_once);
  RUN_TEST(test_tree_mask_tiles_and_columns);
  RUN_TEST(test_key_tiles_near_int_max);
  RUN_TEST(test_cta_order_covers_every_tile_and_head_once_kv_head_fastest);
  RUN_TEST(test_fragment_addressing_on_an_emulated_warp);
  RUN_TEST(test_pipeline_stages_are_never_overwritten_before_use);
  RUN_TEST(test_lazy_row_max_softmax_is_exact_and_rarely_rescales);
  TEST_SUMMARY();
}
