// CUDA prefill / extend attention for fp32 caches, on CUDA cores: one warp per (query row, query head);
// each lane holds head_dim/32 contiguous dimensions of q and of the output, keys are taken one at a
// time (dot product by warp shuffles, online softmax in base 2). Simple rather than fast: fp32 caches
// are for testing and small models; fp16 / bf16 use the tensor-core kernel in prefill.cu.
#include "prefill_common.cuh"

namespace kvb {
namespace kern {
namespace cuda {

namespace {

constexpr int kWarps = 4;
constexpr float kLog2e = 1.4426950408889634f;

template <int D>
__global__ void __launch_bounds__(32 * kWarps) prefill_fp32_kernel(const PrefillParams p) {
  constexpr int E = D / 32;
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x, h = blockIdx.y * kWarps + (threadIdx.x >> 5);
  // CTA x < num_seqs also checks sequence x once: a faulty sequence may own no row at all.
  if (row < p.num_seqs && blockIdx.y == 0 && threadIdx.x == 0) {
    const SeqView f = seq_view(p, row);
    if (f.fault != KVB_FAULT_NONE)
      record_fault(p.fault, f.fault, KVB_KERNEL_PREFILL_ATTENTION, f.fault_index, -1, f.fault_value);
  }
  if (row >= p.total_q || h >= p.num_q_heads) return;
  const SeqView sv = seq_view(p, seq_of_row(p, row));
  float acc[E], q[E];
#pragma unroll
  for (int e = 0; e < E; ++e) acc[e] = 0.f;
  float m = -INFINITY, l = 0.f;
  bool bad = sv.fault != KVB_FAULT_NONE;
  if (!bad && row >= sv.row0 && row < sv.row0 + sv.q_len) {
    const int pos = sv.len - sv.q_len + (row - sv.row0);
    const float* qp = reinterpret_cast<const float*>(p.q) + int64_t(row) * p.q_token_stride + int64_t(h) * p.q_head_stride;
#pragma unroll
    for (int e = 0; e < E; ++e) q[e] = qp[lane * E + e];
    const int kvh = h / p.group;
    const int lo = p.window > 0 ? max(0, pos - p.window + 1) : 0;
    const int sink = p.window > 0 ? min(p.sink, lo) : 0;
    const int32_t* table = p.block_tables + int64_t(sv.seq) * p.max_blocks;
    const int mask = (1 << p.block_shift) - 1;
    // The sinks [0, sink), then the window [lo, pos].
    for (int t = sink > 0 ? 0 : lo; t <= pos; t = (t + 1 == sink) ? lo : t + 1) {
      const int blk = table[t >> p.block_shift];
      if (blk < 0 || blk >= p.num_blocks) {  // an attended token must have a valid block (the CPU's check)
        if (lane == 0 && h % p.group == 0)    // counted once per (row, kv head)
          record_fault(p.fault, KVB_FAULT_BLOCK_ID, KVB_KERNEL_PREFILL_ATTENTION, sv.seq, t >> p.block_shift, blk);
        bad = true;
        break;
      }
      const int64_t off = int64_t(blk) * p.block_stride + int64_t(t & mask) * p.token_stride +
                          int64_t(kvh) * p.head_stride + lane * E;
      const float* kp = reinterpret_cast<const float*>(p.k) + off;
      const float* vp = reinterpret_cast<const float*>(p.v) + off;
      float s = 0.f;
#pragma unroll
      for (int e = 0; e < E; ++e) s = fmaf(q[e], __ldg(kp + e), s);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      s = p.soft_cap > 0.f ? p.soft_cap * tanhf(s * p.scale / p.soft_cap) * kLog2e : s * p.q_scale;
      const float m_new = fmaxf(m, s);
      const float alpha = exp2f(m - m_new), pr = exp2f(s - m_new);
      l = l * alpha + pr;
#pragma unroll
      for (int e = 0; e < E; ++e) acc[e] = fmaf(pr, __ldg(vp + e), acc[e] * alpha);
      m = m_new;
    }
  }
  // Rows of a faulty sequence (and of a tile that met a bad block) are NaN.
  const float inv = bad ? nan_f() : (l > 0.f ? 1.f / l : 0.f);
  float* op = reinterpret_cast<float*>(p.out) + int64_t(row) * p.out_token_stride + int64_t(h) * p.out_head_stride;
#pragma unroll
  for (int e = 0; e < E; ++e) op[lane * E + e] = acc[e] * inv;
}

}  // namespace

void launch_prefill_fp32(const PrefillParams& p, int head_dim, cudaStream_t s) {
  const dim3 grid(unsigned(max(p.total_q, p.num_seqs)), unsigned((p.num_q_heads + kWarps - 1) / kWarps));
  switch (head_dim) {
    case 64: prefill_fp32_kernel<64><<<grid, 32 * kWarps, 0, s>>>(p); break;
    case 128: prefill_fp32_kernel<128><<<grid, 32 * kWarps, 0, s>>>(p); break;
    default: prefill_fp32_kernel<256><<<grid, 32 * kWarps, 0, s>>>(p); break;
  }
  check(cudaGetLastError(), "prefill attention (fp32) launch");
}

}  // namespace cuda
}  // namespace kern
}  // namespace kvb
