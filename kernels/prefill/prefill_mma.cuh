// The per-CTA work of the CUDA prefill / extend kernels on tensor cores (fp16 / bf16 queries; 16-bit or
// fp8 caches): prefill_tile, which prefill.cu's kernels instantiate and launch.
//
// CTA = one tile of 128 packed query rows (token, query head of the GQA group) of one sequence and
// one kv head, over one key split: 4 warps x 2 m-tiles of 16 rows for D 64 / 128 (each K / V
// fragment feeds two MMAs), 8 warps x 1 for D 256 (no registers for a second O). 128 rows per CTA
// halve the K / V traffic per FLOP of the former 64-row tile. Q is staged once in shared memory;
// K and V tiles of BN tokens are gathered through the block table with cp.async, double-buffered
// (tile i+1 loads while tile i computes); the table itself is read once per key tile, one thread per
// key, a tile ahead, into a shared array of row offsets (the former per-chunk table reads were the
// 4-of-32-byte scattered loads ncu flagged). S = Q K^T and O += P V use mma.sync m16n8k16 (fp32
// accumulation) fed by ldmatrix from XOR-swizzled shared memory (16-byte chunk c of row r sits at
// chunk c ^ (r & 7): conflict-free for cp.async stores and ldmatrix loads). The online softmax lives
// in registers (a thread holds 2 rows x 2 columns per 8-key n-tile per m-tile; row max / sum across
// the 4 threads of a row by shuffles); P is repacked from the S accumulators into A fragments without
// leaving registers. The common tile (no soft cap, no mask) is straight-line code: logits stay raw
// through the row max, the scale is folded into the FFMA before each ex2, the row max is lazy (moves
// only when a tile's max exceeds it by 8 in log2 units, prefill_tiles.h), and when no thread's part of
// a row exceeds it (nearly every tile) one vote skips the row-max shuffles and the rescale of O; one
// barrier per key tile. Keys are walked over the attended tiles only (sinks, then the window up to
// the tile's last position); the causal / window mask is evaluated only on tiles some row does not
// fully attend. Keys past the sequence or behind an invalid block id are zero-filled (cp.async
// ignore-src), never read. The output is staged in the Q tile and leaves in 16-byte stores. With
// several splits each CTA writes (max, sum, normalised acc) per row to the workspace instead, for
// prefill.cu's reduce kernel. Index arithmetic and the lazy-max rule live in prefill_tiles.h, checked
// on the CPU by tests/cpp/kernels_prefill_tiles.cpp.
//
// FP8 caches (KV = Fp8E4m3 / Fp8E5m2): the fp8 bytes are staged by cp.async and converted to the
// query's type in shared memory before the fragments read them (prefill_fp8_tiles.h: same shared
// memory, one more barrier per key tile). The kv head's k_scale (times the conversion's fold)
// multiplies the softmax scale, its v_scale the output.
#pragma once
#include <climits>
#include <type_traits>

#include "prefill.h"
#include "../decode/decode_tiles.h"
#include "prefill_tiles.h"
#include "prefill_fp8_tiles.h"
#include "../common/fp8_vec.cuh"
#include "../common/mma.cuh"
#include "prefill.cuh"

