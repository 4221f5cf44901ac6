// CUDA paged prefill / extend attention for Hopper (sm_90a): warpgroup MMAs fed from shared memory, a
// producer warpgroup filling a ring of K / V stages, two consumer warpgroups. The design follows
// FlashAttention-3's (warp-specialised producer / consumers on mbarriers, wgmma with P from registers,
// the softmax of one key tile overlapped with the next tile's S = Q K^T); written for this library's
// paged cache and contract. Built only for sm_90a (Makefile), selected by hopper_prefill_selected.
//
// CTA = one 128-row query tile of one sequence and one kv head (the portable kernel's grid, so
// plan_prefill and the CTA order are shared): warpgroup 0 produces, warpgroups 1 and 2 compute 64 packed
// rows each. Q is loaded once by all threads. Key tiles of kKeys tokens (the sinks, then the window up
// to the tile's last position, prefill_tiles.h) are gathered through the block table by the producer:
// thread t reads key t's block id, the offsets go through shared memory, then every thread copies one
// 16-byte column of every eighth key row of K and V with cp.async into stage i % kStages, in the
// 128-byte-swizzled layout wgmma reads (prefill_hopper_tiles.h). It signals tile i's full barrier after
// issuing tile i + 1 (two tiles of copies in flight) and waits on the stage's empty barrier before
// refilling it. A consumer warpgroup, per tile: issues S(i+1) = Q K(i+1)^T (8 wgmma m64n64k16, both
// operands from shared memory) and O += P(i) V(i) (4 wgmma m64n128k16, P from registers, V read
// N-major), then runs the soft cap, mask and online softmax of S(i+1) while P V runs, waits, releases
// stage i, rescales O and repacks P. Keys past the sequence or behind a bad block id are zero-filled and
// masked; a bad attended block id makes the tile's rows NaN and records a fault, as the portable kernel
// does. The output is staged in the warpgroup's own Q rows and leaves in 16-byte stores.
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "../decode/decode.h"
#include "../common/cache.h"
#include "../decode/decode_tiles.h"
#include "prefill.h"
#include "prefill_hopper_tiles.h"
#include "../decode/decode.cuh"
#include "../common/mma.cuh"
#include "prefill.cuh"
#include "prefill_hopper.cuh"
#include "../common/wgmma.cuh"

