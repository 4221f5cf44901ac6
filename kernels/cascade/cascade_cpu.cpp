// CPU shared-prefix ("cascade") attention for decode and prefill / extend (kvb_prefix_groups), and without
// groups the CPU prefill / extend kernel itself (rows_attention, called by kernels/prefill/prefill_cpu.cpp).
//
// Three kinds of work, all in fp32 with exp2 online softmax (cascade_tile_cpu.inc):
//  1. shared items (group, row tile, key partition), each kv head in turn: every member's query rows
//     (tokens x the query heads of the kv head) against the group's shared keys, read once per row tile; the state
//     (m, l, unnormalised acc) of each row goes to a per-call buffer, one slot per key partition;
//  2. own items (sequence, token tile, kv head group), each kv head in turn: the sequence's rows against its keys after the shared
//     prefix (all of them for a sequence in no group), then
//  3. the merge, in the own item: out = (sum of acc_i 2^(m_i - M)) / (sum of l_i 2^(m_i - M)), M the
//     largest m_i over the own part and the shared partitions.
// Items 1 run before items 2 (two rounds of threads). The masks are per row everywhere, so a windowed
// member's window (and sinks) cut its share of the shared keys exactly as they cut its own keys; a token
// tree's mask (prefill, no groups) is one more per-row mask of the own keys.
#include "cascade.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "../../libkvblock/error.h"
#include "../common/types.h"
#include "../common/amx_cpu.h"
#include "cascade_amx_cpu.h"
#include "cascade_rows_cpu.h"
#include "../common/convert_cpu.h"
#include "../common/parallel_cpu.h"
#include "../common/simd_cpu.h"