namespace kvb {
namespace kern {
namespace cuda {

constexpr int BM = int(kPrefillTileRows);  // packed rows per CTA: warps x m-tiles per warp x 16

// KV: the cache element type (T, or an fp8 tag of fp8_vec.cuh); ks, vs: for fp8 caches, the CTA's kv
// head's k_scale and v_scale times the conversion's fold (unused otherwise). kTree: the call has a tree
// mask (p.tree_mask); a kernel of its own, so that the tree branch takes no registers from the
// kernels of calls without one.
template <typename T, typename KV, int D, int BN, int NW, int MI, bool kTree>
__device__ __forceinline__ void prefill_tile(const PrefillParams& p, float ks, float vs) {
  using tiles::frag::swz;  // byte offset of 16-byte chunk c of row r in a swizzled [rows][C chunks] tile
  namespace fp8s = tiles::fp8s;
  constexpr bool kFp8 = kIsFp8Tag<KV>;
  constexpr int kThreads = 32 * NW;
  static_assert(16 * MI * NW == BM, "warps x m-tiles x 16 must cover the tile");
  static_assert(BN <= kThreads, "one thread per key of a tile computes its block offset");
  static_assert(BM <= kThreads, "one thread per row writes its position");
  constexpr int C = D / 8;   // 16-byte chunks per row
  constexpr int NT = BN / 8;  // 8-key n-tiles of S per m-tile
  constexpr int DT = D / 8;   // 8-dim n-tiles of O per m-tile
  extern __shared__ __align__(16) unsigned char smem[];
  // Byte offset (from k / v) of each key's row in s_off; valid ones are multiples of 16 (checked on the
  // host), so an odd value can flag a row to zero-fill (past the sequence, or a bad block id).
  constexpr int64_t kZeroFill = 1;
  // Q, K, V from the first 1 KiB boundary (so that fragment addresses are a per-lane base XOR / plus
  // constants: frag::q_addr), then [2][BN] byte offsets of each key's row (K and V share them).
  const uint32_t smem0 = uint32_t(__cvta_generic_to_shared(smem));
  const uint32_t sQ = (smem0 + 1023u) & ~1023u;  // [BM][D], later the output
  const uint32_t sK = sQ + BM * D * 2;       // [2][BN][D]
  const uint32_t sV = sK + 2 * BN * D * 2;   // [2][BN][D]
  constexpr uint32_t kBuf = BN * D * 2;      // bytes of one K (or V) buffer
  int64_t* s_off = reinterpret_cast<int64_t*>(smem + (sV + 2 * kBuf - smem0));

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const tiles::CtaTile ct = tiles::cta_tile(int(blockIdx.x), p.num_q_heads / p.group);
  const int kvh = ct.kv_head, split = blockIdx.z, G = p.group;
  const int seq = tiles::seq_of_tile(p.query_start, p.num_seqs, G, BM, ct.tile);
  const SeqView sv = seq_view(p, seq);
  if (dtiles::decode_path_owns(seq, p.num_seqs, p.query_start[seq], p.query_start[seq + 1], p.total_q, p.seq_lens[seq],
                               p.max_blocks << p.block_shift, G, kTree))
    return;  // a short query: launch_short_queries (decode_mma.cu) computes its rows
  const int64_t lt = tiles::local_tile(p.query_start, seq, G, BM, ct.tile, sv.fault == KVB_FAULT_NONE);
  const int pr0 = lt >= 0 && lt * BM <= INT_MAX ? int(lt) * BM : -1;  // first packed row
  const int rows = min(BM, sv.q_len * G - pr0);  // packed rows of this tile
  if (sv.fault != KVB_FAULT_NONE && pr0 == 0 && kvh == 0 && split == 0 && tid == 0)  // once per sequence
    record_fault(p.fault, sv.fault, KVB_KERNEL_PREFILL_ATTENTION, sv.fault_index, -1, sv.fault_value);
  if (pr0 < 0 || rows <= 0) return;  // a surplus tile (uniform over the CTA)

  const int base = sv.len - sv.q_len;
  const int pos_first = base + pr0 / G, pos_last = base + (pr0 + rows - 1) / G;
  // Attended key tiles of this split: the sinks, then the window up to pos_last (prefill_tiles.h).
  tiles::KeyTiles kt = tiles::key_tiles(pos_first, pos_last, p.window, p.sink, BN, split, p.split_tokens / BN);
  // A token tree (q_len <= 64 with a mask): its new keys [base, len) are masked by the rows' words.
  const bool tree = kTree && sv.q_len <= int(kTreeMaxTokens);
  if (tree) kt.mask_from(base);
  const int W = p.window, sink = kt.sink, lo_first = kt.lo_first;
  const int n_tiles = sv.fault == KVB_FAULT_NONE ? kt.count() : 0;
  __shared__ int s_bad;  // an attended key's block id was out of range: this tile's rows are NaN
  if (tid == 0) s_bad = 0;

  const int32_t* table = p.block_tables + int64_t(seq) * p.max_blocks;
  const int64_t head_off = p.kv.head(kvh);
  const int kmask = (1 << p.block_shift) - 1;

  // The block table is read once per key tile, one thread per key (not once per 16-byte chunk), and
  // one tile ahead: block_id() issues the load, key_offset() consumes it after a tile's compute, so
  // the table's latency hides behind the MMAs instead of stalling the cp.async issue.
  auto block_id = [&](int i) -> int {
    const int tok = kt.tile(i) * BN + tid;
    return i < n_tiles && tid < BN && tok < sv.len ? __ldg(table + (tok >> p.block_shift)) : -1;
  };
  auto key_offset = [&](int i, int id) -> int64_t {
    const int tok = kt.tile(i) * BN + tid;
    if (i >= n_tiles || tid >= BN || tok >= sv.len) return kZeroFill;
    if (id >= 0 && id < p.num_blocks)
      return (p.kv.row(id, tok, kmask) + head_off) * int64_t(sizeof(KV));
    // A token some row of this tile attends needs a valid block (what the CPU checks); other tokens
    // of the key tile may sit in blocks a window released (-1): zero-filled, masked.
    if (tok <= pos_last && (tok < sink || tok >= lo_first))
      if (atomicExch(&s_bad, 1) == 0 && kvh == 0)  // counted once per (query tile, split), not per kv head
        record_fault(p.fault, KVB_FAULT_BLOCK_ID, KVB_KERNEL_PREFILL_ATTENTION, seq, tok >> p.block_shift, id);
    return kZeroFill;
  };
  __syncthreads();  // s_bad = 0 before any key_offset
  if (tid < BN) {
    s_off[tiles::kv_stage(0) * BN + tid] = key_offset(0, block_id(0));
    s_off[tiles::kv_stage(1) * BN + tid] = key_offset(1, block_id(1));
  }

  // Q: packed row r -> (token (pr0 + r) / G, head kvh * G + (pr0 + r) % G); rows past the tile are zeros.
  // Consecutive threads take consecutive 16-byte chunks of a row: every load is a full, coalesced 16 B.
  static_assert(BM * C % kThreads == 0 && BN * C % kThreads == 0, "whole chunks per thread");
#pragma unroll 4
  for (int it = 0; it < BM * C / kThreads; ++it) {
    const int i = tid + it * kThreads;
    const int r = i / C, c = i - r * C;
    const int pr = pr0 + r;
    const bool ok = sv.fault == KVB_FAULT_NONE && r < rows;
    const T* src = reinterpret_cast<const T*>(p.q);
    if (ok)
      src += int64_t(sv.row0 + pr / G) * p.q_row_stride + int64_t(kvh * G + pr % G) * p.q_head_stride + c * 8;
    cp_async16(sQ + swz(C, r, c), src, ok ? 16 : 0);
  }
  // Position of each packed row, read only by the mask of a partial tile (kept out of the registers
  // the main loop needs); padding rows copy the last.
  __shared__ int s_pos[BM];
  if (tid < BM) s_pos[tid] = base + (pr0 + min(tid, rows - 1)) / G;
  // Tree rows: new keys start at s_tree_base (INT_MAX: no tree); the word of the row at position pos is
  // tree_mask[pos + s_tree_row]. Shared, so the main loop keeps no registers for them.
  __shared__ int s_tree_base, s_tree_row;
  if (kTree && tid == 0) s_tree_base = tree ? base : INT_MAX, s_tree_row = sv.row0 - base;
  __syncthreads();  // s_off of tiles 0 and 1, s_pos visible
  // Thread tid copies chunk tid % C of rows tid / C + j kThreads / C: the same chunk, hence the same
  // swizzle, in every row it copies, so each copy is one base plus an immediate.
  static_assert(kThreads % C == 0 && (kThreads / C) % 8 == 0 && BN % (kThreads / C) == 0, "a thread copies one chunk column");
  constexpr int kRowStep = kThreads / C;
  const int cp_row = tid / C, cp_chunk = tid % C;
  const uint32_t cp_dst = swz(C, cp_row, cp_chunk);
  auto load_kv = [&](int i) {
    const int st = tiles::kv_stage(i);
#pragma unroll
    for (int it = 0; it < BN / kRowStep; ++it) {
      const int64_t off = s_off[st * BN + cp_row + it * kRowStep];
      const int64_t src = (off & ~int64_t(1)) + cp_chunk * 16;
      const bool zero = (off & 1) != 0;
      const uint32_t dst = st * kBuf + cp_dst + uint32_t(it * kRowStep * C * 16);
      cp_async16_zfill(sK + dst, p.k + src, zero);
      cp_async16_zfill(sV + dst, p.v + src, zero);
    }
  };
  // fp8: staging tile st's chunks (prefill_fp8_tiles.h), and its conversion into the 16-bit tile at sK / sV.
  static_assert(!kFp8 || (BN % fp8s::copy_row_step(kThreads, D) == 0 && BN * C % kThreads == 0), "whole fp8 copies");
  const int cp8_chunk = fp8s::copy_chunk(tid, D);
  auto load_kv8 = [&](int i) {
    const int st = tiles::kv_stage(i);
#pragma unroll
    for (int it = 0; it < BN / fp8s::copy_row_step(kThreads, D); ++it) {
      const int row = fp8s::copy_row(tid, it, kThreads, D);
      const int64_t off = s_off[st * BN + row];
      const uint32_t dst = fp8s::staging(D, BN, st) + fp8s::copy_dst(D, row, cp8_chunk);
      const int64_t src = (off & ~int64_t(1)) + cp8_chunk * 16;
      cp_async16_zfill(sK + dst, p.k + src, (off & 1) != 0);
      cp_async16_zfill(sV + dst, p.v + src, (off & 1) != 0);
    }
  };
  // Unrolled fully, D 256 spilled (its O and S fill the registers across the conversion).
  constexpr int kCvtUnroll = D == 256 ? 1 : BN * C / kThreads;
  auto convert_kv8 = [&](int i) {
    const uint32_t st = fp8s::staging(D, BN, tiles::kv_stage(i));
#pragma unroll kCvtUnroll
    for (int it = 0; it < BN * C / kThreads; ++it) {
      const int x = tid + it * kThreads;
      const int row = fp8s::cvt_row(x, D), chunk = fp8s::cvt_chunk(x, D);
      const uint32_t src = st + fp8s::cvt_src(D, row, chunk), dst = fp8s::cvt_dst(D, row, chunk);
#pragma unroll
      for (int kv = 0; kv < 2; ++kv) {
        const uint32_t base = kv == 0 ? sK : sV;
        uint2 raw;
        asm volatile("ld.shared.v2.b32 {%0,%1}, [%2];\n" : "=r"(raw.x), "=r"(raw.y) : "r"(base + src));
        uint32_t w[4];
        fp8x8_to_pairs<T, std::is_same<KV, Fp8E5m2>::value>(raw, w);
        asm volatile("st.shared.v4.b32 [%0], {%1,%2,%3,%4};\n" ::"r"(base + dst), "r"(w[0]), "r"(w[1]), "r"(w[2]),
                     "r"(w[3]));
      }
    }
  };
  if (n_tiles > 0) {
    if constexpr (kFp8) load_kv8(0); else load_kv(0);
  }
  cp_async_commit();

  float o[MI][DT][4];
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int d = 0; d < DT; ++d) o[mi][d][0] = o[mi][d][1] = o[mi][d][2] = o[mi][d][3] = 0.f;
  float m[MI][2], l[MI][2], u[MI][2];  // u = qs m, 0 while m is -inf (no -inf - -inf in the exponents)
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) m[mi][0] = m[mi][1] = -INFINITY, l[mi][0] = l[mi][1] = u[mi][0] = u[mi][1] = 0.f;