namespace kvb {
namespace kern {
namespace cuda {

namespace {

namespace hp = hopper;
using namespace sm90;

// setmaxnreg: the producer needs few registers, the consumers hold O (64), S (32) and P (16) per thread.
// The split moves registers inside the CTA's allocation (kThreads x the registers the kernel was compiled
// with): the consumers' increase waits for registers the producer's decrease frees, so a kernel compiled
// with fewer than kSplitRegs / kThreads (168, the most __launch_bounds__(384, 1) allows) would hang at its
// first launch. hopper_prefill_selected checks the compiled count and falls back to the portable kernel.
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
constexpr int kSplitRegs = hp::kWgThreads * kProducerRegs + hp::kConsumerThreads * kConsumerRegs;
static_assert(kSplitRegs <= hp::kThreads * (65536 / hp::kThreads / 8 * 8), "the split exceeds what the CTA can hold");
static_assert(hp::kKeys <= hp::kWgThreads && hp::kRows <= hp::kThreads, "one producer thread per key, one thread per row");

template <typename T>
__global__ void __launch_bounds__(hp::kThreads, 1) prefill_hopper_kernel(const PrefillParams p) {
  constexpr int BM = hp::kRows, BN = hp::kKeys;
  constexpr int64_t kZeroFill = 1;  // an odd row offset: zero-fill this key (valid offsets are multiples of 16)
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ int s_pos[BM];  // position of each packed row (padding rows copy the last)
  __shared__ int s_bad;      // an attended key's block id was out of range: this tile's rows are NaN
  const uint32_t smem0 = uint32_t(__cvta_generic_to_shared(smem));
  const uint32_t base = (smem0 + 1023u) & ~1023u;  // the swizzle is on address bits: 1 KiB-aligned tiles
  int64_t* s_off = reinterpret_cast<int64_t*>(smem + (base - smem0) + hp::kOffBytes);
  const uint32_t full0 = base + hp::kFullBar, empty0 = base + hp::kEmptyBar;

  const int tid = threadIdx.x;
  const tiles::CtaTile ct = tiles::cta_tile(int(blockIdx.x), p.num_q_heads / p.group);
  const int kvh = ct.kv_head, G = p.group;
  const int seq = tiles::seq_of_tile(p.query_start, p.num_seqs, G, BM, ct.tile);
  const SeqView sv = seq_view(p, seq);
  if (dtiles::decode_path_owns(seq, p.num_seqs, p.query_start[seq], p.query_start[seq + 1], p.total_q, p.seq_lens[seq],
                               p.max_blocks << p.block_shift, G))
    return;  // a short query: launch_short_queries computes its rows
  const int64_t lt = tiles::local_tile(p.query_start, seq, G, BM, ct.tile, sv.fault == KVB_FAULT_NONE);
  const int pr0 = lt >= 0 && lt * BM <= INT_MAX ? int(lt) * BM : -1;
  const int rows = min(BM, sv.q_len * G - pr0);
  if (sv.fault != KVB_FAULT_NONE && pr0 == 0 && kvh == 0 && tid == 0)
    record_fault(p.fault, sv.fault, KVB_KERNEL_PREFILL_ATTENTION, sv.fault_index, -1, sv.fault_value);
  if (pr0 < 0 || rows <= 0) return;  // a surplus tile (uniform over the CTA)

  const int pos_base = sv.len - sv.q_len;
  const int pos_first = pos_base + pr0 / G, pos_last = pos_base + (pr0 + rows - 1) / G;
  const tiles::KeyTiles kt = tiles::key_tiles(pos_first, pos_last, p.window, p.sink, BN, 0,
                                              tiles::ceil_div(max(p.split_tokens, 1), BN));
  const int n_tiles = sv.fault == KVB_FAULT_NONE ? kt.count() : 0;

  if (tid == 0) {
    s_bad = 0;
    for (int st = 0; st < hp::kStages; ++st) {
      mbar_init(full0 + 8 * st, hp::kWgThreads);        // every producer thread, once its copies landed
      mbar_init(empty0 + 8 * st, hp::kConsumerThreads);  // every consumer thread, once its P V read the stage
    }
  }
  if (tid < BM) s_pos[tid] = pos_base + (pr0 + min(tid, rows - 1)) / G;
  // Q: packed row r -> (token (pr0 + r) / G, head kvh G + (pr0 + r) % G); rows past the tile are zeros.
  for (int x = tid; x < BM * hp::kChunks; x += hp::kThreads) {
    const int r = x / hp::kChunks, c = x % hp::kChunks, pr = pr0 + r;
    const bool ok = sv.fault == KVB_FAULT_NONE && r < rows;
    const T* src = reinterpret_cast<const T*>(p.q);
    if (ok) src += int64_t(sv.row0 + pr / G) * p.q_row_stride + int64_t(kvh * G + pr % G) * p.q_head_stride + c * 8;
    cp_async16(base + hp::tile_offset(BM, r, c), src, ok ? 16 : 0);
  }
  cp_async_commit();
  cp_async_wait<0>();
  fence_proxy_async();  // Q, written through cp.async, is read by wgmma
  __syncthreads();      // Q, s_pos, s_bad and the barriers' initialisation visible to every warpgroup

  const int wg = tid / hp::kWgThreads, t = tid % hp::kWgThreads;
  if (wg == 0) {
    // ---- Producer: K / V tiles into the ring ----
    regs_dec<kProducerRegs>();
    const int32_t* table = p.block_tables + int64_t(seq) * p.max_blocks;
    const int64_t head_off = p.kv.head(kvh);
    const int kmask = (1 << p.block_shift) - 1;
    const int cp_chunk = hp::copy_chunk(t);
    for (int i = 0; i < n_tiles; ++i) {
      const hp::KvSlot sl = hp::kv_slot(i);
      int64_t off = kZeroFill;
      if (t < BN) {
        const int tok = kt.tile(i) * BN + t;
        if (tok < sv.len) {
          const int id = __ldg(table + (tok >> p.block_shift));
          if (id >= 0 && id < p.num_blocks)
            off = (p.kv.row(id, tok, kmask) + head_off) * int64_t(sizeof(T));
          // Only a token some row attends needs a valid block (what the CPU checks); a window may have
          // released the others (-1): zero-filled, masked.
          else if (tok <= pos_last && (tok < kt.sink || tok >= kt.lo_first) && atomicExch(&s_bad, 1) == 0 && kvh == 0)
            record_fault(p.fault, KVB_FAULT_BLOCK_ID, KVB_KERNEL_PREFILL_ATTENTION, seq, tok >> p.block_shift, id);
        }
      }
      mbar_wait(empty0 + 8 * sl.stage, hp::producer_parity(i));  // both consumers done with tile i - kStages
      if (t < BN) s_off[sl.stage * BN + t] = off;
      named_barrier(1, hp::kWgThreads);  // offsets visible; s_off[stage] of tile i - kStages long read
      const uint32_t dk = base + hp::smem_k(sl.stage), dv = base + hp::smem_v(sl.stage);
#pragma unroll
      for (int j = 0; j < BN / hp::kCopyRowStep; ++j) {
        const int64_t o = s_off[sl.stage * BN + hp::copy_row(t, j)];
        const int64_t src = (o & ~int64_t(1)) + cp_chunk * 16;
        const int bytes = (o & 1) ? 0 : 16;
        cp_async16(dk + hp::copy_dst(t, j), p.k + src, bytes);
        cp_async16(dv + hp::copy_dst(t, j), p.v + src, bytes);
      }
      cp_async_commit();
      if (i > 0) {  // tile i - 1 has landed: publish it
        cp_async_wait<1>();
        fence_proxy_async();
        mbar_arrive(full0 + 8 * hp::kv_slot(i - 1).stage);
      }
    }
    if (n_tiles > 0) {
      cp_async_wait<0>();
      fence_proxy_async();
      mbar_arrive(full0 + 8 * hp::kv_slot(n_tiles - 1).stage);
    }
    return;
  }

  // ---- Consumers: 64 packed rows each ----
  regs_inc<kConsumerRegs>();
  const int cw = wg - 1;
  const uint32_t sQ = base;
  // This thread's two rows (accumulators i with i & 2 clear: r0, set: r0 + 8) and their positions.
  const int r0 = cw * hp::kWgRows + hp::acc_row(t, 0);
  const int pos0 = s_pos[r0], pos1 = s_pos[r0 + 8];
  const float qs = p.q_scale;
  float o[hp::kHeadDim / 2], s[BN / 2];
  uint32_t pa[BN / 16][4];
#pragma unroll
  for (int i = 0; i < hp::kHeadDim / 2; ++i) o[i] = 0.f;
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) s[i] = 0.f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;

