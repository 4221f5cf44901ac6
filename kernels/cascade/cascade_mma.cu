// Shared-prefix ("cascade") attention on tensor cores: one kernel for the shared part of decode and of
// prefill / extend, and for the own part of prefill / extend (kernels/cascade/cascade_tiles.h has the work list).
//
// Why a dedicated kernel rather than the prefill kernel with gathered rows: the prefill kernel's tile is
// rows of one sequence at consecutive positions, read through one table, and its code is being changed
// for fp8 caches beside this work; a shared tile gathers rows of many members (each with its own q row,
// head and position) over keys read through the group's first table. Both are the same loop (S = Q K^T
// and O += P V with mma.sync m16n8k16 from swizzled shared memory, cp.async K / V double-buffered
// through the block table, online softmax in registers); only the row gather and the key range differ, so
// one kernel with per-row (query row, head, position) arrays in shared memory serves the shared tiles
// and the own tiles alike, and the plain kernels' code generation is untouched.
//
// CTA = 4 warps x 16 packed rows (64), BN keys per tile (64; 32 at D 256). The mask (causal, window +
// sinks, the end of the key range) is evaluated only on tiles some row does not fully attend (a shared
// tile of decode members never, unless a window cuts into the shared keys). Each CTA writes its rows'
// (max, sum, unnormalised acc) to the workspace; the callers merge them with the other parts.
#include <algorithm>
#include <climits>

#include "../common/cache.h"
#include "cascade.h"
#include "cascade_tiles.h"
#include "../common/paged.h"
#include "cascade_mma.cuh"
#include "../common/cuda.cuh"
#include "../common/mma.cuh"