  // Logits stay raw (Q K^T) through the mask and the row max; the scale (in base 2) is folded into the
  // one FFMA before each exp2, which the row max commutes with because scale > 0 (read_prefill).
  // The soft cap maps a raw logit x to cap / scale * tanh(x * scale / cap), the same units.
  // fp8: raw logits are Q times the stored codes' values / fold; k_scale x fold brings them to Q K^T.
  const float qs = kFp8 ? p.q_scale * ks : p.q_scale, slack = tiles::max_slack_raw(qs);  // lazy row max (row_max_moves)
  // Per-lane ldmatrix bases (prefill_tiles.h): the unrolled loops add only constants to these.
  uint32_t q_lane[MI];
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) q_lane[mi] = sQ + tiles::frag::q_base(C, tiles::mtile_of(warp, mi, MI), lane);
  const uint32_t k_lane = tiles::frag::k_base(C, lane), v_lane = tiles::frag::v_base(C, lane);

  for (int i = 0; i < n_tiles; ++i) {
    const uint32_t bK = sK + (kFp8 ? 0u : tiles::kv_stage(i) * kBuf), bV = sV + (kFp8 ? 0u : tiles::kv_stage(i) * kBuf);
    cp_async_wait<0>();
    __syncthreads();  // tile i landed for every thread, and every warp is done with tile i - 1's stage
    if constexpr (kFp8) {
      if (i + 1 < n_tiles) load_kv8(i + 1);
      cp_async_commit();
      convert_kv8(i);  // into the 16-bit tile, which every warp finished reading before the barrier
      __syncthreads();
    } else {
      if (i + 1 < n_tiles) load_kv(i + 1);
      cp_async_commit();
    }
    const int next_id = block_id(i + 2);  // consumed after the compute below

    // S = Q K^T for the warp's MI x 16 rows x BN keys: each K fragment feeds MI MMAs.
    float s[MI][NT][4];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int n = 0; n < NT; ++n) s[mi][n][0] = s[mi][n][1] = s[mi][n][2] = s[mi][n][3] = 0.f;
    const uint32_t kaddr = bK + k_lane;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[MI][4];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) ldsm_x4(a[mi], tiles::frag::q_addr(q_lane[mi], kk));