  auto issue_s = [&](int i) {
    const hp::KvSlot sl = hp::kv_slot(i);
    mbar_wait(full0 + 8 * sl.stage, hp::consumer_parity(i));
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < hp::kHeadDim / 16; ++kk)
      Wgmma<T>::ss_n64(s, hp::q_desc(sQ, cw, kk), hp::k_desc(base + hp::smem_k(sl.stage), kk), kk > 0);
    wgmma_commit();
  };
  auto issue_pv = [&](int i) {
    const uint32_t sv_base = base + hp::smem_v(hp::kv_slot(i).stage);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) Wgmma<T>::rs_n128(o, pa[kk], hp::v_desc(sv_base, kk));
    wgmma_commit();
  };
  // Soft cap, mask and online softmax of S (tile i) in place: S becomes P = 2^(qs x - qs m) in fp32,
  // l the running sums (this thread's columns), al0 / al1 the factors O must be rescaled by.
  auto softmax = [&](int i, float& al0, float& al1) {
    if (p.soft_cap > 0.f) {
      const float cap_in = p.scale / p.soft_cap, cap_out = p.soft_cap / p.scale;
#pragma unroll
      for (int e = 0; e < BN / 2; ++e) s[e] = cap_out * tanhf(s[e] * cap_in);
    }
    if (!kt.full(kt.tile(i))) {
      const int k0 = kt.tile(i) * BN;
#pragma unroll
      for (int e = 0; e < BN / 2; ++e)
        if (!tiles::attends(k0 + hp::acc_col(t, e), (e & 2) ? pos1 : pos0, p.window, kt.sink)) s[e] = -INFINITY;
    }
    float mx0 = m0, mx1 = m1;
#pragma unroll
    for (int e = 0; e < BN / 2; ++e) {
      if (e & 2) mx1 = fmaxf(mx1, s[e]);
      else mx0 = fmaxf(mx0, s[e]);
    }
#pragma unroll
    for (int x = 1; x <= 2; x <<= 1) {
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, x));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, x));
    }
    // u = qs m, 0 while the row has seen only masked keys (no -inf - -inf in the exponents).
    const float u0 = mx0 == -INFINITY ? 0.f : mx0 * qs, u1 = mx1 == -INFINITY ? 0.f : mx1 * qs;
    al0 = m0 == -INFINITY ? 0.f : ex2(m0 * qs - u0);
    al1 = m1 == -INFINITY ? 0.f : ex2(m1 * qs - u1);
    m0 = mx0, m1 = mx1;
    float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
    for (int e = 0; e < BN / 2; ++e) {
      s[e] = ex2(fmaf(s[e], qs, (e & 2) ? -u1 : -u0));
      if (e & 2) sum1 += s[e];
      else sum0 += s[e];
    }
    l0 = l0 * al0 + sum0, l1 = l1 * al1 + sum1;
  };
  auto pack_p = [&]() {
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
      for (int j = 0; j < 4; ++j) pa[kk][j] = Mma<T>::pack(s[hp::p_acc(kk, j)], s[hp::p_acc(kk, j) + 1]);
  };

  if (n_tiles > 0) {
    issue_s(0);
    wgmma_wait<0>();
    reg_fence(s);
    float a0, a1;  // O is still zero
    softmax(0, a0, a1);
    pack_p();
  }
  // Every tile but the last: S of the next tile and the softmax overlap P V of this one. (Written
  // without a per-iteration branch around the waits: ptxas then proves which group each wait retires
  // instead of serialising every wgmma.)
  for (int i = 0; i + 1 < n_tiles; ++i) {
    issue_s(i + 1);
    issue_pv(i);
    float a0, a1;
    wgmma_wait<1>();  // S(i + 1) done (the older group); P(i) V(i) may still run
    reg_fence(s);
    softmax(i + 1, a0, a1);
    wgmma_wait<0>();
    reg_fence(o);
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) reg_fence(pa[kk]);
    mbar_arrive(empty0 + 8 * hp::kv_slot(i).stage);  // this thread is done with tile i's K and V