namespace kvb {
namespace kern {
namespace cpu {

using namespace casc;

namespace {

constexpr int64_t kSharedRows = 256;  // query rows per shared item: the shared K/V are read once per 256
constexpr int64_t kOwnRows = 128;     // query rows per own item (256 measured slower on AMX)
constexpr int64_t kMinPartition = 512;  // shared keys per partition when split for the threads
constexpr int64_t kParallelFlops = int64_t(8) << 20;
// Row blocks of more rows than this run on AMX tiles where active (amx_cpu.h): fewer (a sequence's own keys
// at decode) stay on the vector loop, which reads K and V straight from the cache without packing them.
constexpr int64_t kAmxMinRows = 9;
constexpr int64_t kSharedItemsPerThread = 4;

#define KVB_SIMD_BODY "../cascade/cascade_tile_cpu.inc"  // once per code path
#include "../common/simd_variants_cpu.inc"
#undef KVB_SIMD_BODY

AttendFn pick_attend(int64_t D, Dtype dt) {
  switch (simd::isa()) {
#if KVB_SIMD_X86
    case simd::Isa::avx512bf16:  // (no bf16 pair code here: the AVX-512 copy)
    case simd::Isa::avx512: return avx512::pick_attend(D, dt);
    case simd::Isa::avx2: return avx2::pick_attend(D, dt);
#endif
    default: return baseline::pick_attend(D, dt);
  }
}

// The plain kernels' input rules: seq_lens within the table, and a valid id for every block that holds a
// token some row attends.
void check_batch(const Cache& c, const CascadeCall& a) {
  const int64_t max_len = a.max_blocks * c.block_size;
  for (int64_t s = 0; s < a.num_seqs; ++s) {
    const int64_t q_len = a.q_len(s), len = a.seq_lens[s];
    if (len < (a.query_start ? q_len : 0) || len > max_len)
      fail(Code::invalid_argument, "%s: seq_lens[%lld] = %lld is not in [%lld, max_blocks_per_seq * block_size = %lld]",
           a.kernel, (long long)s, (long long)len, (long long)(a.query_start ? q_len : 0), (long long)max_len);
    if (q_len == 0 || len == 0) continue;
    const int64_t first = len - q_len;
    const int64_t lo = a.window > 0 ? std::max<int64_t>(0, first - a.window + 1) : 0;
    const int64_t sink = a.window > 0 ? a.sink : 0;
    for (int64_t b = 0; b * c.block_size < len; ++b) {
      const int64_t t0 = b * c.block_size, t1 = std::min(len, t0 + c.block_size);
      if (!(t1 > lo || t0 < sink)) continue;
      const int32_t id = a.block_tables[s * a.max_blocks + b];
      if (id < 0 || id >= c.num_blocks)
        fail(Code::invalid_argument, "%s: block_tables[%lld][%lld] = %d is not in [0, %lld) (sequence length %lld)",
             a.kernel, (long long)s, (long long)b, id, (long long)c.num_blocks, (long long)len);
    }
  }
}

// The description against the batch; fills group_of[s] (-1: no group) and shared tokens per group.
void check_groups(const Cache& c, const CascadeCall& a, const kvb_prefix_groups& g, std::vector<int32_t>& group_of,
                  std::vector<int64_t>& shared) {
  const int64_t G = g.num_groups;
  if (!g.group_start || !g.members || !g.shared_blocks)
    fail(Code::invalid_argument, "%s: prefix_groups has %lld groups but a NULL group_start, members or shared_blocks",
         a.kernel, (long long)G);
  if (g.group_start[0] != 0)
    fail(Code::invalid_argument, "%s: prefix_groups.group_start[0] = %d is not 0", a.kernel, g.group_start[0]);
  group_of.assign(size_t(a.num_seqs), -1);
  shared.assign(size_t(G), 0);
  for (int64_t gi = 0; gi < G; ++gi) {
    const int64_t m0 = g.group_start[gi], m1 = g.group_start[gi + 1];
    if (m1 <= m0 || m1 - m0 > a.num_seqs)
      fail(Code::invalid_argument, "%s: prefix_groups.group_start[%lld] = %lld, [%lld] = %lld: a group needs 1 to num_seqs members",
           a.kernel, (long long)gi, (long long)m0, (long long)(gi + 1), (long long)m1);
    const int64_t nb = g.shared_blocks[gi];
    if (nb < 0 || nb > a.max_blocks)
      fail(Code::invalid_argument, "%s: prefix_groups.shared_blocks[%lld] = %lld is not in [0, max_blocks_per_seq = %lld]",
           a.kernel, (long long)gi, (long long)nb, (long long)a.max_blocks);
    shared[size_t(gi)] = nb * c.block_size;
    const int32_t* lead = nullptr;
    for (int64_t k = m0; k < m1; ++k) {
      const int64_t s = g.members[k];
      if (s < 0 || s >= a.num_seqs)
        fail(Code::invalid_argument, "%s: prefix_groups.members[%lld] = %lld is not a row in [0, %lld)", a.kernel,
             (long long)k, (long long)s, (long long)a.num_seqs);
      if (group_of[size_t(s)] >= 0)
        fail(Code::invalid_argument, "%s: prefix_groups.members[%lld] = %lld is already a member of group %d", a.kernel,
             (long long)k, (long long)s, group_of[size_t(s)]);
      group_of[size_t(s)] = int32_t(gi);
      if (nb * c.block_size > a.seq_lens[s])
        fail(Code::invalid_argument, "%s: prefix_groups.shared_blocks[%lld] = %lld blocks exceed seq_lens[%lld] = %d tokens",
             a.kernel, (long long)gi, (long long)nb, (long long)s, a.seq_lens[s]);
      const int32_t* t = a.block_tables + s * a.max_blocks;
      if (!lead) {
        lead = t;
        for (int64_t b = 0; b < nb; ++b)
          if (t[b] < 0 || t[b] >= c.num_blocks)
            fail(Code::invalid_argument, "%s: block_tables[%lld][%lld] = %d (shared by group %lld) is not in [0, %lld)",
                 a.kernel, (long long)s, (long long)b, t[b], (long long)gi, (long long)c.num_blocks);
        continue;
      }
      for (int64_t b = 0; b < nb; ++b)
        if (t[b] != lead[b])
          fail(Code::invalid_argument, "%s: block_tables[%lld][%lld] = %d differs from %d of row %d, but group %lld shares %lld blocks",
               a.kernel, (long long)s, (long long)b, t[b], lead[b], g.members[m0], (long long)gi, (long long)nb);
    }
  }
}

struct Tok {
  int32_t seq, j;  // sequence and query token of a group member
};

struct Work {
  const Cache* c;
  const CascadeCall* a;
  const kvb_prefix_groups* g;
  AttendFn attend;
  AttendFn attend_wide;  // for kAmxMinRows rows or more: AMX where active, else attend
  Mask mk;
  int64_t G, D, qes, NP, P;
  int64_t HG;   // kv head groups per shared item (more items for the threads to share out)
  int64_t HGO;  // the same per own item
  float q_scale;
  std::vector<int32_t> group_of;
  std::vector<int64_t> shared;      // tokens per group
  std::vector<Tok> toks;            // members' query tokens, group after group
  std::vector<int64_t> tok_begin;   // [num_groups + 1] into toks
  std::vector<int64_t> tok_of_seq;  // first index into toks of a member's tokens; -1 for others
  // Shared states: slot ((toks index * num_q_heads + head) * NP + part).
  std::unique_ptr<float[]> st_m, st_l, st_acc;
};

// Row r of rw = query token j of sequence s, query head h: the query times rw.q_factor, position, tree
// word, empty state.
void load_query(const Work& w, Rows& rw, int64_t r, int64_t s, int64_t j, int64_t h) {
  const CascadeCall& a = *w.a;
  const int64_t D = w.D;
  const char* qp = static_cast<const char*>(a.q) + ((a.row0(s) + j) * a.q_row_stride + h * a.q_head_stride) * w.qes;
  float* qr = rw.q + r * D;
  load_row(qp, a.q_dtype, D, qr);
  for (int64_t d = 0; d < D; ++d) qr[d] *= rw.q_factor;
  rw.pos[r] = a.seq_lens[s] - a.q_len(s) + j;
  rw.tree_word[r] = rw.draft0 != INT64_MAX ? a.tree_mask[a.row0(s) + j] : 0;
  rw.m[r] = kNegInf;
  rw.l[r] = 0.f;
}

// The loop for rw.R rows of kv head kvh, and where it takes the query scale: the AMX loop multiplies its
// scores (the queries stay as given: exact in bf16 when they are bf16, no low parts), the vector loops
// take pre-scaled queries.
AttendFn attend_for(const Work& w, Rows& rw, int64_t kvh) {
  const bool tiles = rw.R >= kAmxMinRows && w.attend_wide != w.attend;
  const float scale = w.q_scale * fold_of(*w.c, w.c->k_scale_of(kvh));
  rw.q_factor = tiles ? 1.f : scale;
  rw.score_scale = tiles ? scale : 1.f;
  rw.q_bf16 = tiles && w.a->q_dtype == Dtype::bf16;
  return tiles ? w.attend_wide : w.attend;
}

// Padding rows (up to a multiple of 16: the staged tiles' row blocks, the AMX row tiles) score 0 and are
// never output.
void finish_rows(const Work& w, Rows& rw) {
  const int64_t R4 = rw.R >= kAmxMinRows ? (rw.R + 15) / 16 * 16 : (rw.R + 7) / 8 * 8, D = w.D;
  for (int64_t r = rw.R; r < R4; ++r) {
    std::memset(rw.q + r * D, 0, sizeof(float) * size_t(D));
    rw.m[r] = kNegInf;
    rw.l[r] = 0.f;
  }
  std::memset(rw.acc, 0, sizeof(float) * size_t(R4 * D));
}

// Group tokens [t0, t1) of group gi, kv head kvh, keys of partition p.
void shared_head(Work& w, Rows& rw, int64_t gi, int64_t t0, int64_t t1, int64_t kvh, int64_t p) {
  const CascadeCall& a = *w.a;
  const int64_t G = w.G, D = w.D;
  rw.R = (t1 - t0) * G;
  rw.draft0 = INT64_MAX;  // (no trees with groups)
  const AttendFn attend = attend_for(w, rw, kvh);
  for (int64_t t = t0; t < t1; ++t)
    for (int64_t gq = 0; gq < G; ++gq) load_query(w, rw, (t - t0) * G + gq, w.toks[size_t(t)].seq, w.toks[size_t(t)].j, kvh * G + gq);
  finish_rows(w, rw);
  const int32_t* lead = a.block_tables + int64_t(w.g->members[w.g->group_start[gi]]) * a.max_blocks;
  const int64_t k0 = p * w.P, k1 = std::min(w.shared[size_t(gi)], k0 + w.P);
  Mask mk = w.mk;
  mk.whole_rows = kvh == 0 && w.HG == 1;
  attend(*w.c, kvh, lead, k0, k1, mk, rw);
  for (int64_t t = t0; t < t1; ++t)
    for (int64_t gq = 0; gq < G; ++gq) {
      const int64_t r = (t - t0) * G + gq;
      const size_t slot = size_t((t * a.num_q_heads + kvh * G + gq) * w.NP + p);
      w.st_m[slot] = rw.m[r];
      w.st_l[slot] = rw.l[r];
      std::memcpy(&w.st_acc[slot * size_t(D)], rw.acc + r * D, sizeof(float) * size_t(D));
    }
}

// Shared item: the kv heads of head group hg in turn (with one group, the first head fetches the tokens'
// rows of all heads, which the others then find in the CPU caches).
void shared_item(Work& w, Rows& rw, int64_t gi, int64_t t0, int64_t t1, int64_t p, int64_t hg) {
  const int64_t H = w.c->num_kv_heads, per = (H + w.HG - 1) / w.HG;
  for (int64_t kvh = hg * per; kvh < std::min(H, (hg + 1) * per); ++kvh) shared_head(w, rw, gi, t0, t1, kvh, p);
}

// Tokens [j0, j1) of sequence s, kv head kvh: keys after its group's shared prefix, then the merge with
// the shared partitions and the output.
void own_head(const Work& w, Rows& rw, int64_t s, int64_t j0, int64_t j1, int64_t kvh) {
  const CascadeCall& a = *w.a;
  const int64_t G = w.G, D = w.D;
  rw.R = (j1 - j0) * G;
  rw.draft0 = a.tree_mask && a.q_len(s) <= kTreeMaxTokens ? a.seq_lens[s] - a.q_len(s) : INT64_MAX;
  const AttendFn attend = attend_for(w, rw, kvh);
  for (int64_t j = j0; j < j1; ++j)
    for (int64_t gq = 0; gq < G; ++gq) load_query(w, rw, (j - j0) * G + gq, s, j, kvh * G + gq);
  finish_rows(w, rw);
  const int32_t gi = w.group_of[size_t(s)];
  const int64_t S = gi >= 0 ? w.shared[size_t(gi)] : 0;
  Mask mk = w.mk;
  mk.whole_rows = kvh == 0 && w.HGO == 1;
  attend(*w.c, kvh, a.block_tables + s * a.max_blocks, S, a.seq_lens[s], mk, rw);
  const int64_t nparts = gi >= 0 ? (S + w.P - 1) / w.P : 0;
  for (int64_t j = j0; j < j1; ++j)
    for (int64_t gq = 0; gq < G; ++gq) {
      const int64_t r = (j - j0) * G + gq, h = kvh * G + gq;
      float* acc = rw.acc + r * D;
      float M = rw.l[r] > 0.f ? rw.m[r] : kNegInf;
      const size_t slot0 = gi >= 0 ? size_t(((w.tok_of_seq[size_t(s)] + j) * a.num_q_heads + h) * w.NP) : 0;
      for (int64_t p = 0; p < nparts; ++p)
        if (w.st_l[slot0 + size_t(p)] > 0.f || w.st_l[slot0 + size_t(p)] != w.st_l[slot0 + size_t(p)])
          M = std::max(M, w.st_m[slot0 + size_t(p)]);
      float L = 0.f;
      if (rw.l[r] > 0.f || rw.l[r] != rw.l[r]) {
        const float wo = std::exp2(rw.m[r] - M);
        L = rw.l[r] * wo;
        if (wo != 1.f)  // (1 without shared parts)
          for (int64_t d = 0; d < D; ++d) acc[d] *= wo;
      }
      for (int64_t p = 0; p < nparts; ++p) {
        const size_t sl = slot0 + size_t(p);
        if (!(w.st_l[sl] > 0.f) && w.st_l[sl] == w.st_l[sl]) continue;
        const float wp = std::exp2(w.st_m[sl] - M);
        L += w.st_l[sl] * wp;
        const float* sa = &w.st_acc[sl * size_t(D)];
        for (int64_t d = 0; d < D; ++d) acc[d] += wp * sa[d];
      }
      const float inv = (L > 0.f ? 1.f / L : (L == L ? 0.f : L)) * fold_of(*w.c, w.c->v_scale_of(kvh));
      char* op = static_cast<char*>(a.out) + ((a.row0(s) + j) * a.out_row_stride + h * a.out_head_stride) * w.qes;
      store_row(op, a.q_dtype, D, acc, inv);
    }
}

// Own item: the kv heads of head group hg in turn, as shared_item.
void own_item(const Work& w, Rows& rw, int64_t s, int64_t j0, int64_t j1, int64_t hg) {
  const int64_t H = w.c->num_kv_heads, per = (H + w.HGO - 1) / w.HGO;
  for (int64_t kvh = hg * per; kvh < std::min(H, (hg + 1) * per); ++kvh) own_head(w, rw, s, j0, j1, kvh);
}

std::atomic<int> last_path{-2};  // isa * 2 + amx

// Both entry points: w's call, groups (group_of, shared) and pointers set.
void run(Work& w) {
  const Cache& c = *w.c;
  const CascadeCall& a = *w.a;
  w.D = c.head_dim;
  w.G = a.num_q_heads / c.num_kv_heads;
  w.qes = int64_t(dtype_size(a.q_dtype));
  w.mk = Mask{a.soft_cap, a.window, a.window > 0 ? a.sink : 0, false};
  w.q_scale = a.soft_cap > 0.f ? a.scale : a.scale * kLog2e;
  w.attend = pick_attend(w.D, c.dtype);
  if (!w.attend) fail(Code::invalid_argument, "%s: head_dim %lld is not supported", a.kernel, (long long)w.D);
  w.attend_wide = amx::active() ? amx_attend(w.D, c.dtype) : nullptr;
  if (!w.attend_wide) w.attend_wide = w.attend;
  last_path.store(int(simd::isa()) * 2 + (w.attend_wide != w.attend), std::memory_order_relaxed);
  const int64_t G = w.G, D = w.D, NG = w.g ? w.g->num_groups : 0;
  // Members' tokens, group after group.
  w.tok_of_seq.assign(size_t(a.num_seqs), -1);
  w.tok_begin.assign(size_t(NG + 1), 0);
  for (int64_t gi = 0; gi < NG; ++gi) {
    for (int64_t k = w.g->group_start[gi]; k < w.g->group_start[gi + 1]; ++k) {
      const int32_t s = w.g->members[k];
      w.tok_of_seq[size_t(s)] = int64_t(w.toks.size());
      for (int64_t j = 0; j < a.q_len(s); ++j) w.toks.push_back(Tok{s, int32_t(j)});
    }
    w.tok_begin[size_t(gi + 1)] = int64_t(w.toks.size());
  }

  // Work items and their flops (for the thread count).
  struct SharedItem {
    int64_t g, t0, t1;
  };
  struct OwnItem {
    int64_t s, j0, j1;
  };
  std::vector<SharedItem> sitems;
  std::vector<OwnItem> oitems;
  const int64_t tile_shared = std::max<int64_t>(1, kSharedRows / G), tile_own = std::max<int64_t>(1, kOwnRows / G);
  double flops = 0;
  int64_t max_shared = 0;
  for (int64_t gi = 0; gi < NG; ++gi) {
    const int64_t b = w.tok_begin[size_t(gi)], e = w.tok_begin[size_t(gi + 1)];
    if (w.shared[size_t(gi)] == 0 || b == e) continue;
    for (int64_t t0 = b; t0 < e; t0 += tile_shared) sitems.push_back({gi, t0, std::min(e, t0 + tile_shared)});
    max_shared = std::max(max_shared, w.shared[size_t(gi)]);
    flops += 4.0 * double(e - b) * double(w.shared[size_t(gi)]) * double(a.num_q_heads) * double(D);
  }
  for (int64_t s = 0; s < a.num_seqs; ++s) {
    const int64_t q_len = a.q_len(s);
    if (a.skip_single_rows && q_len == 1) continue;
    for (int64_t j1 = q_len; j1 > 0; j1 -= tile_own) oitems.push_back({s, std::max<int64_t>(0, j1 - tile_own), j1});
    const int32_t gi = w.group_of[size_t(s)];
    flops += 4.0 * double(q_len) * double(a.seq_lens[s] - (gi >= 0 ? w.shared[size_t(gi)] : 0)) *
             double(a.num_q_heads) * double(D);
  }
  const unsigned hw = std::thread::hardware_concurrency();
  const int64_t hw_threads = std::max<int64_t>(1, std::min<int64_t>(hw == 0 ? 1 : hw, kMaxThreads));
  // Too few shared items to keep every thread busy: split them by kv head groups first (every key
  // partition costs the own items a merge and the queries a reload; on the AVX-512 loop at 64 x (4096 +
  // 128) kv head groups instead of 4 partitions took a tenth off the call's CPU time), so that every
  // thread gets several items and a thread the OS preempts does not hold the others up at the end of
  // the round; then by partitions of the shared keys.
  const int64_t n_si = int64_t(sitems.size());
  w.NP = 1;
  w.HG = 1;
  while (n_si * w.HG < kSharedItemsPerThread * hw_threads && w.HG < c.num_kv_heads) w.HG *= 2;
  while (n_si * w.HG * w.NP < kSharedItemsPerThread * hw_threads && max_shared / (2 * w.NP) >= kMinPartition) w.NP *= 2;
  // Own items likewise by kv head groups while too few for the threads (a long prompt alone).
  w.HGO = 1;
  while (int64_t(oitems.size()) * w.HGO < kSharedItemsPerThread * hw_threads && w.HGO < c.num_kv_heads) w.HGO *= 2;
  w.P = std::max<int64_t>(kKeyTile, (max_shared + w.NP - 1) / w.NP);
  w.P = (w.P + kKeyTile - 1) / kKeyTile * kKeyTile;
  // Every slot an own item reads is written by a shared item first: no fill (4 MiB a call at 64 x 4096).
  const size_t slots = w.toks.size() * size_t(a.num_q_heads * w.NP);
  w.st_m.reset(new float[slots]);
  w.st_l.reset(new float[slots]);
  w.st_acc.reset(new float[slots * size_t(D)]);

  const int64_t n_shared = int64_t(sitems.size()) * w.NP * w.HG, n_own = int64_t(oitems.size()) * w.HGO;
  const int64_t threads = threads_for(int64_t(std::min(flops, 1e18)), kParallelFlops, std::max(n_shared, n_own));
  const int64_t RM = std::max(tile_shared, tile_own) * G + 16;
  const size_t per = Rows::floats(RM, D);
  std::vector<float> scratch(per * size_t(threads) + 16);
  float* base = scratch.data();
  while (reinterpret_cast<uintptr_t>(base) % 64 != 0) ++base;

  parallel_for(n_shared, threads, [&](int64_t tid, int64_t i) {
    const int64_t p = i % w.NP, hg = i / w.NP % w.HG;
    const SharedItem& it = sitems[size_t(i / w.NP / w.HG)];
    if (p * w.P >= w.shared[size_t(it.g)]) return;  // this group's prefix has fewer partitions
    Rows rw(base + per * size_t(tid), RM, D);
    shared_item(w, rw, it.g, it.t0, it.t1, p, hg);
  });
  parallel_for(n_own, threads, [&](int64_t tid, int64_t i) {
    const OwnItem& it = oitems[size_t(i / w.HGO)];
    Rows rw(base + per * size_t(tid), RM, D);
    own_item(w, rw, it.s, it.j0, it.j1, i % w.HGO);
  });
}

}  // namespace

RowsPath last_rows_path() {
  const int v = last_path.load(std::memory_order_relaxed);
  return RowsPath{v < 0 ? -1 : v / 2, v >= 0 && (v & 1) != 0};
}

void check_prefix_groups(const Cache& c, const CascadeCall& a, const kvb_prefix_groups& g) {
  check_batch(c, a);
  std::vector<int32_t> group_of;
  std::vector<int64_t> shared;
  check_groups(c, a, g, group_of, shared);
}

void cascade_attention(const Cache& c, const CascadeCall& a, const kvb_prefix_groups& g) {
  check_batch(c, a);
  Work w;
  check_groups(c, a, g, w.group_of, w.shared);
  w.c = &c;
  w.a = &a;
  w.g = &g;
  run(w);
}

void rows_attention(const Cache& c, const CascadeCall& a) {
  Work w;
  w.group_of.assign(size_t(a.num_seqs), -1);
  w.c = &c;
  w.a = &a;
  w.g = nullptr;
  run(w);
}

}  // namespace cpu
}  // namespace kern
}  // namespace kvb