#pragma unroll
      for (int n2 = 0; n2 < NT / 2; ++n2) {
        uint32_t b[4];
        ldsm_x4(b, tiles::frag::k_addr(C, kaddr, n2, kk));
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
          Mma<T>::run(s[mi][2 * n2], a[mi], b[0], b[1]);
          Mma<T>::run(s[mi][2 * n2 + 1], a[mi], b[2], b[3]);
        }
      }
    }

    // Each optional step is one uniform branch per tile, so the common path (no cap, a full tile) is
    // straight-line code: the soft cap, then the mask where some row does not see the whole tile.
    if (p.soft_cap > 0.f) {
      const float raw_scale = kFp8 ? p.scale * ks : p.scale;
      const float cap_in = raw_scale / p.soft_cap, cap_out = p.soft_cap / raw_scale;
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mi][n][e] = cap_out * tanhf(s[mi][n][e] * cap_in);
    }
    if (!kt.full(kt.tile(i))) {
      const int k0 = kt.tile(i) * BN;
      const int tree_base = kTree ? s_tree_base : INT_MAX;
      if (!kTree || tree_base == INT_MAX) {
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
          for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e)
              if (!tiles::attends(k0 + n * 8 + tiles::frag::c_col(lane, e),
                                  s_pos[tiles::mtile_of(warp, mi, MI) * 16 + tiles::frag::c_row(lane, e)], W, sink))
                s[mi][n][e] = -INFINITY;
      } else {
        const uint64_t* words = p.tree_mask + s_tree_row;
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
          for (int h = 0; h < 2; ++h) {  // the thread's two rows of the m-tile
            const int pos = s_pos[tiles::mtile_of(warp, mi, MI) * 16 + tiles::frag::c_row(lane, 2 * h)];
            const uint64_t word = __ldg(words + pos);
#pragma unroll
            for (int n = 0; n < NT; ++n)
#pragma unroll
              for (int e = 2 * h; e < 2 * h + 2; ++e) {
                const int key = k0 + n * 8 + tiles::frag::c_col(lane, e);
                if (!tiles::attends(key, pos, W, sink) || !tiles::tree_sees(key, pos, tree_base, word)) s[mi][n][e] = -INFINITY;
              }
          }
      }
    }
    // Online softmax with the lazy row max (prefill_tiles.h row_max_moves). The 4 threads of a row
    // share its reference max m, so when no thread's own part of the row exceeds m by the slack, no
    // row of the warp moves: one vote skips the row-max shuffles, the new factors and the rescale of
    // O (D / 2 multiplies per row pair) together, on nearly every tile. The decision is the same as
    // the exact row max's: the row max exceeds m + slack iff some thread's part does.
    bool local = false;
    float mx[MI][2];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
      float mx0 = m[mi][0], mx1 = m[mi][1];
