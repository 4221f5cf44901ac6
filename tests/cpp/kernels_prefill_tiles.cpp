// The CUDA prefill kernel's work decomposition (kernels/prefill_tiles.h), checked on the CPU: over
// random ragged batches, GQA groups, key-tile sizes, windows with sinks and key splits, the simulated
// grid (tiles from total rows + num_seqs, sequence by binary search, key tiles per split) covers every
// packed query row exactly once and every (row, attended key) pair exactly once, and a tile it treats
// as unmasked ("full") holds only keys every row of the CTA attends.
#include <algorithm>
#include <cstdlib>
#include <random>
#include <vector>

#include "../../kernels/prefill.h"
#include "../../kernels/prefill_tiles.h"
#include "harness.h"

namespace {

using namespace kvb::kern;

bool quick() {
  const char* q = getenv("KVB_TEST_QUICK");
  return q && q[0] == '1';
}

// Simulates one batch; returns the number of violations (first few printed).
int simulate(const std::vector<int>& q_lens, const std::vector<int>& cached, int G, int bn, int window, int sink,
             int splits) {
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
    const int64_t lt = tile - tiles::tile_base(qs[size_t(seq)], seq, G, BM);
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
  const int rounds = quick() ? 20 : 200;
  for (int round = 0; round < rounds; ++round) {
    const int n = 1 + int(rng() % 6);
    std::vector<int> q_lens, cached;
    for (int i = 0; i < n; ++i) {
      const int kind = int(rng() % 4);
      q_lens.push_back(kind == 0 ? 0 : kind == 1 ? 1 : int(rng() % 150) + 1);
      cached.push_back(rng() % 3 == 0 ? 0 : int(rng() % 300));
    }
    const int groups[] = {1, 3, 4, 8, 12};
    const int G = groups[rng() % 5], bn = rng() % 2 ? 32 : 64;
    const int window = rng() % 2 ? 0 : 1 + int(rng() % 120);
    const int sink = window > 0 && rng() % 2 ? int(rng() % 40) : 0;
    const int splits = 1 + int(rng() % 3);
    bad += simulate(q_lens, cached, G, bn, window, sink, splits);
    ++batches;
  }
  // Edges: a batch of decodes only, one long prompt, a window of 1 with a sink past it.
  bad += simulate({1, 1, 1, 1}, {0, 5, 64, 200}, 4, 64, 0, 0, 2);
  bad += simulate({700}, {0}, 1, 64, 0, 0, 3);
  bad += simulate({40, 3}, {100, 0}, 8, 32, 1, 50, 1);
  CHECK(bad == 0);
  CHECK(batches > 0);
}

}  // namespace

int main() {
  RUN_TEST(test_grid_covers_every_row_and_key_once);
  TEST_SUMMARY();
}
