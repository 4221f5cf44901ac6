// CUDA shared-prefix decode (kernels/cascade/cascade.cu; fp16 / bf16 shared part on tensor cores in
// cascade_mma.cu): kvb_paged_attention on a CUDA cache with a
// kvb_prefix_groups description against the plain CUDA call and the plain CPU call on the same inputs,
// over random decode batches (several groups, a group of one, sequences in no group, members whose whole
// sequence is shared, windows + sinks, soft caps, fp16 / bf16 / fp32, head dims 64 / 128 / 256, GQA
// groups 1 / 4 / 8 / 16 / 32 / 64, block sizes 1 / 16), one batch of 64 members sharing 4096 tokens (split keys), a
// CUDA graph capture; the workspace query sizes the shared path; a member whose shared columns differ
// from its group's first member gets NaN outputs and a BLOCK_ID fault. Without a CUDA device: SKIP
// (the coordinator's `make gpu-check` packs this file with the other kernels_* tests).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <vector>

#include "cascade_batch.h"

using namespace kt;

namespace {

using Config = CascadeConfig;  // big: one group of 64 sharing 4096 tokens, 128 own each

struct Batch : GroupedTables {
  Config cf;
  uint32_t num_q_heads = 0, num_blocks = 0;
  HostCache cache;
  Tensor q;

  static uint32_t blocks_for(const Config& c) {
    return c.big ? 4096 / c.block_size + 64 * (128 / c.block_size) + 8 : std::max(600u, 6000 / c.block_size);
  }

  explicit Batch(const Config& c)
      : cf(c), num_blocks(blocks_for(c)), cache(c.dtype, blocks_for(c), c.block_size, c.num_kv_heads, c.head_dim) {
    std::mt19937 rng(c.seed);
    num_q_heads = c.num_kv_heads * c.group;
    const int32_t bs = int32_t(c.block_size);
    draw(
        rng, num_blocks, bs, c.big,
        [&] { return c.big ? 4096 / bs : std::max<int32_t>(1, int32_t((8 + rng() % 120) / uint32_t(bs))); },
        [&](int g) { return c.big ? 64 : g == 1 ? 1 : 2 + int(rng() % 9); },
        [&](int k, int32_t shared_tokens) {
          const int32_t own = c.big ? 128 : (k == 0 ? 0 : 1 + int32_t(rng() % 100));  // 0: all shared
          return SeqLens{shared_tokens + own, 1};
        },
        [&](int) { return SeqLens{1 + int32_t(rng() % 200), 1}; });
    cache.k.fill_random(rng);
    cache.v.fill_random(rng);
    q = Tensor(c.dtype, size_t(num_seqs) * num_q_heads * c.head_dim);
    q.fill_random(rng, -2.f, 2.f);
  }

  kvb_attention_args args(const void* qp, void* op, const int32_t* tab, const int32_t* len, void* ws, size_t wss,
                          const kvb_prefix_groups* g) const {
    kvb_attention_args a;
    kvb_attention_args_init(&a);
    set_paged(a, num_seqs, num_q_heads, max_blocks, qp, op, tab, len);
    set_mask(a, cf.soft_cap, cf.window, cf.sink);
    a.workspace = ws;
    a.workspace_size = wss;
    a.prefix_groups = g;
    return a;
  }

  Tensor cpu_plain() {
    Tensor out(cf.dtype, q.n);
    out.poison();
    attend_cpu(cache.desc, args(q.data(), out.data(), tables.data(), lens.data(), nullptr, 0, nullptr));
    return out;
  }