#pragma unroll
      for (int n = 0; n < NT; ++n)
        mx0 = fmaxf(mx0, fmaxf(s[mi][n][0], s[mi][n][1])), mx1 = fmaxf(mx1, fmaxf(s[mi][n][2], s[mi][n][3]));
      local |= tiles::row_max_moves(m[mi][0], mx0, slack) || tiles::row_max_moves(m[mi][1], mx1, slack);
      mx[mi][0] = mx0, mx[mi][1] = mx1;
    }
    if (__any_sync(0xffffffffu, local)) {
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        float mx0 = mx[mi][0], mx1 = mx[mi][1];
#pragma unroll
        for (int o2 = 1; o2 <= 2; o2 <<= 1) {
          mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o2));
          mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o2));
        }
        const bool mv0 = tiles::row_max_moves(m[mi][0], mx0, slack), mv1 = tiles::row_max_moves(m[mi][1], mx1, slack);
        const float n0 = mv0 ? mx0 : m[mi][0], n1 = mv1 ? mx1 : m[mi][1];
        const float u0 = n0 == -INFINITY ? 0.f : n0 * qs, u1 = n1 == -INFINITY ? 0.f : n1 * qs;
        // A kept max keeps exactly 1 (m qs - u, fused, would leave the product's rounding error).
        const float al0 = mv0 ? ex2(m[mi][0] * qs - u0) : 1.f, al1 = mv1 ? ex2(m[mi][1] * qs - u1) : 1.f;
        m[mi][0] = n0, m[mi][1] = n1, u[mi][0] = u0, u[mi][1] = u1;
        l[mi][0] *= al0, l[mi][1] *= al1;