namespace kvb {
namespace kern {
namespace cuda {

namespace {

constexpr int BM = ctiles::kTileRows;
constexpr int kThreads = 32 * ctiles::kWarps;
static_assert(BM == 16 * ctiles::kWarps, "one 16-row m-tile per warp");

// Query rows of sequence seq: [row0, row0 + q_len), clipped to [0, total_q) (a faulty query_start is
// reported by the own tiles / the plain checks; here it must only not read out of bounds).
struct Rows {
  int row0, q_len;
};
__device__ __forceinline__ Rows rows_of(const PrefillParams& b, int seq) {
  if (!b.query_start) return Rows{seq, 1};
  const int r0 = max(0, min(b.query_start[seq], b.total_q)), r1 = max(r0, min(b.query_start[seq + 1], b.total_q));
  return Rows{r0, r1 - r0};
}

// Per-CTA row description in shared memory (padding rows: q row -1, position -1).
struct RowInfo {
  int qrow[BM], head[BM], pos[BM], wsrow[BM];
};

// The shared tile x: fills ri for its rows; returns the group (-1: a surplus CTA) and sets rows / kb / ke.
__device__ int shared_rows(const CascadeMmaParams& p, int x, int kvh, RowInfo& ri, int* s_mrow, int* rows) {
  __shared__ int s_grows[kCascadeMaxGroups], s_tbase[kCascadeMaxGroups + 1], s_gs[kCascadeMaxGroups + 1];
  __shared__ ctiles::SharedTile s_tile;
  const PrefillParams& b = p.b;
  const int tid = threadIdx.x, G = b.group, n = p.num_members;
  // Packed rows per member, then the exclusive prefix in place by warp 0: each lane converts its own
  // run of consecutive entries (no entry is touched by two lanes), lane 31 writes the total.
  for (int k = tid; k < n; k += kThreads) s_mrow[k] = rows_of(b, p.members[k]).q_len * G;
  for (int g = tid; g <= p.num_groups; g += kThreads) s_gs[g] = p.group_start[g];
  __syncthreads();
  if (tid < 32) {
    const int per = (n + 31) / 32, k0 = min(n, tid * per), k1 = min(n, k0 + per);
    int sum = 0;
    for (int k = k0; k < k1; ++k) sum += s_mrow[k];
    int incl = sum;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, incl, o);
      if (tid >= o) incl += y;
    }
    int run = incl - sum;
    for (int k = k0; k < k1; ++k) {
      const int r = s_mrow[k];
      s_mrow[k] = run;
      run += r;
    }
    if (tid == 31) s_mrow[n] = incl;
  }
  __syncthreads();
  if (tid == 0) {
    ctiles::group_tiles(s_mrow, s_gs, p.num_groups, s_grows, s_tbase);
    s_tile = ctiles::shared_tile(s_tbase, s_grows, p.num_groups, x);
  }
  __syncthreads();
  const ctiles::SharedTile t = s_tile;
  if (t.group < 0) return -1;
  *rows = t.rows;
  if (tid < BM) {
    int qrow = -1, head = 0, pos = -1, wsrow = -1;
    if (tid < t.rows) {
      const ctiles::RowRef rr = ctiles::row_of(s_mrow, s_gs[t.group], s_gs[t.group + 1], G, t.row0 + tid);
      const int seq = p.members[rr.member];
      const Rows r = rows_of(b, seq);
      const int len = b.seq_lens[seq];
      qrow = r.row0 + rr.j;
      head = kvh * G + rr.h;
      wsrow = p.by_member ? rr.member : qrow;
      // A bad length (the own part reports it and writes NaN): the row attends nothing here.
      if (len >= r.q_len && len >= p.shared_tokens[t.group] && len <= (b.max_blocks << b.block_shift))
        pos = len - r.q_len + rr.j;
    }
    ri.qrow[tid] = qrow, ri.head[tid] = head, ri.pos[tid] = pos, ri.wsrow[tid] = wsrow;
  }
  return t.group;
}

template <typename T, int D, bool CAP>
__global__ void __launch_bounds__(kThreads, D == 256 ? 1 : 2) cascade_mma_kernel(const __grid_constant__ CascadeMmaParams p) {
  constexpr int BN = ctiles::key_tile(D);
  constexpr int C = D / 8, NT = BN / 8, DT = D / 8;
  static_assert(BN <= kThreads && BM <= kThreads, "one thread per key / row");
  static_assert(kThreads % C == 0 && BN % (kThreads / C) == 0, "a thread copies one chunk column");
  constexpr int64_t kZeroFill = 1;
  extern __shared__ __align__(16) unsigned char smem[];
  const uint32_t smem0 = uint32_t(__cvta_generic_to_shared(smem));
  const uint32_t sQ = (smem0 + 1023u) & ~1023u;  // [BM][D]
  const uint32_t sK = sQ + BM * D * 2;           // [2][BN][D]
  const uint32_t sV = sK + 2 * BN * D * 2;       // [2][BN][D]
  constexpr uint32_t kBuf = BN * D * 2;
  int64_t* s_off = reinterpret_cast<int64_t*>(smem + (sV + 2 * kBuf - smem0));  // [2][BN]
  int* s_mrow = reinterpret_cast<int*>(s_off + 2 * BN);                      // [num_members + 1]
  __shared__ RowInfo ri;
  __shared__ int s_bad, s_pmin, s_pmax, s_slot;

  const PrefillParams& b = p.b;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int x = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z, G = b.group;
  const bool shared = x < p.shared_tiles;
  if (tid == 0) s_bad = 0, s_pmin = INT_MAX, s_pmax = -1, s_slot = -1;
  __syncthreads();
  int rows = 0, part = 0, seq = -1, S = 0, fault_row = 0;
  const int32_t* table = nullptr;
  ctiles::KeyRange kr{0, 0};
  if (shared) {
    if (split >= p.shared_splits) return;
    const int g = shared_rows(p, x, kvh, ri, s_mrow, &rows);
    if (g < 0) return;  // uniform
    fault_row = p.group_lead[g];
    table = b.block_tables + int64_t(fault_row) * b.max_blocks;
    kr = ctiles::split_range(0, p.shared_tokens[g], split, p.shared_split_tokens);
    part = split;
  } else {
    // Own tile: the plain prefill's tiling of sequence seq's rows, over its keys after the shared prefix.
    const int t = x - p.shared_tiles;
    if (t >= p.own_tiles) return;
    seq = tiles::seq_of_tile(b.query_start, b.num_seqs, G, BM, t);
    const SeqView sv = seq_view(b, seq);
    const int64_t lt = tiles::local_tile(b.query_start, seq, G, BM, t, false);
    const int pr0 = lt >= 0 && lt * BM <= INT_MAX ? int(lt) * BM : -1;
    rows = min(BM, sv.q_len * G - pr0);
    // Before the return below, as the plain prefill does: a faulty sequence with no rows (q_len 0, or
    // clipped to 0) is still reported once.
    const bool first = pr0 == 0 && kvh == 0 && split == 0;
    if (sv.fault != KVB_FAULT_NONE && first && tid == 0)
      record_fault(b.fault, sv.fault, p.kernel, sv.fault_index, -1, sv.fault_value);
    if (pr0 < 0 || rows <= 0) return;  // uniform
    for (int k = tid; k < p.num_members; k += kThreads)
      if (p.members[k] == seq) s_slot = k;  // at most one (checked on the host)
    __syncthreads();
    const int slot = s_slot;
    int gi = -1;
    if (slot >= 0)
      for (int g = 0; g < p.num_groups; ++g)
        if (slot >= p.group_start[g] && slot < p.group_start[g + 1]) gi = g;
    S = gi >= 0 ? p.shared_tokens[gi] : 0;
    table = b.block_tables + int64_t(seq) * b.max_blocks;
    fault_row = seq;
    int fault = sv.fault;
    const bool short_len = fault == KVB_FAULT_NONE && S > sv.len;  // below its group's shared tokens
    if (short_len) fault = KVB_FAULT_SEQ_LEN;
    if (fault == KVB_FAULT_NONE && gi >= 0) {  // the shared columns must be the lead's (the shared tiles read those)
      const int32_t* lead = b.block_tables + int64_t(p.group_lead[gi]) * b.max_blocks;
      for (int c = tid; c < (S >> b.block_shift); c += kThreads)
        if (table[c] != lead[c]) {
          if (atomicExch(&s_bad, 1) == 0 && first)
            record_fault(b.fault, KVB_FAULT_BLOCK_ID, p.kernel, seq, c, table[c]);
        }
    }
    if (fault != KVB_FAULT_NONE) {
      if (tid == 0 && first && short_len) record_fault(b.fault, KVB_FAULT_SEQ_LEN, p.kernel, seq, -1, sv.len);
      if (tid == 0) atomicExch(&s_bad, 1);  // other threads may set it above, in the same barrier interval
    }
    const int base = sv.len - sv.q_len;
    if (tid < BM) {
      const int pr = pr0 + tid;
      const bool ok = tid < rows;
      ri.qrow[tid] = ok ? sv.row0 + pr / G : -1;
      ri.head[tid] = kvh * G + pr % G;
      ri.pos[tid] = ok && fault == KVB_FAULT_NONE ? base + pr / G : -1;
      ri.wsrow[tid] = ri.qrow[tid];
      // A sequence in no group has no shared parts: this CTA writes them empty (sum 0), once per split.
      if (ok && gi < 0 && split < p.shared_splits) {
        const int64_t w = ctiles::part_index(ri.qrow[tid], ri.head[tid], b.num_q_heads, p.parts, split);
        b.ws_m[w] = 0.f, b.ws_l[w] = 0.f;
      }
    }
    if (split >= p.own_splits) return;  // uniform: only the empty shared part was this CTA's
    kr = ctiles::split_range(S, fault == KVB_FAULT_NONE ? sv.len : S, split, p.own_split_tokens);
    part = p.shared_splits + split;
  }
  __syncthreads();  // ri, s_bad
  if (tid < BM && ri.pos[tid] >= 0) atomicMin(&s_pmin, ri.pos[tid]), atomicMax(&s_pmax, ri.pos[tid]);
  __syncthreads();
  const int pmin = s_pmin, pmax = s_pmax, W = b.window;
  const ctiles::Walk wk = ctiles::walk(kr.k0, kr.k1, BN, pmin, pmax, W, b.sink);
  const int n_tiles = wk.count();
  const int64_t head_off = b.kv.head(kvh);
  const int kmask = (1 << b.block_shift) - 1;

  // Byte offset of key tid of walk tile i (odd: zero-fill). A bad block id under a key some row attends
  // poisons the tile's rows (what the plain kernels report as a fault).
  auto key_offset = [&](int i) -> int64_t {
    if (i >= n_tiles || tid >= BN) return kZeroFill;
    const int k = wk.first_key(i) + tid;
    if (k >= kr.k1) return kZeroFill;
    const int id = __ldg(table + (k >> b.block_shift));
    if (id >= 0 && id < b.num_blocks)
      return (b.kv.row(id, k, kmask) + head_off) * int64_t(sizeof(T));
    bool attended = false;
    for (int r = 0; r < BM; ++r) attended |= ri.pos[r] >= 0 && tiles::attends(k, ri.pos[r], W, b.sink);
    if (attended && atomicExch(&s_bad, 1) == 0 && kvh == 0)
      record_fault(b.fault, KVB_FAULT_BLOCK_ID, p.kernel, fault_row, k >> b.block_shift, id);
    return kZeroFill;
  };
  if (tid < BN) {
    s_off[tiles::kv_stage(0) * BN + tid] = key_offset(0);
    s_off[tiles::kv_stage(1) * BN + tid] = key_offset(1);
  }
  // Q rows gathered from the members: consecutive threads take consecutive 16-byte chunks of a row.
  for (int i = tid; i < BM * C; i += kThreads) {
    const int r = i / C, c = i - r * C;
    const int qrow = ri.qrow[r];
    const T* src = reinterpret_cast<const T*>(b.q);
    if (qrow >= 0) src += int64_t(qrow) * b.q_row_stride + int64_t(ri.head[r]) * b.q_head_stride + c * 8;
    cp_async16(sQ + tiles::frag::swz(C, r, c), src, qrow >= 0 ? 16 : 0);
  }
  __syncthreads();  // s_off of tiles 0 and 1
  constexpr int kRowStep = kThreads / C;
  const int cp_row = tid / C, cp_chunk = tid % C;
  auto load_kv = [&](int i) {
    const int st = tiles::kv_stage(i);
#pragma unroll
    for (int it = 0; it < BN / kRowStep; ++it) {
      const int row = cp_row + it * kRowStep;
      const int64_t off = s_off[st * BN + row];
      const int64_t src = (off & ~int64_t(1)) + cp_chunk * 16;
      const uint32_t dst = st * kBuf + tiles::frag::swz(C, row, cp_chunk);
      cp_async16_zfill(sK + dst, b.k + src, (off & 1) != 0);
      cp_async16_zfill(sV + dst, b.v + src, (off & 1) != 0);
    }
  };
  if (n_tiles > 0) load_kv(0);
  cp_async_commit();

  float o[DT][4];
#pragma unroll
  for (int d = 0; d < DT; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f, u0 = 0.f, u1 = 0.f;  // rows g, g + 8 of the warp
  const float qs = b.q_scale;
  const uint32_t q_lane = sQ + tiles::frag::q_base(C, warp, lane);
  const uint32_t k_lane = tiles::frag::k_base(C, lane), v_lane = tiles::frag::v_base(C, lane);
  const int r_lo = warp * 16 + tiles::frag::c_row(lane, 0), r_hi = r_lo + 8;

  for (int i = 0; i < n_tiles; ++i) {
    const uint32_t bK = sK + tiles::kv_stage(i) * kBuf, bV = sV + tiles::kv_stage(i) * kBuf;
    cp_async_wait<0>();
    __syncthreads();  // tile i (and Q) landed; every warp is done with tile i - 1's stage
    if (i + 1 < n_tiles) load_kv(i + 1);
    cp_async_commit();

    float s[NT][4];
#pragma unroll
    for (int n = 0; n < NT; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[4];
      ldsm_x4(a, tiles::frag::q_addr(q_lane, kk));
#pragma unroll
      for (int n2 = 0; n2 < NT / 2; ++n2) {
        uint32_t bb[4];
        ldsm_x4(bb, tiles::frag::k_addr(C, bK + k_lane, n2, kk));
        mma_x2<T>(s[2 * n2], s[2 * n2 + 1], a, bb);
      }
    }
    if constexpr (CAP) {  // raw units: cap / scale * tanh(x * scale / cap)
      const float cap_in = b.scale / b.soft_cap, cap_out = b.soft_cap / b.scale;
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[n][e] = cap_out * tanhf(s[n][e] * cap_in);
    }
    if (!wk.full(i)) {
      const int k0 = wk.first_key(i);
      const int plo = ri.pos[r_lo], phi = ri.pos[r_hi];
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int k = k0 + n * 8 + tiles::frag::c_col(lane, e), pos = e < 2 ? plo : phi;
          if (k >= kr.k1 || pos < 0 || !tiles::attends(k, pos, W, b.sink)) s[n][e] = -INFINITY;
        }
    }
    // Online softmax: the row max over the 4 threads of a row, the rescale, P = 2^(qs x - u).
    float mx0 = m0, mx1 = m1;
#pragma unroll
    for (int n = 0; n < NT; ++n) mx0 = fmaxf(mx0, fmaxf(s[n][0], s[n][1])), mx1 = fmaxf(mx1, fmaxf(s[n][2], s[n][3]));
#pragma unroll
    for (int o2 = 1; o2 <= 2; o2 <<= 1) {
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o2));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o2));
    }
    if (mx0 > m0 || mx1 > m1) {
      const float nu0 = mx0 == -INFINITY ? 0.f : __fmul_rn(mx0, qs), nu1 = mx1 == -INFINITY ? 0.f : __fmul_rn(mx1, qs);
      const float al0 = mx0 > m0 ? ex2(__fmul_rn(m0, qs) - nu0) : 1.f, al1 = mx1 > m1 ? ex2(__fmul_rn(m1, qs) - nu1) : 1.f;
      m0 = mx0, m1 = mx1, u0 = nu0, u1 = nu1;
      l0 *= al0, l1 *= al1;
#pragma unroll
      for (int d = 0; d < DT; ++d) o[d][0] *= al0, o[d][1] *= al0, o[d][2] *= al1, o[d][3] *= al1;
    }
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      s[n][0] = ex2(fmaf(s[n][0], qs, -u0)), s[n][1] = ex2(fmaf(s[n][1], qs, -u0));
      s[n][2] = ex2(fmaf(s[n][2], qs, -u1)), s[n][3] = ex2(fmaf(s[n][3], qs, -u1));
      l0 += s[n][0] + s[n][1], l1 += s[n][2] + s[n][3];
    }
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      uint32_t a[4];
      a[0] = Mma<T>::pack(s[2 * kk][0], s[2 * kk][1]);
      a[1] = Mma<T>::pack(s[2 * kk][2], s[2 * kk][3]);
      a[2] = Mma<T>::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      a[3] = Mma<T>::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int d2 = 0; d2 < DT / 2; ++d2) {
        uint32_t bb[4];
        ldsm_x4_trans(bb, tiles::frag::v_addr(C, bV + v_lane, kk, d2));
        mma_x2<T>(o[2 * d2], o[2 * d2 + 1], a, bb);
      }
    }
    // Stage i & 1 of s_off was last read by load_kv(i), before this iteration's barrier.
    const int64_t next = key_offset(i + 2);
    if (tid < BN && i + 2 < n_tiles) s_off[tiles::kv_stage(i + 2) * BN + tid] = next;
  }
  cp_async_wait<0>();
  __syncthreads();  // s_bad final
  const bool bad = s_bad != 0;
