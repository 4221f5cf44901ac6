// CPU paged prefill / extend attention (also the oracle of the CUDA kernels).
//
// The rows of q_len 1 (a decode batch, or the decode rows of a mixed one) run the decode kernel's items
// (decode_rows): their outputs are kvb_paged_attention's on the same rows, bit for bit. Every other
// sequence's rows run the loops of the shared-prefix kernel without groups (cascade_cpu.cpp,
// rows_attention): work items of (sequence, query tile of packed rows = tokens x the GQA group's query
// heads, kv head group), key tiles staged once for all rows of an item, fp32 online softmax; the
// products on AMX tiles where active (bf16 high / low splits, amx_tiles_cpu.h), else on the widest vector
// path (simd_cpu.h). Token trees, windows with sinks and the soft cap are masks of those loops
// (cascade_softmax_cpu.inc). Figures: docs/perf/kernels_cpu.md.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "../../libkvblock/error.h"
#include "../common/types.h"
#include "../cascade/cascade.h"
#include "../decode/decode.h"
#include "prefill.h"
#include "../common/convert_cpu.h"
#include "../common/parallel_cpu.h"
#include "../common/simd_cpu.h"

namespace kvb {
namespace kern {
namespace cpu {

namespace {

// Everything the kernel will read must be valid before anything is written.
void check_inputs(const Cache& c, const Prefill& a) {
  const int32_t* qs = a.query_start;
  if (qs[0] != 0) fail(Code::invalid_argument, "query_start[0] = %d is not 0", qs[0]);
  const int64_t max_len = a.max_blocks * c.block_size;
  for (int64_t s = 0; s < a.num_seqs; ++s) {
    if (qs[s + 1] < qs[s])
      fail(Code::invalid_argument, "query_start[%lld] = %d is less than query_start[%lld] = %d", (long long)(s + 1),
           qs[s + 1], (long long)s, qs[s]);
    const int64_t q_len = int64_t(qs[s + 1]) - qs[s], len = a.seq_lens[s];
    if (len < q_len || len > max_len)
      fail(Code::invalid_argument, "seq_lens[%lld] = %lld is not in [q_len = %lld, max_blocks_per_seq * block_size = %lld]",
           (long long)s, (long long)len, (long long)q_len, (long long)max_len);
    if (q_len == 0) continue;  // nothing of this sequence is read
    const int64_t first = len - q_len;
    const int64_t lo = a.window > 0 ? std::max<int64_t>(0, first - a.window + 1) : 0;
    const int64_t sink = a.window > 0 ? a.sink : 0;
    for (int64_t b = 0; b * c.block_size < len; ++b) {
      const int64_t t0 = b * c.block_size, t1 = std::min(len, t0 + c.block_size);
      if (!(t1 > lo || t0 < sink)) continue;  // before every row's window and after the sinks: never read
      const int32_t id = a.block_tables[s * a.max_blocks + b];
      if (id < 0 || id >= c.num_blocks)
        fail(Code::invalid_argument, "block_tables[%lld][%lld] = %d is not in [0, %lld) (sequence length %lld)",
             (long long)s, (long long)b, id, (long long)c.num_blocks, (long long)len);
    }
  }
  if (qs[a.num_seqs] != a.total_q)
    fail(Code::invalid_argument, "query_start[num_seqs = %lld] = %d differs from total_q_tokens %lld",
         (long long)a.num_seqs, qs[a.num_seqs], (long long)a.total_q);
}

// The q_len 1 rows of the call through cpu::paged_attention: a row at position seq_lens[s] - 1 sees what
// a decode of sequence s sees (the same window, sinks and soft cap). The decode kernel's split-K
// workspace is allocated here, like the prefill kernel's scratch.
void decode_rows(const Cache& c, const Prefill& a, const std::vector<int32_t>& seqs) {
  Attention d;
  static_cast<AttnCall&>(d) = a;
  const int64_t n = int64_t(seqs.size());
  d.num_seqs = n;
  std::vector<int32_t> lens, tables, rows;
  if (n == a.num_seqs) {  // every row a decode row: query_start[s] = s
    d.seq_lens = a.seq_lens;
    d.block_tables = a.block_tables;
  } else {
    lens.resize(size_t(n));
    tables.resize(size_t(n * a.max_blocks));
    rows.resize(size_t(n));
    for (int64_t k = 0; k < n; ++k) {
      const int64_t s = seqs[size_t(k)];
      lens[size_t(k)] = a.seq_lens[s];
      rows[size_t(k)] = a.query_start[s];
      std::memcpy(&tables[size_t(k * a.max_blocks)], a.block_tables + s * a.max_blocks, sizeof(int32_t) * size_t(a.max_blocks));
    }
    d.seq_lens = lens.data();
    d.block_tables = tables.data();
    d.q_rows = rows.data();
  }
  d.plan = plan_attention(n, a.num_q_heads, c.num_kv_heads, c.head_dim, c.block_size, a.max_blocks);
  // Every entry the reduction reads is written first: no fill (megabytes at 64 x 4096).
  const std::unique_ptr<float[]> workspace(d.plan.workspace_bytes ? new float[d.plan.workspace_bytes / sizeof(float)] : nullptr);
  d.workspace = workspace.get();
  paged_attention(c, d);
}

}  // namespace

void prefill_attention(const Cache& c, const Prefill& a) {
  check_inputs(c, a);
  std::vector<int32_t> decode;
  for (int64_t s = 0; s < a.num_seqs; ++s)
    if (a.query_start[s + 1] - a.query_start[s] == 1) decode.push_back(int32_t(s));
  if (!decode.empty()) decode_rows(c, a, decode);
  if (int64_t(decode.size()) == a.num_seqs) return;
  CascadeCall call;
  static_cast<AttnCall&>(call) = a;
  call.query_start = a.query_start;
  call.tree_mask = a.tree_mask;
  call.skip_single_rows = true;
  call.kernel = "prefill attention";
  rows_attention(c, call);
}

}  // namespace cpu
}  // namespace kern
}  // namespace kvb