#pragma unroll
        for (int d = 0; d < DT; ++d) o[mi][d][0] *= al0, o[mi][d][1] *= al0, o[mi][d][2] *= al1, o[mi][d][3] *= al1;
      }
    }
    // P = 2^(qs x - u), u = qs m (0 while the row has seen only masked keys: no -inf - -inf), P <= 2^8.
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
      const float u0 = u[mi][0], u1 = u[mi][1];
      float l0 = 0.f, l1 = 0.f;
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        s[mi][n][0] = ex2(fmaf(s[mi][n][0], qs, -u0)), s[mi][n][1] = ex2(fmaf(s[mi][n][1], qs, -u0));
        s[mi][n][2] = ex2(fmaf(s[mi][n][2], qs, -u1)), s[mi][n][3] = ex2(fmaf(s[mi][n][3], qs, -u1));
        l0 += s[mi][n][0] + s[mi][n][1], l1 += s[mi][n][2] + s[mi][n][3];
      }
      l[mi][0] += l0, l[mi][1] += l1;
    }

    // O += P V: P (16 x BN per m-tile) from the S registers, V through ldmatrix.trans; each V fragment
    // feeds MI MMAs.
    const uint32_t vaddr = bV + v_lane;
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      uint32_t a[MI][4];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        a[mi][0] = Mma<T>::pack(s[mi][2 * kk][0], s[mi][2 * kk][1]);
        a[mi][1] = Mma<T>::pack(s[mi][2 * kk][2], s[mi][2 * kk][3]);
        a[mi][2] = Mma<T>::pack(s[mi][2 * kk + 1][0], s[mi][2 * kk + 1][1]);
        a[mi][3] = Mma<T>::pack(s[mi][2 * kk + 1][2], s[mi][2 * kk + 1][3]);
      }