#pragma unroll
    for (int e = 0; e < hp::kHeadDim / 2; ++e) o[e] *= (e & 2) ? a1 : a0;
    pack_p();
  }
  if (n_tiles > 0) {
    issue_pv(n_tiles - 1);
    wgmma_wait<0>();
    reg_fence(o);
    mbar_arrive(empty0 + 8 * hp::kv_slot(n_tiles - 1).stage);
  }

#pragma unroll
  for (int x = 1; x <= 2; x <<= 1) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, x);
    l1 += __shfl_xor_sync(0xffffffffu, l1, x);
  }
  const bool bad = sv.fault != KVB_FAULT_NONE || *static_cast<volatile int*>(&s_bad) != 0;
  const float inv0 = bad ? nan_f() : (l0 > 0.f ? 1.f / l0 : 0.f), inv1 = bad ? nan_f() : (l1 > 0.f ? 1.f / l1 : 0.f);
  // Normalised rows into this warpgroup's own Q rows (no other warpgroup reads them, and its own wgmma
  // reads have completed), then out in 16-byte stores.
#pragma unroll
  for (int e = 0; e < hp::kHeadDim / 2; e += 2) {
    const float inv = (e & 2) ? inv1 : inv0;
    const uint32_t v = Mma<T>::pack(o[e] * inv, o[e + 1] * inv);
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sQ + hp::out_stage(cw, t, e)), "r"(v));
  }
  named_barrier(2 + cw, hp::kWgThreads);
