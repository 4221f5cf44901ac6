// The sm_90a prefill kernel's (kernels/prefill/prefill_hopper.cu) arithmetic as plain functions, compiled
// into the kernel (__host__ __device__) and into a CPU test (tests/cpp/kernels_prefill_hopper_tiles.cpp)
// that checks it without a GPU: the shared-memory layout the cp.async loads write, the wgmma matrix
// descriptors that read it (addresses modelled from the PTX ISA's canonical 128-byte-swizzle layouts),
// the accumulator / A-register fragments, the producer / consumer stage and phase of every key tile,
// and what the kernel takes. The tile schedule and mask classification are prefill_tiles.h's, with
// kKeys-token key tiles.
#pragma once
#include <cstdint>

#include "prefill_tiles.h"

namespace kvb {
namespace kern {
namespace hopper {

// CTA: warpgroup 0 loads (producer), warpgroups 1 and 2 compute 64 packed query rows each (consumers),
// so a CTA covers the portable kernel's 128-row query tile and plan_prefill's grid is reused as is.
constexpr int kHeadDim = 128;
constexpr int kRows = 128;        // packed query rows per CTA (= kPrefillTileRows)
constexpr int kWgRows = 64;       // rows per consumer warpgroup (one wgmma M)
constexpr int kKeys = 64;         // keys per K / V tile (the N of S = Q K^T, the K of O += P V)
constexpr int kStages = 4;        // K / V ring depth (see the deadlock note at kv_slot)
constexpr int kWgThreads = 128;
constexpr int kThreads = 3 * kWgThreads;
constexpr int kConsumerThreads = 2 * kWgThreads;
constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks per row (16-bit elements)

// What the kernel takes (everything else runs the portable kernel): head dim 128, fp16 / bf16 caches
// with q / out of the same type, one key split (plan_prefill splits only when the grid is under 1024
// CTAs). Every block size the cache allows: keys are gathered one row (token) at a time.
KVB_HD bool takes(int head_dim, bool sixteen_bit_cache, bool q_same_dtype, int num_splits) {
  return head_dim == kHeadDim && sixteen_bit_cache && q_same_dtype && num_splits == 1;
}

// ---- Shared memory --------------------------------------------------------------------------------
// A tile of R rows x 128 16-bit elements is two column blocks of 64 elements (128 bytes a row), each
// [R][8 chunks] with 16-byte chunk c of row r at chunk c ^ (r & 7): the wgmma 128-byte swizzle
// (address bits 4-6 XOR bits 7-9), valid from a 1 KiB-aligned tile start. Q is K-major (rows = packed
// query rows, k = head dim), K is K-major (rows = keys), V the same bytes read N-major (n = head dim,
// k = keys): one layout, one loader for K and V.
KVB_HD uint32_t tile_offset(int rows_in_tile, int row, int chunk) {
  return uint32_t(((chunk >> 3) * rows_in_tile + row) * 128 + (((chunk & 7) ^ (row & 7)) << 4));
}
constexpr uint32_t kQBytes = uint32_t(kRows) * kHeadDim * 2;
constexpr uint32_t kKVBytes = uint32_t(kKeys) * kHeadDim * 2;  // one K (or V) tile
// From the 1 KiB-aligned base: Q, then per stage K and V, then the key row offsets [kStages][kKeys]
// (int64), then the full and empty mbarriers [kStages] each.
KVB_HD uint32_t smem_k(int stage) { return kQBytes + uint32_t(stage) * 2 * kKVBytes; }
KVB_HD uint32_t smem_v(int stage) { return smem_k(stage) + kKVBytes; }
constexpr uint32_t kOffBytes = kQBytes + kStages * 2 * kKVBytes;
constexpr uint32_t kFullBar = kOffBytes + kStages * kKeys * 8;
constexpr uint32_t kEmptyBar = kFullBar + kStages * 8;
constexpr uint32_t kSmemBytes = kEmptyBar + kStages * 8 + 1024;  // + alignment slack of the dynamic base

// K / V loads: producer thread t copies chunk t % 16 of rows t / 16 + 8 j (j < kKeys / 8) of the K and
// the V tile: the same chunk and row & 7 in every row it copies, so one base plus 1024 j bytes. Q is
// loaded once by all kThreads threads, chunk x = tid + kThreads it of the [kRows][16] tile.
constexpr int kCopyRowStep = kWgThreads / kChunks;  // 8
KVB_HD int copy_row(int t, int j) { return t / kChunks + kCopyRowStep * j; }
KVB_HD int copy_chunk(int t) { return t % kChunks; }
// The tile offset thread t writes on step j, as the kernel forms it: one per-thread base plus a constant.
KVB_HD uint32_t copy_dst(int t, int j) {
  return tile_offset(kKeys, copy_row(t, 0), copy_chunk(t)) + uint32_t(j * kCopyRowStep * 128);
}

// ---- wgmma matrix descriptors ----------------------------------------------------------------------
// 64 bits: start address >> 4 (bits 0-13), leading-dimension byte offset >> 4 (16-29), stride-dimension
// byte offset >> 4 (32-45), base offset 0 (49-51, the tiles are 1 KiB aligned), layout 1 = 128-byte
// swizzle (62-63).
constexpr uint64_t kSwizzle128 = 1;
KVB_HD uint64_t make_desc(uint32_t smem_addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  return uint64_t((smem_addr & 0x3FFFFu) >> 4) | (uint64_t((lbo_bytes >> 4) & 0x3FFFu) << 16) |
         (uint64_t((sbo_bytes >> 4) & 0x3FFFu) << 32) | (kSwizzle128 << 62);
}
// K-major, 128-byte swizzle: 8-row groups 1024 bytes apart (SBO); LBO unused (the 16 k of one
// instruction sit inside one 128-byte row), set to 16 bytes as the canonical layouts do.
constexpr uint32_t kKMajorLbo = 16, kKMajorSbo = 1024;
// Q of consumer warpgroup wg (rows 64 wg ..), k-step kk (dims 16 kk ..): column block kk / 4, 32 bytes
// per k-step inside the 128-byte row (the hardware swizzles the sum).
KVB_HD uint64_t q_desc(uint32_t sQ, int wg, int kk) {
  return make_desc(sQ + uint32_t((kk >> 2) * kRows * 128 + wg * kWgRows * 128 + (kk & 3) * 32), kKMajorLbo, kKMajorSbo);
}
// K (all kKeys keys as N), k-step kk.
KVB_HD uint64_t k_desc(uint32_t sK, int kk) {
  return make_desc(sK + uint32_t((kk >> 2) * kKeys * 128 + (kk & 3) * 32), kKMajorLbo, kKMajorSbo);
}
// V read N-major (n = head dim, 64 per 128-byte row, the two column blocks LBO apart; k = keys, 8 keys
// = 1024 bytes per SBO), k-step kk = keys 16 kk ..: 16 rows of 128 bytes further per step.
constexpr uint32_t kVLbo = uint32_t(kKeys) * 128, kVSbo = 1024;
KVB_HD uint64_t v_desc(uint32_t sV, int kk) { return make_desc(sV + uint32_t(kk * 16 * 128), kVLbo, kVSbo); }

// ---- Register fragments (wgmma m64nNk16, per warpgroup) ----------------------------------------------
// Accumulator register i of thread t (warp w = t / 32 of the warpgroup, lane): row 16 w + lane / 4
// (+ 8 for i & 2), column 8 (i / 4) + 2 (lane % 4) + (i & 1).
KVB_HD int acc_row(int t, int i) { return 16 * (t >> 5) + ((t & 31) >> 2) + 8 * ((i >> 1) & 1); }
KVB_HD int acc_col(int t, int i) { return 8 * (i >> 2) + 2 * (t & 3) + (i & 1); }
// A from registers (16-bit, m64k16): register j (two elements, h = 0 low half, 1 high) of thread t:
// row 16 w + lane / 4 (+ 8 for j odd), k 2 (lane % 4) + h (+ 8 for j >= 2).
KVB_HD int a_row(int t, int j) { return 16 * (t >> 5) + ((t & 31) >> 2) + 8 * (j & 1); }
KVB_HD int a_k(int t, int j, int h) { return 2 * (t & 3) + h + 8 * (j >> 1); }
// P of O += P V, k-step kk (keys 16 kk ..): A register j packs S accumulators p_acc(kk, j) and + 1.
KVB_HD int p_acc(int kk, int j) { return 8 * kk + 2 * j; }
// The output is staged in the consumer warpgroup's own rows of the Q tile: O accumulators i, i + 1
// (i even) of thread t of warpgroup wg go, as one 4-byte pair, to this offset; row r's chunk c is then
// read back at tile_offset(kRows, r, c) and stored to global memory in 16 bytes.
KVB_HD uint32_t out_stage(int wg, int t, int i) {
  const int r = wg * kWgRows + acc_row(t, i), col = acc_col(t, i);
  return tile_offset(kRows, r, col / 8) + uint32_t((col % 8) * 2);
}

// ---- Producer / consumer ring -----------------------------------------------------------------------
// Key tile i lives in stage i % kStages; its full barrier (producer -> consumers) completes phase
// (i / kStages) & 1 when it has landed, and its empty barrier (consumers -> producer) completes that
// phase when both consumer warpgroups are done with it. Consumers wait full for parity `phase`; the
// producer, before refilling a stage, waits empty for parity phase ^ 1 (on a fresh barrier the phase
// "before" phase 0, parity 1, counts as complete, so the first kStages tiles pass at once).
// Deadlock note: the producer signals tile i only after issuing tile i + 1 (two tiles of copies in
// flight), and a consumer releases tile i only after it holds tile i + 1 (the next S = Q K^T runs while
// P V of tile i does): so the ring needs kStages >= 3 (checked by the CPU test's simulation).
struct KvSlot {
  int stage;
  uint32_t phase;
};
KVB_HD KvSlot kv_slot(int i, int stages = kStages) {
  KvSlot s;
  s.stage = i % stages;
  s.phase = uint32_t((i / stages) & 1);
  return s;
}
KVB_HD uint32_t consumer_parity(int i, int stages = kStages) { return kv_slot(i, stages).phase; }
KVB_HD uint32_t producer_parity(int i, int stages = kStages) { return kv_slot(i, stages).phase ^ 1u; }

}  // namespace hopper
}  // namespace kern
}  // namespace kvb
