// The tensor-core paged decode kernel's geometry (kernels/decode/decode_mma.cu) as plain functions, compiled
// both into the kernel (__host__ __device__) and into a CPU test (tests/cpp/kernels_decode_tiles.cpp) that
// checks, without a GPU, that the CTAs of a launch cover every attended (query head, key) pair exactly once
// and that the swizzled ldmatrix / mma fragment addressing computes Q K^T and P V on an emulated warp.
//
// One CTA = 4 warps = one (partition, kv head, chunk of up to 16 query heads of the GQA group, sequence).
// The chunk's query heads are the 16 rows of the mma.sync m16n8k16 A operand (padded with zero rows), so
// every K and V row is loaded from memory once per kv head and serves the whole group. A pipeline stage
// holds kDecodeStageKeys consecutive keys of the partition; warp w computes keys 16w..16w+15 of each stage
// (S = Q K^T: 16 rows x 16 keys; O += P V: k = those 16 keys), and the 4 warps' (max, sum, O) are merged
// at the end.
#pragma once
#include <cstdint>

#include "../common/host_device.h"

namespace kvb {
namespace kern {
namespace dtiles {

constexpr int kWarps = 4;
constexpr int kRows = 16;                    // query heads per CTA (mma M)
constexpr int kWarpKeys = 16;                // keys per warp per stage (mma K of P V)
constexpr int kStageKeys = kWarps * kWarpKeys;
// Smallest GQA group served by tensor cores (16-bit and fp8 caches); smaller groups keep the CUDA-core kernel,
// which already reads each K/V row once per kv head and is at the copy bound for group 1.
constexpr int kMinGroup = 4;

// Dynamic shared memory: Q (16 x D) then the K and V stages, 16-bit elements. The final merge of the
// warps reuses the stage memory as float [kWarps][16][D] (fits: stages * 2 * 64 * 2 >= 4 * 16 * 4).
KVB_HD constexpr int smem_bytes(int head_dim, int stages) {
  return kRows * head_dim * 2 + stages * 2 * kStageKeys * head_dim * 2;
}
constexpr int kStaticSmem = 1024;  // bound on the kernel's static shared memory (flag, per-warp max and sum)
// Pipeline depth (stages of K + V: 16 / 32 / 64 KiB at D 64 / 128 / 256): 4 at D 64, 3 at D 128 (two
// CTAs per H100 SM), at D 256 (one CTA per SM) 3 where a block may have that much shared memory
// (max_block_smem: H100 227 KiB) and 2 otherwise (A100 163 KiB).
// Bytes in flight per SM (a CTA computing stage i has stages i+1 .. i+ST-1 loading; one fewer while it
// waits), against the ~24-32 KiB an H100 SM needs to hold its 1/132 of ~3 TB/s over ~1 us of latency:
//   D 64:  66 KiB per CTA, 3 CTAs per SM (shared memory), 3 x 16 = 48 KiB each -> 144 KiB per SM
//   D 128: 100 KiB, 2 CTAs per SM, 2 x 32 = 64 KiB each                        -> 128 KiB per SM
//   D 256: 200 KiB, 1 CTA per SM, 2 x 64 = 128 KiB                              -> 128 KiB per SM
//   (A100, D 256: 136 KiB, 2 stages: 64 KiB per SM, against ~19 KiB needed at 2 TB/s / 108 SMs)
// So steady state is not bounded by bytes in flight; what the first H100 run lost (32 x 4096 at 73% of
// the copy rate, D 256 at 68%) was each CTA's fixed cost, paid once per wave: see mma_partition_size.
KVB_HD constexpr int stages(int head_dim, int max_block_smem) {
  return head_dim <= 64 ? 4 : head_dim <= 128 ? 3 : smem_bytes(head_dim, 3) + kStaticSmem <= max_block_smem ? 3 : 2;
}

// FP8 caches (decode_mma.cu, KV an fp8 tag). The stages hold the fp8 bytes, row-major [64 keys][D] (a
// key row is D / 16 16-byte cp.async chunks; consecutive threads take consecutive chunks), after Q; then
// one 16-bit K tile and one V tile of a stage's 64 keys ([64][C chunks], swizzled as above), which the
// fragments read. Each warp converts its own 16 keys of the stage (rows 16w..16w+15, the only rows its
// ldmatrix reads) after the stage's barrier: no CTA barrier is added. Fewer bytes than the 16-bit
// stages (3 stages at D 128: 84 KiB against 100), and the warps' final merge still fits after Q.
KVB_HD constexpr int smem_bytes_fp8(int head_dim, int stages) {
  return kRows * head_dim * 2 + stages * 2 * kStageKeys * head_dim + 2 * kStageKeys * head_dim * 2;
}
// Byte offsets from the start of shared memory: the K and V stage areas, the 16-bit K and V tiles.
KVB_HD constexpr int fp8_k_stages(int head_dim) { return kRows * head_dim * 2; }
KVB_HD constexpr int fp8_v_stages(int head_dim, int stages) { return fp8_k_stages(head_dim) + stages * kStageKeys * head_dim; }
KVB_HD constexpr int fp8_k_tile(int head_dim, int stages) { return fp8_v_stages(head_dim, stages) + stages * kStageKeys * head_dim; }
KVB_HD constexpr int fp8_v_tile(int head_dim, int stages) { return fp8_k_tile(head_dim, stages) + kStageKeys * head_dim * 2; }
// The stage copy: item x (x = tid + j * threads, kStageKeys * D / 16 items) is 16-byte chunk x % (D / 16)
// of key row x / (D / 16), at that byte offset in the key's cache row and at row * D + 16 chunk in the stage.
KVB_HD int fp8_copy_row(int x, int head_dim) { return x / (head_dim / 16); }
KVB_HD int fp8_copy_chunk(int x, int head_dim) { return x % (head_dim / 16); }
KVB_HD int fp8_copy_dst(int head_dim, int row, int chunk) { return row * head_dim + chunk * 16; }
// Warp w's conversion: item x (x = lane + 32 j, 16 * D / 8 items) is 16-bit chunk x % C of key row
// 16 w + x / C: 8 codes at row * D + 8 chunk of the stage, 16 bytes at swz(C, row, chunk) of the tile.
KVB_HD int fp8_cvt_row(int w, int x, int head_dim) { return w * kWarpKeys + x / (head_dim / 8); }
KVB_HD int fp8_cvt_chunk(int x, int head_dim) { return x % (head_dim / 8); }
KVB_HD int fp8_cvt_src(int head_dim, int row, int chunk) { return row * head_dim + chunk * 8; }

// Partition size of a tensor-core decode launch (the host picks it; decode.cu).
//
// The plan's partition size (plan_partition, shape-only: it sized the caller's workspace) or a
// power-of-two multiple of it (fewer partitions: the workspace still suffices), chosen by a cost model
// fitted to the first H100 run of this kernel (2026-11-26, block 16, D 128, every split at 256-1024 keys
// per CTA, 16 waves): time = waves x (kCtaOverheadKeys + P) in units of "one key of one CTA", i.e. each
// CTA pays a fixed cost (Q load, the pipeline's first round trip through the block table and the cache,
// the warps' merge and the workspace write) worth ~80-130 keys at D 128 with 2 CTAs per SM (~235 at
// D 256, 1 CTA per SM, where no other CTA hides it), and a grid of ceil(CTAs / wave) waves pays it once
// per wave. The old rule (the most partitions among equal last-wave fills) kept 256-1024 keys per CTA:
// 32 x 4096 ran at 73% of the copy rate (P 256, 16 waves), 64 x 8192 at 91% (P 1024); with P 4096
// both become one to four waves at ~97%. The reduce kernel (a second launch and the workspace
// round trip) counts as one more overhead when there are several partitions.
// Longer partitions leave a ragged batch (one long sequence among short ones) waiting for that
// sequence's few CTAs, each streaming alone at (in-flight bytes / latency): P is capped at 32 pipeline
// round trips of a lone CTA, max_partition_keys = 32 x (stages - 1) x 64 keys (4096 at D 64 to 256 on an
// H100: 2 MiB per CTA at D 128, ~40-50 us alone; 2048 at D 256 on an A100).
constexpr int64_t kCtaOverheadKeys = 128;
KVB_HD int64_t max_partition_keys(int stages) { return int64_t(32) * (stages - 1) * kStageKeys; }
// max_ctx: max_blocks_per_seq * block_size; ctas_per_partition: kv heads x head chunks x sequences;
// wave: resident CTAs of the whole GPU (SMs x CTAs per SM); int_limit: P + max_ctx must stay below it
// (token indices are int in the kernel).
inline int64_t mma_partition_size(int64_t plan_partition, int64_t plan_partitions, int64_t max_ctx,
                                  int64_t ctas_per_partition, int64_t wave, int stages, int64_t int_limit) {
  if (plan_partitions <= 1) return plan_partition;
  const int64_t cap = max_partition_keys(stages);
  int64_t best = plan_partition;
  double best_cost = -1.0;
  for (int64_t P = plan_partition; P == plan_partition || (P <= cap && P + max_ctx < int_limit); P *= 2) {
    const int64_t np = (max_ctx + P - 1) / P;
    const int64_t waves = (np * ctas_per_partition + wave - 1) / wave;
    const double cost = double(waves) * double(kCtaOverheadKeys + P) + (np > 1 ? double(kCtaOverheadKeys) : 0.0);
    if (best_cost < 0.0 || cost < best_cost * (1.0 - 1e-9)) {  // at equal cost, the most partitions
      best_cost = cost;
      best = P;
    }
    if (np == 1) break;
  }
  return best;
}

// Query-head chunks of a GQA group and the heads of chunk c (balanced: sizes differ by at most one).
KVB_HD int num_chunks(int group) { return (group + kRows - 1) / kRows; }
KVB_HD int chunk_first(int group, int c) { return int(int64_t(group) * c / num_chunks(group)); }
KVB_HD int chunk_count(int group, int c) { return chunk_first(group, c + 1) - chunk_first(group, c); }

// Key t of a sequence of len tokens is attended by its decode query (window 0 = none; sinks count
// only with a window), and lies in partition [t_begin, t_end).
KVB_HD bool attends(int t, int len, int window, int sink) {
  return t >= 0 && t < len && (window <= 0 || t >= len - window || t < sink);
}
// Does the query at position pos attend key t (the rule of the CPU reference and the prefill kernels)?
KVB_HD bool attends_at(int t, int pos, int window, int sink) {
  return t <= pos && (window <= 0 || t > pos - window || t < sink);
}

// Mixed batches: which path of kvb_prefill_attention owns sequence seq. Sequences with few query rows
// (q_len <= kShortQueryMax and q_len * group <= 16 packed rows: one mma M tile per kv head) run as
// decode-shaped work in the tensor-core decode kernel (its query rows at their own causal positions)
// instead of wasting a 64-row prefill tile; the prefill kernel's CTAs of such sequences exit at once. A
// sequence whose query_start / seq_lens break the contract stays with the prefill kernel, which reports
// it (a negative query_start, which it tolerates, too). Both kernels call decode_path_owns with the same
// device-side values, so exactly one owns each sequence; the host reads none of them. With a tree mask
// (tree) only q_len 1 rows go to the decode kernel (causal; a tree row of one node sees the prefix and
// itself), the others need their words.
constexpr int kShortQueryMax = 4;
KVB_HD bool short_query(int q_len, int group) { return q_len >= 1 && q_len <= kShortQueryMax && q_len * group <= kRows; }
// The same, with the prefill kernels' fault checks (prefill.cuh seq_view): query_start[seq] = qs0,
// query_start[seq + 1] = qs1, seq_lens[seq] = len, max_tokens = max_blocks_per_seq * block_size.
KVB_HD bool decode_path_owns(int seq, int num_seqs, int qs0, int qs1, int total_q, int len, int max_tokens, int group,
                             bool tree = false) {
  const bool fault = (seq == 0 && qs0 != 0) || qs0 < 0 || qs1 < qs0 || qs1 > total_q || (seq == num_seqs - 1 && qs1 != total_q) ||
                     len < qs1 - qs0 || len > max_tokens;
  return !fault && short_query(qs1 - qs0, group) && (!tree || qs1 - qs0 == 1);
}

// Packed row r of a work item of q_len tokens x heads query heads (token-major, as the prefill kernel
// packs rows): its token and head within the item, and the token's position in a sequence of len keys.
KVB_HD int row_token(int r, int heads) { return r / heads; }
KVB_HD int row_head(int r, int heads) { return r % heads; }
KVB_HD int row_pos(int r, int heads, int q_len, int len) { return len - q_len + r / heads; }
// The first key any row of the item attends under a window (the first row's window start; 0 without one).
KVB_HD int first_window_key(int len, int q_len, int window) {
  return window > 0 ? (len - q_len + 1 - window > 0 ? len - q_len + 1 - window : 0) : 0;
}

// Stages of a partition of n keys.
KVB_HD int stage_count(int n) { return n <= 0 ? 0 : (n + kStageKeys - 1) / kStageKeys; }
// Key of stage i, warp w, and the warp's key column k (0..15).
KVB_HD int stage_key(int t_begin, int i, int w, int k) { return t_begin + i * kStageKeys + w * kWarpKeys + k; }

// Shared-memory tiles are row-major [rows][C chunks of 16 bytes] with chunk c of row r at chunk
// c ^ (r & 7) (conflict-free 16-byte cp.async stores and ldmatrix loads). Byte offset of chunk c of row r:
KVB_HD uint32_t swz(int chunks_per_row, int r, int c) { return uint32_t((r * chunks_per_row + (c ^ (r & 7))) * 16); }

// ldmatrix.x4 takes one row address per lane: lanes 8j..8j+7 address rows 0..7 of matrix j, which lands
// in register j of every lane. m16n8k16 layouts (PTX ISA): A a0..a3 = rows g / g+8 x k 2q.. / 2q+8..,
// B b0 / b1 = k 2q.. / 2q+8.. x n g, C c0..c3 = rows g / g+8 x n 2q, 2q+1 (g = lane / 4, q = lane % 4).
// Q (16 rows) as A of S = Q K^T, k-step kk: matrices (rows 0-7, 8-15) x (k lo, k hi).
KVB_HD int q_row(int lane) { return lane & 15; }
KVB_HD int q_chunk(int kk, int lane) { return 2 * kk + (lane >> 4); }
// K rows of warp w's 16 keys as B, k-step kk: matrices (keys 0-7: k lo, hi), (keys 8-15: k lo, hi),
// i.e. b0 b1 of key n-tile 0, then of n-tile 1.
KVB_HD int k_row(int w, int lane) { return w * kWarpKeys + ((lane >> 4) << 3) + (lane & 7); }
KVB_HD int k_chunk(int kk, int lane) { return 2 * kk + ((lane >> 3) & 1); }
// V rows of warp w's 16 keys as B of O += P V through ldmatrix.trans, dims 16 d2..: matrices
// (keys 0-7, 8-15) x (dim chunk 2 d2, 2 d2 + 1), i.e. b0 b1 of d-tile 2 d2, then of 2 d2 + 1.
KVB_HD int v_row(int w, int lane) { return w * kWarpKeys + ((lane >> 3) & 1) * 8 + (lane & 7); }
KVB_HD int v_chunk(int d2, int lane) { return 2 * d2 + (lane >> 4); }
// Accumulator element e (0..3) of an n-tile: row (query head of the chunk) and column (key or dim).
KVB_HD int c_row(int lane, int e) { return (lane >> 2) + (e >> 1) * 8; }
KVB_HD int c_col(int lane, int e) { return 2 * (lane & 3) + (e & 1); }

}  // namespace dtiles
}  // namespace kern
}  // namespace kvb