#pragma unroll
  for (int o2 = 1; o2 <= 2; o2 <<= 1) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, o2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, o2);
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = half ? r_hi : r_lo;
    if (r >= rows || ri.wsrow[r] < 0) continue;
    const int64_t w = ctiles::part_index(ri.wsrow[r], ri.head[r], b.num_q_heads, p.parts, part);
    float* op = b.ws_o + w * D;
#pragma unroll
    for (int d = 0; d < DT; ++d) {  // scalar: ws_o is only 4-byte aligned for an odd part count
      op[d * 8 + tiles::frag::c_col(lane, 0)] = o[d][2 * half];
      op[d * 8 + tiles::frag::c_col(lane, 1)] = o[d][2 * half + 1];
    }
    if ((lane & 3) == 0) {
      b.ws_m[w] = half ? u1 : u0;
      b.ws_l[w] = bad ? __int_as_float(0x7fffffff) : (half ? l1 : l0);
    }
  }
}

template <typename T, int D>
size_t smem_bytes(int num_members) {
  constexpr int BN = ctiles::key_tile(D);
  return 1024 + size_t(BM) * D * 2 + 4 * size_t(BN) * D * 2 + 2 * BN * sizeof(int64_t) +
         (size_t(num_members) + 1) * sizeof(int);
}

