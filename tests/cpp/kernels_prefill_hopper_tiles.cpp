// The sm_90a prefill kernel's arithmetic (kernels/prefill/prefill_hopper_tiles.h), checked on the CPU: a model
// of the producer's cp.async gather of paged K / V (and the Q load) writes element ids into a byte-exact
// shared-memory image, and a model of how wgmma reads a descriptor (the PTX ISA's canonical 128-byte
// swizzle layouts: K-major for Q and K, N-major for V) must find every (row, k) element the kernel's
// descriptors name exactly where the loads put it; S = Q K^T and O = P V computed through those
// descriptors and the accumulator / A-register fragments equal plain products; the mbarrier ring never
// hands a consumer a stage before it lands or refills one still in use, and does not deadlock at the
// kernel's depth; the key tiles and the per-element mask of the CTA cover exactly the (row, key) pairs
// the portable kernel's schedule does.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>
#include <vector>

#include "../../kernels/prefill/prefill.h"
#include "../../kernels/prefill/prefill_hopper_tiles.h"
#include "harness.h"

namespace {

using namespace kvb::kern;
namespace hp = kvb::kern::hopper;

// ---- The hardware's side, as the PTX ISA describes it --------------------------------------------------
struct Decoded {
  uint32_t start, lbo, sbo;
  int layout;
};
Decoded decode(uint64_t d) {
  Decoded x;
  x.start = uint32_t(d & 0x3FFF) << 4;
  x.lbo = uint32_t((d >> 16) & 0x3FFF) << 4;
  x.sbo = uint32_t((d >> 32) & 0x3FFF) << 4;
  x.layout = int(d >> 62);
  return x;
}
// 128-byte swizzle: address bits 4-6 XOR bits 7-9.
uint32_t swizzle128(uint32_t a) { return a ^ (((a >> 7) & 7u) << 4); }
// Byte address of 16-bit element (mn, k), k < 16, of one instruction's operand.
// K-major (Swizzle<3,4,3> o ((8,m),(T,2k)):((8T,SBO),(1,T)), T = 8 elements): rows of 128 bytes, 8-row
// groups SBO apart, k contiguous from the start address.
uint32_t kmajor_addr(uint64_t desc, int mn, int k) {
  const Decoded d = decode(desc);
  return swizzle128(d.start + uint32_t(mn / 8) * d.sbo + uint32_t(mn % 8) * 128 + uint32_t(k) * 2);
}
// MN-major (Swizzle<3,4,3> o ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO))): 64 mn contiguous, 64-blocks LBO
// apart; k rows of 128 bytes, 8-k groups SBO apart.
uint32_t mnmajor_addr(uint64_t desc, int mn, int k) {
  const Decoded d = decode(desc);
  return swizzle128(d.start + uint32_t(mn / 64) * d.lbo + uint32_t(mn % 64) * 2 + uint32_t(k / 8) * d.sbo +
                    uint32_t(k % 8) * 128);
}

// ---- The loads, as the kernel issues them ------------------------------------------------------------
// Shared memory as 16-bit slots holding element ids (0 = never written; kZero = zero-filled).
constexpr uint32_t kZero = 0xFFFFFFFFu;
struct Smem {
  std::vector<uint32_t> slot;
  std::vector<int> writes;
  explicit Smem(uint32_t bytes) : slot(bytes / 2, 0), writes(bytes / 2, 0) {}
  void put(uint32_t byte, uint32_t id) { slot.at(byte / 2) = id, writes.at(byte / 2)++; }
  uint32_t at(uint32_t byte) const { return slot.at(byte / 2); }
};

// A paged cache of one layer: [num_blocks][block_size][heads][128], element id = 1 + linear index.
struct Paged {
  int num_blocks, block_size, shift, heads;
  uint32_t id(int block, int tok, int head, int dim) const {
    return 1u + uint32_t(((int64_t(block) * block_size + tok) * heads + head) * hp::kHeadDim + dim);
  }
};

// Producer warpgroup: thread t finds key t's row through the block table (zero fill past len), then
// copies its chunk column of the K tile `tile` into stage memory at base.
void load_kv_tile(Smem& sm, uint32_t base, const Paged& c, const std::vector<int>& table, int len, int head,
                  int tile) {
  std::vector<int64_t> row_block(hp::kKeys), row_tok(hp::kKeys);  // s_off
  for (int t = 0; t < hp::kWgThreads; ++t) {
    if (t >= hp::kKeys) continue;
    const int tok = tile * hp::kKeys + t;
    row_block[size_t(t)] = tok < len ? table[size_t(tok >> c.shift)] : -1;
    row_tok[size_t(t)] = tok & (c.block_size - 1);
  }
  for (int t = 0; t < hp::kWgThreads; ++t)
    for (int j = 0; j < hp::kKeys / hp::kCopyRowStep; ++j) {
      const int r = hp::copy_row(t, j), ch = hp::copy_chunk(t);
      const uint32_t dst = base + hp::copy_dst(t, j);  // the kernel's form: must be row r's chunk ch
      if (hp::copy_dst(t, j) != hp::tile_offset(hp::kKeys, r, ch)) sm.writes.at(0) += 100;
      for (int e = 0; e < 8; ++e)
        sm.put(dst + uint32_t(2 * e), row_block[size_t(r)] < 0 ? kZero
                                        : c.id(int(row_block[size_t(r)]), int(row_tok[size_t(r)]), head, ch * 8 + e));
    }
}

void test_descriptors_read_what_the_paged_loads_wrote() {
  std::mt19937 rng(7);
  for (int bs : {8, 16, 32, 64}) {
    const Paged c{64, bs, __builtin_ctz(unsigned(bs)), 2};
    std::vector<int> table(size_t(c.num_blocks));
    for (int i = 0; i < c.num_blocks; ++i) table[size_t(i)] = i;
    std::shuffle(table.begin(), table.end(), rng);
    const int len = 3 * hp::kKeys + 17, head = 1;
    const uint32_t base = 3 * 1024;  // any 1 KiB boundary
    for (int tile = 0; tile < 4; ++tile) {
      Smem sm(base + hp::kSmemBytes);
      load_kv_tile(sm, base + hp::smem_k(1), c, table, len, head, tile);
      // Every byte of the tile written exactly once.
      int wrong = 0;
      for (uint32_t b = 0; b < hp::kKVBytes; b += 2) wrong += sm.writes[(base + hp::smem_k(1) + b) / 2] != 1;
      CHECK(wrong == 0);
      auto want = [&](int key, int dim) {
        const int tok = tile * hp::kKeys + key;
        return tok < len ? c.id(table[size_t(tok >> c.shift)], tok & (bs - 1), head, dim) : kZero;
      };
      int bad_k = 0, bad_v = 0;
      // S = Q K^T: B = K, N = keys, k-step kk = dims 16 kk ..
      for (int kk = 0; kk < hp::kHeadDim / 16; ++kk)
        for (int n = 0; n < hp::kKeys; ++n)
          for (int k = 0; k < 16; ++k)
            bad_k += sm.at(kmajor_addr(hp::k_desc(base + hp::smem_k(1), kk), n, k)) != want(n, 16 * kk + k);
      // O += P V: the same bytes as V (the loader writes them alike); B = V N-major, N = dims, k = keys.
      for (int kk = 0; kk < hp::kKeys / 16; ++kk)
        for (int n = 0; n < hp::kHeadDim; ++n)
          for (int k = 0; k < 16; ++k)
            bad_v += sm.at(mnmajor_addr(hp::v_desc(base + hp::smem_k(1), kk), n, k)) != want(16 * kk + k, n);
      CHECK(bad_k == 0);
      CHECK(bad_v == 0);
    }
  }
  // Q: all kThreads threads, packed row r dim d; each consumer warpgroup's descriptors see its 64 rows.
  const uint32_t base = 1024;
  Smem sm(base + hp::kSmemBytes);
  for (int x = 0; x < hp::kRows * hp::kChunks; ++x) {  // x = tid + kThreads it
    const int r = x / hp::kChunks, ch = x % hp::kChunks;
    for (int e = 0; e < 8; ++e) sm.put(base + hp::tile_offset(hp::kRows, r, ch) + uint32_t(2 * e), uint32_t(1 + r * 128 + ch * 8 + e));
  }
  int bad_q = 0, twice = 0;
  for (uint32_t b = 0; b < hp::kQBytes; b += 2) twice += sm.writes[(base + b) / 2] != 1;
  for (int wg = 0; wg < 2; ++wg)
    for (int kk = 0; kk < hp::kHeadDim / 16; ++kk)
      for (int m = 0; m < hp::kWgRows; ++m)
        for (int k = 0; k < 16; ++k)
          bad_q += sm.at(kmajor_addr(hp::q_desc(base, wg, kk), m, k)) != uint32_t(1 + (wg * 64 + m) * 128 + 16 * kk + k);
  CHECK(twice == 0);
  CHECK(bad_q == 0);
  // The encoding itself: fields where the PTX ISA puts them.
  const uint64_t d = hp::make_desc(0x12340, 16, 1024);
  CHECK((d & 0x3FFF) == (0x12340 >> 4) && ((d >> 16) & 0x3FFF) == 1 && ((d >> 32) & 0x3FFF) == 64 && (d >> 62) == 1);
  CHECK(((d >> 14) & 3) == 0 && ((d >> 30) & 3) == 0 && ((d >> 46) & 0xFFFF) == 0);  // reserved bits, base offset 0
  CHECK(hp::kSmemBytes <= 227 * 1024);  // the sm_90 opt-in limit per block
}

// S = Q K^T and O = P V through the descriptor model and the fragment maps, against plain products.
void test_wgmma_fragments_compute_the_products() {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> small(-3, 3);
  const uint32_t base = 0;
  std::vector<float> img(hp::kSmemBytes / 2, 0.f);  // values by 16-bit slot
  std::vector<float> Q(size_t(hp::kRows) * 128), K(size_t(hp::kKeys) * 128), V(size_t(hp::kKeys) * 128);
  for (float& x : Q) x = float(small(rng));
  for (float& x : K) x = float(small(rng));
  for (float& x : V) x = float(small(rng));
  for (int r = 0; r < hp::kRows; ++r)
    for (int d = 0; d < 128; ++d) img[(base + hp::tile_offset(hp::kRows, r, d / 8) + 2 * (d % 8)) / 2] = Q[size_t(r) * 128 + d];
  for (int r = 0; r < hp::kKeys; ++r)
    for (int d = 0; d < 128; ++d) {
      img[(hp::smem_k(0) + hp::tile_offset(hp::kKeys, r, d / 8) + 2 * (d % 8)) / 2] = K[size_t(r) * 128 + d];
      img[(hp::smem_v(0) + hp::tile_offset(hp::kKeys, r, d / 8) + 2 * (d % 8)) / 2] = V[size_t(r) * 128 + d];
    }
  std::vector<float> Sref(size_t(hp::kRows) * hp::kKeys, 0.f);
  for (int m = 0; m < hp::kRows; ++m)
    for (int key = 0; key < hp::kKeys; ++key)
      for (int d = 0; d < 128; ++d) Sref[size_t(m) * hp::kKeys + size_t(key)] += Q[size_t(m) * 128 + d] * K[size_t(key) * 128 + d];
  int bad_s = 0, bad_o = 0, bad_p = 0;
  for (int wg = 0; wg < 2; ++wg) {
    // S: per thread kKeys / 2 accumulators; every (row, key) of the warpgroup exactly once.
    std::vector<std::vector<float>> S(hp::kWgThreads, std::vector<float>(hp::kKeys / 2, 0.f));
    std::set<std::pair<int, int>> seen;
    for (int t = 0; t < hp::kWgThreads; ++t)
      for (int i = 0; i < hp::kKeys / 2; ++i) {
        const int m = hp::acc_row(t, i), n = hp::acc_col(t, i);
        seen.insert({m, n});
        for (int kk = 0; kk < 8; ++kk)
          for (int k = 0; k < 16; ++k)
            S[size_t(t)][size_t(i)] += img[kmajor_addr(hp::q_desc(base, wg, kk), m, k) / 2] *
                                       img[kmajor_addr(hp::k_desc(hp::smem_k(0), kk), n, k) / 2];
        bad_s += S[size_t(t)][size_t(i)] != Sref[size_t(wg * 64 + m) * hp::kKeys + size_t(n)];
      }
    CHECK(int(seen.size()) == hp::kWgRows * hp::kKeys);
    // O = P V with P = S repacked into A registers (p_acc): the A operand of the warpgroup is the union
    // of what its threads hold, so P is gathered through the A-fragment map (each element once), then
    // multiplied with V read through its N-major descriptor.
    std::vector<float> P(size_t(hp::kWgRows) * hp::kKeys, 0.f);
    std::vector<int> held(P.size(), 0);
    for (int t = 0; t < hp::kWgThreads; ++t)
      for (int kk = 0; kk < hp::kKeys / 16; ++kk)
        for (int j = 0; j < 4; ++j)
          for (int h = 0; h < 2; ++h) {
            const int src = hp::p_acc(kk, j) + h, m = hp::a_row(t, j), k = 16 * kk + hp::a_k(t, j, h);
            bad_p += hp::acc_row(t, src) != m || hp::acc_col(t, src) != k;
            P[size_t(m) * hp::kKeys + size_t(k)] = S[size_t(t)][size_t(src)];
            held[size_t(m) * hp::kKeys + size_t(k)]++;
          }
    for (int x : held) bad_p += x != 1;
    for (int t = 0; t < hp::kWgThreads; ++t)
      for (int i = 0; i < hp::kHeadDim / 2; ++i) {
        const int m = hp::acc_row(t, i), n = hp::acc_col(t, i);
        float got = 0.f, want = 0.f;
        for (int kk = 0; kk < hp::kKeys / 16; ++kk)
          for (int k = 0; k < 16; ++k)
            got += P[size_t(m) * hp::kKeys + size_t(16 * kk + k)] * img[mnmajor_addr(hp::v_desc(hp::smem_v(0), kk), n, k) / 2];
        for (int key = 0; key < hp::kKeys; ++key) want += Sref[size_t(wg * 64 + m) * hp::kKeys + size_t(key)] * V[size_t(key) * 128 + n];
        bad_o += got != want;
      }
  }
  CHECK(bad_s == 0);
  CHECK(bad_p == 0);
  CHECK(bad_o == 0);
}

// The ring: one producer agent (the producer warpgroup acts in lockstep) and two consumer warpgroups,
// with mbarriers modelled as the PTX ISA has them (phase flips when the pending count reaches zero;
// try_wait.parity p succeeds once the phase of parity p has completed), interleaved at random.
struct Mbar {
  int count, pending, phase = 0;
  explicit Mbar(int n) : count(n), pending(n) {}
  void arrive() {
    if (--pending == 0) pending = count, ++phase;
  }
  bool done(uint32_t parity) const { return uint32_t(phase & 1) != parity; }
};

// Returns -1 on deadlock, else the number of violations.
int simulate_ring(int stages, int n_tiles, std::mt19937& rng) {
  std::vector<Mbar> full(size_t(stages), Mbar(1)), empty(size_t(stages), Mbar(2));
  std::vector<int> content(size_t(stages), -1);
  std::vector<bool> landed(size_t(stages), false);
  int bad = 0;
  // Producer: for i: wait empty(i); issue i; if i > 0 land + arrive full(i - 1). Then land the last.
  int p_i = 0;
  bool p_last_done = n_tiles == 0;
  // Consumer c: state 0 = wait full(0) and compute S(0); then per i: 1 = wait full(i + 1), 2 = read V(i),
  // release(i).
  struct Cons { int i = 0, state = 0; bool done = false; };
  std::vector<Cons> cons(2);
  if (n_tiles == 0) cons[0].done = cons[1].done = true;
  auto use = [&](int tile) {
    const hp::KvSlot s = hp::kv_slot(tile, stages);
    bad += content[size_t(s.stage)] != tile || !landed[size_t(s.stage)];
  };
  for (int steps = 0; steps < 100000; ++steps) {
    std::vector<int> ready;
    if (p_i < n_tiles && empty[size_t(hp::kv_slot(p_i, stages).stage)].done(hp::producer_parity(p_i, stages))) ready.push_back(0);
    if (p_i == n_tiles && !p_last_done) ready.push_back(0);
    for (int c = 0; c < 2; ++c) {
      const Cons& k = cons[size_t(c)];
      if (k.done) continue;
      const int need = k.state == 0 ? 0 : k.state == 1 ? k.i + 1 : -1;
      if (need < 0 || need >= n_tiles || full[size_t(hp::kv_slot(need, stages).stage)].done(hp::consumer_parity(need, stages)))
        ready.push_back(1 + c);
    }
    if (ready.empty()) return (p_last_done && cons[0].done && cons[1].done) ? bad : -1;
    const int who = ready[size_t(rng() % ready.size())];
    if (who == 0) {
      if (p_i < n_tiles) {
        const hp::KvSlot s = hp::kv_slot(p_i, stages);
        content[size_t(s.stage)] = p_i, landed[size_t(s.stage)] = false;  // cp.async in flight
        if (p_i > 0) {
          const int st = hp::kv_slot(p_i - 1, stages).stage;
          landed[size_t(st)] = true, full[size_t(st)].arrive();
        }
        if (++p_i == n_tiles) {}  // the last tile lands on the next step
      } else {
        const int st = hp::kv_slot(n_tiles - 1, stages).stage;
        landed[size_t(st)] = true, full[size_t(st)].arrive(), p_last_done = true;
      }
      continue;
    }
    Cons& k = cons[size_t(who - 1)];
    if (k.state == 0) {
      use(0), k.state = 1;
    } else if (k.state == 1) {
      if (k.i + 1 < n_tiles) use(k.i + 1);  // S of the next tile
      k.state = 2;
    } else {
      use(k.i);  // P V of tile i, then release its stage
      empty[size_t(hp::kv_slot(k.i, stages).stage)].arrive();
      if (++k.i == n_tiles) k.done = true; else k.state = 1;
    }
  }
  return -1;
}

void test_ring_stages_and_phases() {
  std::mt19937 rng(5);
  const int runs = kvbt_quick() ? 50 : 400;
  int deadlocks = 0, bad = 0, deadlocks_at_2 = 0;
  for (int r = 0; r < runs; ++r) {
    const int n = int(rng() % 40);
    for (int stages : {3, hp::kStages}) {
      const int v = simulate_ring(stages, n, rng);
      if (v < 0) ++deadlocks; else bad += v;
    }
    deadlocks_at_2 += n >= 3 && simulate_ring(2, n, rng) < 0;
  }
  CHECK(deadlocks == 0);
  CHECK(bad == 0);
  CHECK(deadlocks_at_2 > 0);  // the model catches the depth the note says is too shallow
  // Phase arithmetic: tile i and i + kStages share a stage with opposite phases.
  for (int i = 0; i < 100; ++i) {
    CHECK(hp::kv_slot(i).stage == hp::kv_slot(i + hp::kStages).stage);
    CHECK(hp::kv_slot(i).phase != hp::kv_slot(i + hp::kStages).phase);
    CHECK(hp::producer_parity(i) == (hp::consumer_parity(i) ^ 1u));
  }
}

// The CTA's key tiles (kKeys tokens) and per-element mask cover exactly the pairs the portable
// schedule (prefill_key_tile(128) tokens) attends, each once.
void test_tiles_and_mask_match_the_portable_schedule() {
  std::mt19937 rng(3);
  const int runs = kvbt_quick() ? 10 : 60;
  int bad = 0;
  for (int r = 0; r < runs; ++r) {
    const int n = 1 + int(rng() % 4), G = 1 << (rng() % 3);
    const int window = rng() % 3 == 0 ? 0 : 1 + int(rng() % 300), sink = window > 0 ? int(rng() % 20) : 0;
    std::vector<int32_t> qs(size_t(n) + 1, 0);
    std::vector<int> lens(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      const int q = int(rng() % 150), cached = int(rng() % 200);
      qs[size_t(i) + 1] = qs[size_t(i)] + q, lens[size_t(i)] = q + cached;
    }
    const int total_q = qs[size_t(n)], num_tiles = int(int64_t(total_q) * G / hp::kRows + n);
    const int max_len = *std::max_element(lens.begin(), lens.end()) + 1;
    auto pairs = [&](int bn, bool hopper_cta) {
      std::vector<int> seen(size_t(total_q) * size_t(G) * size_t(max_len), 0);  // [packed row of the batch][key]: times
      for (int tile = 0; tile < num_tiles; ++tile) {
        const int seq = tiles::seq_of_tile(qs.data(), n, G, hp::kRows, tile);
        const int lt = int(tiles::local_tile(qs.data(), seq, G, hp::kRows, tile, true));
        const int q_len = qs[size_t(seq) + 1] - qs[size_t(seq)], pr0 = lt * hp::kRows;
        const int rows = std::min(hp::kRows, q_len * G - pr0);
        if (rows <= 0) continue;
        const int base = lens[size_t(seq)] - q_len;
        auto pos = [&](int row) { return base + (pr0 + std::min(row, rows - 1)) / G; };  // s_pos
        const tiles::KeyTiles kt = tiles::key_tiles(pos(0), pos(rows - 1), window, sink, bn, 0,
                                                    tiles::ceil_div(std::max(1, lens[size_t(seq)]), bn) + 1);
        for (int i = 0; i < kt.count(); ++i) {
          const int t = kt.tile(i), k0 = t * bn;
          const bool full = kt.full(t);
          auto visit = [&](int row, int col) {
            const int key = k0 + col;
            const bool keep = full || tiles::attends(key, pos(row), window, kt.sink);
            if (full && !tiles::attends(key, pos(row), window, kt.sink)) ++bad;  // a "full" tile must not need the mask
            if (keep && row < rows) {
              if (key >= lens[size_t(seq)]) ++bad;  // past the sequence: the mask must drop it
              else seen[size_t(qs[size_t(seq)] * G + pr0 + row) * size_t(max_len) + size_t(key)]++;
            }
          };
          if (hopper_cta) {
            for (int wg = 0; wg < 2; ++wg)
              for (int th = 0; th < hp::kWgThreads; ++th)
                for (int e = 0; e < hp::kKeys / 2; ++e) visit(wg * hp::kWgRows + hp::acc_row(th, e), hp::acc_col(th, e));
          } else {
            for (int row = 0; row < hp::kRows; ++row)
              for (int col = 0; col < bn; ++col) visit(row, col);
          }
        }
      }
      return seen;
    };
    const auto h = pairs(hp::kKeys, true), portable = pairs(int(prefill_key_tile(hp::kHeadDim)), false);
    bad += h != portable;
    size_t got = 0;
    for (int x : h) bad += x > 1, got += size_t(x);
    // Against brute force: every attended (row, key) of every sequence.
    size_t want = 0;
    for (int s = 0; s < n; ++s) {
      const int q_len = qs[size_t(s) + 1] - qs[size_t(s)], base = lens[size_t(s)] - q_len;
      for (int tok = 0; tok < q_len; ++tok)
        for (int key = 0; key < lens[size_t(s)]; ++key) want += size_t(G) * tiles::attends(key, base + tok, window, window > 0 ? sink : 0);
    }
    bad += got != want;
  }
  CHECK(bad == 0);
}

// Output staging: every (row, dim) of a warpgroup's 64 rows written once, as a 4-byte pair of
// neighbours, inside its own rows of the Q tile, and read back by chunk where the loads' layout has it.
void test_output_staging_round_trip() {
  Smem sm(hp::kQBytes);
  int bad = 0;
  for (int wg = 0; wg < 2; ++wg)
    for (int t = 0; t < hp::kWgThreads; ++t)
      for (int e = 0; e < hp::kHeadDim / 2; e += 2) {
        const uint32_t off = hp::out_stage(wg, t, e);
        const int r = wg * hp::kWgRows + hp::acc_row(t, e), col = hp::acc_col(t, e);
        bad += off % 4 != 0 || hp::acc_row(t, e + 1) != hp::acc_row(t, e) || hp::acc_col(t, e + 1) != col + 1;
        sm.put(off, uint32_t(1 + r * 128 + col));
        sm.put(off + 2, uint32_t(2 + r * 128 + col));
      }
  for (int r = 0; r < hp::kRows; ++r)
    for (int c = 0; c < hp::kChunks; ++c)
      for (int e = 0; e < 8; ++e) {
        const uint32_t b = hp::tile_offset(hp::kRows, r, c) + uint32_t(2 * e);
        bad += sm.writes[b / 2] != 1 || sm.at(b) != uint32_t(1 + r * 128 + c * 8 + e);
      }
  CHECK(bad == 0);
}

void test_what_the_kernel_takes() {
  CHECK(hp::takes(128, true, true, 1));
  CHECK(!hp::takes(64, true, true, 1) && !hp::takes(256, true, true, 1));
  CHECK(!hp::takes(128, false, true, 1));  // fp32 / fp8 caches
  CHECK(!hp::takes(128, true, false, 1));  // q / out of another dtype
  CHECK(!hp::takes(128, true, true, 2));   // key splits
  CHECK(hp::kRows == int(kPrefillTileRows));  // plan_prefill's grid is the kernel's
  CHECK(hp::kThreads == 384 && hp::kWgThreads / hp::kChunks == hp::kCopyRowStep && hp::kKeys <= hp::kWgThreads);
}

}  // namespace

int main() {
  RUN_TEST(test_descriptors_read_what_the_paged_loads_wrote);
  RUN_TEST(test_wgmma_fragments_compute_the_products);
  RUN_TEST(test_ring_stages_and_phases);
  RUN_TEST(test_tiles_and_mask_match_the_portable_schedule);
  RUN_TEST(test_output_staging_round_trip);
  RUN_TEST(test_what_the_kernel_takes);
  TEST_SUMMARY();
}