#pragma unroll
      for (int d2 = 0; d2 < DT / 2; ++d2) {
        uint32_t b[4];
        ldsm_x4_trans(b, tiles::frag::v_addr(C, vaddr, kk, d2));
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
          Mma<T>::run(o[mi][2 * d2], a[mi], b[0], b[1]);
          Mma<T>::run(o[mi][2 * d2 + 1], a[mi], b[2], b[3]);
        }
      }
    }
    // Stage i & 1 of s_off was last read by load_kv(i) in iteration i - 1, before this iteration's
    // barrier; load_kv(i + 2) reads it after the next one.
    const int64_t next_off = key_offset(i + 2, next_id);
    if (tid < BN && i + 2 < n_tiles) s_off[tiles::kv_stage(i + 2) * BN + tid] = next_off;
  }
  cp_async_wait<0>();
  __syncthreads();  // also: every warp is done reading Q, whose tile now stages the output
  const bool bad = sv.fault != KVB_FAULT_NONE || s_bad != 0;

#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int o2 = 1; o2 <= 2; o2 <<= 1) {
      l[mi][0] += __shfl_xor_sync(0xffffffffu, l[mi][0], o2);
      l[mi][1] += __shfl_xor_sync(0xffffffffu, l[mi][1], o2);
    }
  if (p.num_splits == 1) {
    // Normalised rows into the Q tile (4-byte pairs, conflict-free through the swizzle), then out in
    // 16-byte stores: consecutive threads write consecutive chunks of a row.
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float inv = bad ? nan_f() : (l[mi][half] > 0.f ? 1.f / l[mi][half] : 0.f);
        if constexpr (kFp8) inv *= vs;
        const int mt = tiles::mtile_of(warp, mi, MI);
#pragma unroll
        for (int d = 0; d < DT; ++d) {
          const uint32_t v = Mma<T>::pack(o[mi][d][2 * half] * inv, o[mi][d][2 * half + 1] * inv);
          asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sQ + tiles::frag::o_stage(C, mt, lane, half, d)), "r"(v));
        }
      }
    __syncthreads();
    for (int x = tid; x < BM * C; x += kThreads) {
      const int r = x / C, c = x - r * C;
      if (r >= rows) break;  // x grows with r: every later chunk is padding too
      store_out_chunk<T>(p, sv.row0, pr0 + r, kvh, G, c, sQ + swz(C, r, c));
    }
    return;
  }
  // Several splits: this split's (max, sum, normalised acc) per row to the workspace.
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = tiles::mtile_of(warp, mi, MI) * 16 + tiles::frag::c_row(lane, 2 * half);
      if (r >= rows) continue;
      float inv = bad ? nan_f() : (l[mi][half] > 0.f ? 1.f / l[mi][half] : 0.f);
      if constexpr (kFp8) inv *= vs;
      const int pr = pr0 + r;
      const int row = sv.row0 + pr / G, h = kvh * G + pr % G;
      if (row < 0 || row >= p.total_q) continue;
      const int64_t wrow = (int64_t(row) * p.num_q_heads + h) * p.num_splits + split;
      float* op = p.ws_o + wrow * D;
#pragma unroll
      for (int d = 0; d < DT; ++d) {  // scalar: ws_o is only 4-byte aligned when num_splits is odd
        op[d * 8 + tiles::frag::c_col(lane, 0)] = o[mi][d][2 * half] * inv;
        op[d * 8 + tiles::frag::c_col(lane, 1)] = o[mi][d][2 * half + 1] * inv;
      }
      if ((lane & 3) == 0) {
        p.ws_m[wrow] = m[mi][half] * qs;  // raw max -> log2 units
        p.ws_l[wrow] = bad ? nan_f() : l[mi][half];  // the reduce kernel passes a NaN weight on
      }
    }
}

}  // namespace cuda
}  // namespace kern
}  // namespace kvb