using Kernel = void (*)(const CascadeMmaParams);

template <typename T, int D>
Kernel kernel_for(bool cap) {
  return cap ? cascade_mma_kernel<T, D, true> : cascade_mma_kernel<T, D, false>;
}

// *smem: what this launch needs (its description's members); *smem_max: the kernel's attribute, sized
// for kCascadeMaxMembers so that it is the same value on every call (see launch_cascade_mma).
template <typename T>
bool kernel_for_type(int D, bool cap, int members, Kernel* k, size_t* smem, size_t* smem_max) {
  switch (D) {
    case 64:
      *k = kernel_for<T, 64>(cap), *smem = smem_bytes<T, 64>(members);
      *smem_max = smem_bytes<T, 64>(kCascadeMaxMembers);
      return true;
    case 128:
      *k = kernel_for<T, 128>(cap), *smem = smem_bytes<T, 128>(members);
      *smem_max = smem_bytes<T, 128>(kCascadeMaxMembers);
      return true;
    case 256:
      *k = kernel_for<T, 256>(cap), *smem = smem_bytes<T, 256>(members);
      *smem_max = smem_bytes<T, 256>(kCascadeMaxMembers);
      return true;
    default: return false;
  }
}

}  // namespace

bool cascade_mma_supported(const Cache& c) {
  return (c.dtype == Dtype::f16 || c.dtype == Dtype::bf16) &&
         (c.head_dim == 64 || c.head_dim == 128 || c.head_dim == 256);
}

