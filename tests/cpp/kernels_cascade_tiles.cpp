// The CUDA tensor-core shared-prefix kernel's work list (kernels/cascade/cascade_tiles.h), checked on the CPU:
// over random batches (decode: one row each; extend / prefill: ragged rows), random disjoint groups
// with shared prefixes (some reaching into the members' new tokens), GQA groups, windows with sinks and
// key splits, the simulated grid (shared tiles from the member row prefix, then the plain prefill's own
// tiles) attends every (query row, head, key) pair exactly as the plain rule says (tiles::attends, keys
// [0, seq_len)) exactly once, a tile treated as unmasked ("full") holds only keys every row attends, the
// host's tile bound covers every shared tile, and every workspace part the merge reads is written
// exactly once. Also: the K / V copy of a key tile covers every (key, chunk) exactly once.
#include <algorithm>
#include <cstdlib>
#include <random>
#include <vector>

#include "../../kernels/cascade/cascade_tiles.h"
#include "harness.h"

namespace {

using namespace kvb::kern;

struct Batch {
  bool decode = true;
  int G = 1, window = 0, sink = 0, bn = 64;
  std::vector<int> q_len, len;            // per sequence
  std::vector<int32_t> query_start;       // prefill only
  std::vector<int> group_start, members, shared;  // shared tokens per group
};

// Simulates the grid of cascade_mma_kernel for one kv head; returns the number of violations.
int simulate(const Batch& b, int shared_splits, int shared_st, int own_splits, int own_st) {
  const int n = int(b.len.size()), G = b.G, T = ctiles::kTileRows;
  const int total_q = b.decode ? n : b.query_start[size_t(n)];
  auto row0 = [&](int s) { return b.decode ? s : b.query_start[size_t(s)]; };
  const int ng = int(b.shared.size()), nm = int(b.members.size());
  int bad = 0;
  auto fail = [&](const char* what, int a, int c, int d) {
    if (bad++ < 5) fprintf(stderr, "  %s (%d, %d, %d)\n", what, a, c, d);
  };
  // (q row, head, key) -> count; (ws row, head, part) -> writes (dense)
  int max_len = 1;
  for (int l : b.len) max_len = std::max(max_len, l);
  const int np = shared_splits + own_splits;
  std::vector<int> seen(size_t(total_q) * G * size_t(max_len), 0), parts(size_t(total_q) * G * size_t(np), 0);
  auto key_at = [&](int row, int h, int k) -> int& { return seen[(size_t(row) * G + size_t(h)) * size_t(max_len) + size_t(k)]; };
  auto part_at = [&](int row, int h, int z) -> int& { return parts[(size_t(row) * G + size_t(h)) * size_t(np) + size_t(z)]; };
  auto attend_tile = [&](const ctiles::KeyRange& kr, const std::vector<int>& pos, const std::vector<int>& qrow,
                         const std::vector<int>& head) {
    int pmin = 1 << 30, pmax = -1;
    for (int p : pos)
      if (p >= 0) pmin = std::min(pmin, p), pmax = std::max(pmax, p);
    const ctiles::Walk w = ctiles::walk(kr.k0, kr.k1, b.bn, pmin, pmax, b.window, b.sink);
    for (int i = 0; i < w.count(); ++i) {
      const int k0 = w.first_key(i);
      if (i > 0 && w.tile(i) <= w.tile(i - 1)) fail("walk not increasing", i, w.tile(i), 0);
      for (size_t r = 0; r < pos.size(); ++r)
        for (int k = k0; k < k0 + b.bn; ++k) {
          const bool att = k < kr.k1 && pos[r] >= 0 && tiles::attends(k, pos[r], b.window, b.sink);
          if (w.full(i) && pos[r] >= 0 && !att) fail("full tile holds a masked key", qrow[r], k, i);
          if (att && k < max_len) ++key_at(qrow[r], head[r], k);
          if (att && k >= max_len) fail("key past every sequence", qrow[r], k, i);
        }
    }
  };
  // Shared tiles, rebuilt as the kernel does from the member row counts.
  std::vector<int> mrow(size_t(nm) + 1, 0), grows(static_cast<size_t>(ng), 0), tbase(static_cast<size_t>(ng) + 1, 0);
  for (int k = 0; k < nm; ++k) mrow[size_t(k) + 1] = mrow[size_t(k)] + b.q_len[size_t(b.members[size_t(k)])] * G;
  ctiles::group_tiles(mrow.data(), b.group_start.data(), ng, grows.data(), tbase.data());
  const int bound = int(ctiles::shared_tile_bound(total_q, G, ng));
  if (tbase[size_t(ng)] > bound) fail("shared tiles exceed the launch bound", tbase[size_t(ng)], bound, 0);
  std::vector<int> member_group(size_t(n), -1);
  for (int g = 0; g < ng; ++g)
    for (int k = b.group_start[size_t(g)]; k < b.group_start[size_t(g) + 1]; ++k) member_group[size_t(b.members[size_t(k)])] = g;
  for (int x = 0; x < bound; ++x) {
    const ctiles::SharedTile t = ctiles::shared_tile(tbase.data(), grows.data(), ng, x);
    if (t.group < 0) continue;
    if (t.rows <= 0 || t.rows > T) fail("shared tile rows", x, t.rows, 0);
    std::vector<int> pos, qrow, head, wsrow;
    for (int r = 0; r < t.rows; ++r) {
      const ctiles::RowRef rr = ctiles::row_of(mrow.data(), b.group_start[size_t(t.group)],
                                               b.group_start[size_t(t.group) + 1], G, t.row0 + r);
      const int s = b.members[size_t(rr.member)];
      if (member_group[size_t(s)] != t.group || rr.j < 0 || rr.j >= b.q_len[size_t(s)]) fail("row_of", x, r, s);
      pos.push_back(b.len[size_t(s)] - b.q_len[size_t(s)] + rr.j);
      qrow.push_back(row0(s) + rr.j);
      head.push_back(rr.h);
      wsrow.push_back(qrow.back());
    }
    for (int z = 0; z < shared_splits; ++z) {
      attend_tile(ctiles::split_range(0, b.shared[size_t(t.group)], z, shared_st), pos, qrow, head);
      for (size_t r = 0; r < qrow.size(); ++r) ++part_at(wsrow[r], head[r], z);
    }
  }
  // Own tiles (the plain prefill's tiling; at decode one tile per sequence, as cascade_own's one warp).
  std::vector<int32_t> qs(size_t(n) + 1, 0);
  for (int s = 0; s < n; ++s) qs[size_t(s) + 1] = qs[size_t(s)] + b.q_len[size_t(s)];
  const int own = int(ctiles::own_tile_count(total_q, G, n));
  const int zmax = std::max(shared_splits, own_splits);
  for (int t = 0; t < own; ++t) {
    const int s = tiles::seq_of_tile(qs.data(), n, G, T, t);
    const int pr0 = int(tiles::local_tile(qs.data(), s, G, T, t, false)) * T;
    const int rows = std::min(T, b.q_len[size_t(s)] * G - pr0);
    if (rows <= 0) continue;
    const int g = member_group[size_t(s)];
    const int S = g >= 0 ? b.shared[size_t(g)] : 0;
    std::vector<int> pos, qrow, head;
    for (int r = 0; r < rows; ++r) {
      const int pr = pr0 + r;
      pos.push_back(b.len[size_t(s)] - b.q_len[size_t(s)] + pr / G);
      qrow.push_back(qs[size_t(s)] + pr / G);
      head.push_back(pr % G);
    }
    for (int z = 0; z < zmax; ++z) {
      if (g < 0 && z < shared_splits)
        for (size_t r = 0; r < qrow.size(); ++r) ++part_at(qrow[r], head[r], z);
      if (z >= own_splits) continue;
      attend_tile(ctiles::split_range(S, b.len[size_t(s)], z, own_st), pos, qrow, head);
      for (size_t r = 0; r < qrow.size(); ++r) ++part_at(qrow[r], head[r], shared_splits + z);
    }
  }
  // Every (row, head, key) as the plain rule says, once; every part once.
  size_t expected = 0, expected_parts = 0;
  for (int s = 0; s < n; ++s)
    for (int j = 0; j < b.q_len[size_t(s)]; ++j)
      for (int h = 0; h < G; ++h) {
        const int pos = b.len[size_t(s)] - b.q_len[size_t(s)] + j, row = qs[size_t(s)] + j;
        for (int k = 0; k < b.len[size_t(s)]; ++k) {
          const bool att = tiles::attends(k, pos, b.window, b.sink);
          if (key_at(row, h, k) != (att ? 1 : 0)) fail("key coverage", row, h, k);
          expected += att;
        }
        for (int z = 0; z < shared_splits + own_splits; ++z) {
          if (part_at(row, h, z) != 1) fail("part written", row, h, z);
          ++expected_parts;
        }
      }
  size_t total = 0, total_parts = 0;
  for (int c : seen) total += size_t(c);
  for (int c : parts) total_parts += size_t(c);
  if (total != expected) fail("extra keys", int(total), int(expected), 0);
  if (total_parts != expected_parts) fail("extra parts", int(total_parts), int(expected_parts), 0);
  return bad;
}

// A random batch: n sequences, some in groups sharing block-aligned prefixes.
Batch random_batch(std::mt19937& rng, bool decode) {
  Batch b;
  b.decode = decode;
  const int n = 1 + int(rng() % 12), bs = 16;
  const int gs[] = {1, 2, 4, 8, 16, 32, 128};
  b.G = gs[rng() % (decode ? 7 : 5)];  // up to 128 heads per kv head at decode, 16 with long rows
  b.bn = rng() % 2 ? 64 : 32;
  if (rng() % 3 == 0) b.window = 1 + int(rng() % 200), b.sink = int(rng() % 3) * int(rng() % 40);
  std::vector<int> perm(static_cast<size_t>(n), 0);
  for (int i = 0; i < n; ++i) perm[size_t(i)] = i;
  std::shuffle(perm.begin(), perm.end(), rng);
  // Groups of consecutive entries of the permutation; the rest in no group.
  const int prefix = bs * int(rng() % 20);
  int i = 0;
  b.group_start.push_back(0);
  b.q_len.assign(size_t(n), 1);
  b.len.assign(size_t(n), 0);
  for (int s = 0; s < n; ++s) {
    b.q_len[size_t(s)] = decode ? 1 : int(rng() % 4 == 0 ? 0 : 1 + rng() % 40);
    b.len[size_t(s)] = b.q_len[size_t(s)] + int(rng() % 200);
  }
  while (i < n && rng() % 4 != 0) {
    const int m = std::min(n - i, 1 + int(rng() % 5));
    int shared = bs * int(rng() % (prefix / bs + 2));
    for (int k = i; k < i + m; ++k) {
      const int s = perm[size_t(k)];
      b.members.push_back(s);
      // A member holds at least the shared tokens (the kernel's contract), sometimes with new tokens inside.
      b.len[size_t(s)] = std::max(b.len[size_t(s)], shared + (rng() % 3 == 0 ? 0 : b.q_len[size_t(s)]));
      b.len[size_t(s)] = std::max(b.len[size_t(s)], b.q_len[size_t(s)]);
    }
    b.shared.push_back(shared);
    i += m;
    b.group_start.push_back(int(b.members.size()));
  }
  if (!decode) {
    b.query_start.assign(size_t(n) + 1, 0);
    for (int s = 0; s < n; ++s) b.query_start[size_t(s) + 1] = b.query_start[size_t(s)] + b.q_len[size_t(s)];
  }
  return b;
}

void test_work_list_covers_every_row_head_and_key_once() {
  std::mt19937 rng(24);
  const int iters = kvbt_quick() ? 100 : 600;
  for (int it = 0; it < iters; ++it) {
    const Batch b = random_batch(rng, it % 2 == 0);
    int max_shared = 0, max_len = 1;
    for (int s : b.shared) max_shared = std::max(max_shared, s);
    for (int l : b.len) max_len = std::max(max_len, l);
    const int ss = 1 + int(rng() % 4), os = b.decode ? 0 : 1 + int(rng() % 4);
    const int sst = std::max(b.bn, (max_shared + ss - 1) / ss / b.bn * b.bn + b.bn);
    const int ost = std::max(b.bn, (max_len + std::max(os, 1) - 1) / std::max(os, 1) / b.bn * b.bn + b.bn);
    // At decode cascade_own takes the own keys: simulate them as one own split there.
    const int bad = simulate(b, ss, sst, b.decode ? 1 : os, ost);
    if (bad) fprintf(stderr, "iteration %d (decode %d, G %d, window %d, sink %d): %d violations\n", it, b.decode, b.G,
                     b.window, b.sink, bad);
    CHECK(bad == 0);
    if (bad) return;
  }
}

void test_shared_tile_and_row_lookup_skip_empty_members_and_groups() {
  // Members 0..4 with packed rows 0, 70, 0, 5, 0; groups {0, 1} {2} {3, 4}; 64-row tiles.
  const int mrow[] = {0, 0, 70, 70, 75, 75};
  const int group_start[] = {0, 2, 3, 5};
  int grows[3], tbase[4];
  ctiles::group_tiles(mrow, group_start, 3, grows, tbase);
  CHECK(grows[0] == 70 && grows[1] == 0 && grows[2] == 5);
  CHECK(tbase[0] == 0 && tbase[1] == 2 && tbase[2] == 2 && tbase[3] == 3);
  const ctiles::SharedTile t1 = ctiles::shared_tile(tbase, grows, 3, 1);
  CHECK(t1.group == 0 && t1.row0 == 64 && t1.rows == 6);
  const ctiles::SharedTile t2 = ctiles::shared_tile(tbase, grows, 3, 2);
  CHECK(t2.group == 2 && t2.row0 == 0 && t2.rows == 5);
  CHECK(ctiles::shared_tile(tbase, grows, 3, 3).group == -1);
  const ctiles::RowRef r = ctiles::row_of(mrow, 0, 2, 2, 69);
  CHECK(r.member == 1 && r.j == 34 && r.h == 1);
  const ctiles::RowRef r2 = ctiles::row_of(mrow, 3, 5, 1, 4);
  CHECK(r2.member == 3 && r2.j == 4);
}

void test_kv_copy_covers_every_key_and_chunk_once() {
  const int dims[] = {64, 128, 256};
  for (int D : dims) {
    const int C = D / 8, bn = ctiles::key_tile(D), threads = 32 * ctiles::kWarps, step = threads / C;
    std::vector<int> hit(size_t(bn) * C, 0);
    for (int it = 0; it < bn / step; ++it)
      for (int tid = 0; tid < threads; ++tid) {
        const int row = tid / C + it * step, chunk = tid % C;
        const uint32_t at = tiles::frag::swz(C, row, chunk) / 16;
        CHECK(at < hit.size());
        if (at < hit.size()) ++hit[at];
      }
    for (int h : hit) CHECK(h == 1);
    CHECK(threads % C == 0 && bn % step == 0);
  }
}

void test_split_range_and_walk_edges() {
  const ctiles::KeyRange a = ctiles::split_range(100, 300, 1, 128);
  CHECK(a.k0 == 228 && a.k1 == 300);
  const ctiles::KeyRange e = ctiles::split_range(100, 300, 2, 128);
  CHECK(e.k0 == e.k1);
  const ctiles::KeyRange big = ctiles::split_range(0, 2147483000, 3, 1 << 30);
  CHECK(big.k0 == big.k1);
  // No valid row: nothing walked.
  CHECK(ctiles::walk(0, 1000, 64, 1 << 30, -1, 0, 0).count() == 0);
  // A window of 100 at positions 500..510 with 4 sinks: tile 0 (sinks), then the tiles from key 401.
  const ctiles::Walk w = ctiles::walk(0, 511, 64, 500, 510, 100, 4);
  CHECK(w.count() == 1 + (7 - 6 + 1));
  CHECK(w.tile(0) == 0 && w.tile(1) == 6);
  CHECK(!w.full(0) && !w.full(1));
}

}  // namespace

int main() {
  RUN_TEST(test_work_list_covers_every_row_head_and_key_once);
  RUN_TEST(test_shared_tile_and_row_lookup_skip_empty_members_and_groups);
  RUN_TEST(test_kv_copy_covers_every_key_and_chunk_once);
  RUN_TEST(test_split_range_and_walk_edges);
  TEST_SUMMARY();
}
