// How the CUDA prefill kernel (kernels/prefill/prefill_mma.cuh) reads an FP8 cache: the shared-memory staging of
// the fp8 bytes and their conversion into the 16-bit K / V tile the ldmatrix fragments read, as plain
// functions compiled into the kernel and into a CPU test (tests/cpp/kernels_prefill_fp8_tiles.cpp) that
// checks coverage, bounds and bank conflicts without a GPU.
//
// The 16-bit kernel double-buffers K and V: [2][BN][D] 16-bit elements each. With an fp8 cache the
// same bytes hold one 16-bit tile (stage 0's place, where the fragments read it) and, in stage 1's
// place, two staging tiles of fp8 bytes, [2][BN][D] (a 16-bit tile is as large as two fp8 tiles): so
// the shared memory, and the CTAs per SM, are those of the 16-bit kernel. Key tile i is copied by
// cp.async into staging tile i & 1 (half the bytes of a 16-bit cache); iteration i waits for it, one
// barrier, issues tile i + 1's copies into the other staging tile, converts staging tile i & 1 into
// the 16-bit tile (every warp finished tile i - 1's reads of it before the barrier), a second barrier,
// then computes on it as the 16-bit kernel does.
//
// Staging tiles are plain row-major [BN][D] bytes: a cp.async moves 16 bytes (16 codes), thread t takes
// 16-byte chunk t % (D / 16) of rows t / (D / 16) + j (threads / (D / 16)) (consecutive threads,
// consecutive chunks: conflict-free stores). The conversion takes 8 codes per item: item x is 16-bit
// chunk x % C of row x / C (C = D / 8), read as 8 bytes at row * D + 8 chunk (a warp reads 256 consecutive
// bytes: conflict-free) and written as 16 bytes at the swizzled place frag::swz(C, row, chunk) (8
// consecutive items are one aligned run of 8 chunks of a row, which the XOR swizzle permutes: conflict-free).
#pragma once
#include <cstdint>

#include "prefill_tiles.h"

namespace kvb {
namespace kern {
namespace tiles {
namespace fp8s {

// Bytes of one 16-bit K (or V) tile of bn keys, from the start of the K (or V) region; the staging
// tiles follow it.
KVB_HD constexpr uint32_t tile16_bytes(int head_dim, int bn) { return uint32_t(bn * head_dim * 2); }
// Byte offset of staging tile st (0, 1) from the start of the K (or V) region.
KVB_HD constexpr uint32_t staging(int head_dim, int bn, int st) {
  return tile16_bytes(head_dim, bn) + uint32_t(st * bn * head_dim);
}

// The cp.async copy of one staging tile: thread tid's chunk (16 bytes) and rows.
KVB_HD constexpr int copy_chunks(int head_dim) { return head_dim / 16; }              // per row
KVB_HD constexpr int copy_row_step(int threads, int head_dim) { return threads / copy_chunks(head_dim); }
KVB_HD int copy_chunk(int tid, int head_dim) { return tid % copy_chunks(head_dim); }
KVB_HD int copy_row(int tid, int it, int threads, int head_dim) {
  return tid / copy_chunks(head_dim) + it * copy_row_step(threads, head_dim);
}
// Byte of the staging tile where (row, 16-byte chunk) lands, which is also the byte offset of the
// chunk in the key's cache row.
KVB_HD uint32_t copy_dst(int head_dim, int row, int chunk) { return uint32_t(row * head_dim + chunk * 16); }

// The conversion: item x of the tile (bn * D / 8 items, threads take x = tid + j threads).
KVB_HD int cvt_row(int x, int head_dim) { return x / (head_dim / 8); }
KVB_HD int cvt_chunk(int x, int head_dim) { return x % (head_dim / 8); }
KVB_HD uint32_t cvt_src(int head_dim, int row, int chunk) { return uint32_t(row * head_dim + chunk * 8); }
KVB_HD uint32_t cvt_dst(int head_dim, int row, int chunk) { return frag::swz(head_dim / 8, row, chunk); }

}  // namespace fp8s
}  // namespace tiles
}  // namespace kern
}  // namespace kvb