void cascade_mma_describe(CascadeMmaParams& p, const kvb_prefix_groups& g, int64_t block_size) {
  p.num_groups = int(g.num_groups);
  p.num_members = g.group_start[g.num_groups];
  for (uint32_t gi = 0; gi <= g.num_groups; ++gi) p.group_start[gi] = int16_t(g.group_start[gi]);
  for (uint32_t gi = 0; gi < g.num_groups; ++gi) {
    p.shared_tokens[gi] = int32_t(int64_t(g.shared_blocks[gi]) * block_size);
    p.group_lead[gi] = int16_t(g.members[g.group_start[gi]]);
  }
  for (int k = 0; k < p.num_members; ++k) p.members[k] = int16_t(g.members[k]);
}

void cascade_mma_splits(int64_t ctas, int64_t max_tokens, int64_t head_dim, int64_t max_splits, int* splits,
                        int* split_tokens) {
  constexpr int64_t kTargetCtas = 264, kMinSplitTokens = 512;
  const int64_t bn = ctiles::key_tile(int(head_dim));
  // Rounded, not ceiled: 128 CTAs per split (256 members x 4 heads, 8 kv heads) take 2 splits, one wave
  // of 256 at two CTAs per SM, rather than 3 (384: a wave and a half-empty one).
  int64_t ns = std::max<int64_t>(1, (kTargetCtas + ctas / 2) / std::max<int64_t>(1, ctas));
  ns = std::min(ns, std::max<int64_t>(1, max_tokens / kMinSplitTokens));
  ns = std::min(ns, max_splits);
  const int64_t st = (max_tokens + ns - 1) / ns;
  *splits = int(ns);
  *split_tokens = int(std::max(bn, (st + bn - 1) / bn * bn));
}