#pragma unroll 2
  for (int x = t; x < hp::kWgRows * hp::kChunks; x += hp::kWgThreads) {
    const int r = cw * hp::kWgRows + x / hp::kChunks, c = x % hp::kChunks;
    if (r >= rows) break;  // x grows with r
    store_out_chunk<T>(p, sv.row0, pr0 + r, kvh, G, c, sQ + hp::tile_offset(BM, r, c));
  }
}

// One note per process on stderr, the first time the switch is read with a call it could take.
void note_once(const char* what) {
  static std::once_flag once;
  std::call_once(once, [what] { fprintf(stderr, "kvblock: KVB_CUDA_PREFILL=hopper: %s\n", what); });
}

}  // namespace

bool hopper_prefill_selected(const Cache& c, const Prefill& a) {
  static const bool wanted = [] {
    const char* e = getenv("KVB_CUDA_PREFILL");
    return e != nullptr && strcmp(e, "hopper") == 0;
  }();
  if (!wanted || a.tree_mask) return false;  // tree masks: the portable kernel
  const bool sixteen = c.dtype == Dtype::f16 || c.dtype == Dtype::bf16;
  if (!hp::takes(int(c.head_dim), sixteen, a.q_dtype == c.dtype, int(a.plan.num_splits))) return false;
  int major = 0, minor = 0, optin = 0;
  {
    RelaxedCapture relaxed;  // not stream operations; legal while the caller captures a graph
    check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, c.device_index), "prefill attention: device");
    check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, c.device_index), "prefill attention: device");
    check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, c.device_index),
          "prefill attention: device");
  }
  if (major != 9 || minor != 0 || optin < int(hp::kSmemBytes) + 1024) {
    note_once("the device is not sm_90 (the kernel is sm_90a code): the portable kernel runs");
    return false;
  }
  cudaFuncAttributes fa{};
  {
    RelaxedCapture relaxed;
    check(cudaFuncGetAttributes(&fa, c.dtype == Dtype::f16 ? prefill_hopper_kernel<__half>
                                                          : prefill_hopper_kernel<__nv_bfloat16>),
          "prefill attention (sm_90a): kernel attributes");
  }
  if (fa.numRegs * hp::kThreads < kSplitRegs) {
    note_once("the kernel was compiled with fewer registers per thread than its setmaxnreg split needs (168): "
              "the portable kernel runs");
    return false;
  }
  note_once("the sm_90a kernel runs head dim 128 fp16 / bf16 calls with one key split");
  return true;
}

void launch_prefill_hopper(const PrefillParams& p, Dtype dtype, dim3 grid, cudaStream_t s) {
  void (*kernel)(PrefillParams) =
      dtype == Dtype::f16 ? prefill_hopper_kernel<__half> : prefill_hopper_kernel<__nv_bfloat16>;
  {
    RelaxedCapture relaxed;
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(hp::kSmemBytes)),
          "prefill attention (sm_90a): shared memory size");
  }
  kernel<<<grid, hp::kThreads, hp::kSmemBytes, s>>>(p);
  check(cudaGetLastError(), "prefill attention (sm_90a) launch");
  launch_short_queries(p, dtype, hp::kHeadDim, s);
}

}  // namespace cuda
}  // namespace kern
}  // namespace kvb