  const char* name() const { return cf.name(); }
};

int compare(const Tensor& got, const Tensor& want, uint32_t dtype, const char* what, const char* name) {
  return kt::compare(got, want, got.n, dtype, what, name);
}

std::vector<Config> configs() {
  std::vector<Config> out;
  const uint32_t dtypes[] = {KVB_DTYPE_FP16, KVB_DTYPE_BF16, KVB_DTYPE_FP32};
  const uint32_t dims[] = {64, 128, 256};
  unsigned seed = 1;
  for (uint32_t dt : dtypes)
    for (uint32_t d : dims) {
      out.push_back({dt, d, 16, 2, 4, 0, 0, 0.f, seed++, false});
      if (quick()) continue;
      out.push_back({dt, d, 16, 1, 8, 48, 4, 0.f, seed++, false});
      out.push_back({dt, d, 1, 3, 1, 0, 0, 30.f, seed++, false});
    }
  if (quick()) return out;
  out.push_back({KVB_DTYPE_FP16, 128, 16, 2, 32, 0, 0, 0.f, seed++, false});  // 32 heads per kv head: 1 member a tile
  // 64 heads per kv head: a member spans the tensor-core kernel's whole 64-row tile (fp32: the plain kernel).
  out.push_back({KVB_DTYPE_BF16, 64, 16, 1, 64, 0, 0, 0.f, seed++, false});
  out.push_back({KVB_DTYPE_FP16, 256, 16, 2, 16, 40, 0, 25.f, seed++, false});
  out.push_back({KVB_DTYPE_FP16, 128, 16, 8, 4, 0, 0, 0.f, seed++, true});
  out.push_back({KVB_DTYPE_BF16, 128, 16, 8, 4, 1000, 16, 0.f, seed++, true});
  return out;
}

#if KVB_WITH_CUDA
struct DeviceBatch : DeviceCache {
  DeviceBuffer q, tab, len;
  explicit DeviceBatch(Batch& b)
      : DeviceCache(b.cache),
        q(b.q.data(), b.q.bytes()),
        tab(b.tables.data(), b.tables.size() * 4),
        len(b.lens.data(), b.lens.size() * 4) {}
  // The CUDA call, with or without the description (optionally captured in a graph).
  Tensor run(Batch& b, const kvb_prefix_groups* g, bool graph, size_t* ws_out = nullptr) {
    Tensor out(b.cf.dtype, b.q.n);
    out.poison();
    DeviceBuffer o(out.data(), out.bytes());
    attend_cuda(desc, b.args(q.p, o.p, static_cast<int32_t*>(tab.p), static_cast<int32_t*>(len.p), nullptr, 0, g), graph,
                ws_out);
    o.to_host(out.data());
    return out;
  }
};

void test_cuda_groups_equal_plain() {
  int bad = 0, i = 0;
  for (const Config& c : configs()) {
    Batch b(c);
    const Tensor cpu = b.cpu_plain();
    DeviceBatch d(b);
    kvb_prefix_groups g = b.groups();
    size_t ws_plain = 0, ws_groups = 0;
    const Tensor plain = d.run(b, nullptr, false, &ws_plain);
    const Tensor grouped = d.run(b, &g, (i++ % 5) == 2, &ws_groups);
    bad += compare(plain, cpu, c.dtype, "cuda plain vs cpu", b.name());
    bad += compare(grouped, cpu, c.dtype, "cuda groups vs cpu", b.name());
    bad += compare(grouped, plain, c.dtype, "cuda groups vs cuda plain", b.name());
    // The workspace query with the description covers the plain call too.
    if (ws_groups < ws_plain && bad++ < 3) fprintf(stderr, "  %s: workspace %zu with groups, %zu without\n", b.name(), ws_groups, ws_plain);
  }
  CHECK(bad == 0);
}

void test_cuda_member_with_other_blocks_faults() {
  Config c{KVB_DTYPE_FP16, 128, 16, 2, 4, 0, 0, 0.f, 77, false};
  Batch b(c);
  // A second member whose first shared column names another block than the group's first member.
  const int32_t lead = b.members[0], other = b.members[size_t(b.group_start[1]) - 1];
  CHECK(other != lead);
  b.tables[size_t(other) * b.max_blocks] = (b.tables[size_t(lead) * b.max_blocks] + 1) % int32_t(b.num_blocks);
  DeviceBatch d(b);
  kvb_prefix_groups g = b.groups();
  kvb_kernel_fault f;
  kvb_kernel_fault_init(&f);
  CHECK_OK(kvb_cuda_take_fault(0, nullptr, &f));  // nothing left over from earlier tests
  const Tensor out = d.run(b, &g, false);
  CHECK_STATUS(kvb_cuda_take_fault(0, nullptr, &f), KVB_ERR_INVALID_ARGUMENT);
  CHECK(f.kind == KVB_FAULT_BLOCK_ID && f.index == other && f.column == 0);
  const size_t row = size_t(other) * b.num_q_heads * c.head_dim;
  CHECK(std::isnan(out.get(row)) && std::isnan(out.get(row + b.num_q_heads * c.head_dim - 1)));
  CHECK(std::isfinite(out.get(size_t(lead) * b.num_q_heads * c.head_dim)));
}
#endif

// Without a device the batches still run on the CPU: the plain CPU call with and without the description
// agree (the generator's batches are valid descriptions).
void test_batches_valid_on_cpu() {
  int bad = 0;
  for (const Config& c : configs()) {
    if (c.big) continue;  // covered by cascade_attention
    Batch b(c);
    const Tensor plain = b.cpu_plain();
    Tensor out(c.dtype, b.q.n);
    kvb_prefix_groups g = b.groups();
    attend_cpu(b.cache.desc, b.args(b.q.data(), out.data(), b.tables.data(), b.lens.data(), nullptr, 0, &g));
    bad += compare(out, plain, c.dtype, "cpu groups vs cpu plain", b.name());
  }
  CHECK(bad == 0);
}

}  // namespace

int main() {
  RUN_TEST(test_batches_valid_on_cpu);
  RUN_CUDA_TEST(test_cuda_groups_equal_plain);
  RUN_CUDA_TEST(test_cuda_member_with_other_blocks_faults);
  TEST_SUMMARY();
}