bool launch_cascade_mma(const CascadeMmaParams& p, const Cache& c, bool cap, cudaStream_t stream) {
  Kernel k = nullptr;
  size_t smem = 0, smem_max = 0;
  const bool ok = c.dtype == Dtype::f16
                      ? kernel_for_type<__half>(int(c.head_dim), cap, p.num_members, &k, &smem, &smem_max)
                      : kernel_for_type<__nv_bfloat16>(int(c.head_dim), cap, p.num_members, &k, &smem, &smem_max);
  if (!ok) return false;
  {
    // The attribute is the kernel's, shared by every host thread: set to this call's size, another
    // thread's smaller call could lower it between this set and this launch, which then fails
    // (cudaErrorInvalidValue, thrown by launch()) instead of falling back. So it is one value per
    // device for every call: the largest description's size, or less where the device's opt-in limit
    // is lower (sm_86 / 89: 99 KiB, below D 256 with 512 members); a call needing more than that runs
    // the plain kernel. The launch asks only for what it uses.
    RelaxedCapture relaxed;  // not stream operations; legal while the caller captures a graph
    int optin = 0;
    cudaFuncAttributes fa{};
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, c.device_index) != cudaSuccess ||
        cudaFuncGetAttributes(&fa, reinterpret_cast<const void*>(k)) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    const size_t room = size_t(optin) > fa.sharedSizeBytes ? size_t(optin) - fa.sharedSizeBytes : 0;
    const size_t attr = std::min(smem_max, room);
    if (smem > attr) return false;
    if (cudaFuncSetAttribute(reinterpret_cast<const void*>(k), cudaFuncAttributeMaxDynamicSharedMemorySize,
                             int(attr)) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
  }
  const unsigned z = unsigned(std::max(p.shared_splits, p.own_splits));
  CascadeMmaParams args = p;
  launch(k, dim3(unsigned(p.shared_tiles + p.own_tiles), unsigned(c.num_kv_heads), z), dim3(kThreads), smem, stream,
         "cascade_mma", args);
  return true;
}

}  // namespace cuda
}  // namespace kern
}  // namespace kvb
