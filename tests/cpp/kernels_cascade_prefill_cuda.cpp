// CUDA shared-prefix prefill / extend (kernels/cascade/cascade_prefill.cu + cascade_mma.cu):
// kvb_prefill_attention on a CUDA cache with a kvb_prefix_groups description against the plain CUDA
// call and the plain CPU call on the same inputs, over random batches: members extending a shared
// prefix by 1 to 40 tokens each (several groups, a group of one, a member whose cached part is all
// shared), sequences in no group prefilling from scratch or extending, mixed decode (q_len 1) and
// extend rows, zero-length queries, windows + sinks (cutting into the shared keys), soft caps, fp16 /
// bf16 (fp32: the plain kernel runs, same results), head dims 64 / 128 / 256, GQA groups 1 / 4 / 8 /
// 16, block sizes 1 / 16; one batch of 32 members sharing 2048 tokens with 16 new tokens each (key
// splits); a CUDA graph capture; the workspace query sizes the shared path; a member whose shared
// columns differ from its group's first member gets NaN rows and a BLOCK_ID fault. Without a CUDA
// device the batches run on the CPU only (CPU groups against CPU plain), and the CUDA tests SKIP.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "cascade_batch.h"

using namespace kt;

namespace {

using Config = CascadeConfig;  // big: one group of 32 sharing 2048 tokens, 16 new tokens each

struct Batch : GroupedTables {
  Config cf;
  uint32_t num_q_heads = 0, num_blocks = 0, total_q = 0;
  std::vector<int32_t> qstart{0};
  HostCache cache;
  Tensor q;

  static uint32_t blocks_for(const Config& c) {
    return c.big ? 2048 / c.block_size + 32 * (64 / c.block_size) + 8 : std::max(600u, 8000 / c.block_size);
  }

  explicit Batch(const Config& c)
      : cf(c), num_blocks(blocks_for(c)), cache(c.dtype, blocks_for(c), c.block_size, c.num_kv_heads, c.head_dim) {
    std::mt19937 rng(c.seed);
    num_q_heads = c.num_kv_heads * c.group;
    const int32_t bs = int32_t(c.block_size);
    const std::vector<GroupedSeq> seqs = draw(
        rng, num_blocks, bs, c.big,
        [&] { return c.big ? 2048 / bs : std::max<int32_t>(1, int32_t((8 + rng() % 150) / uint32_t(bs))); },
        [&](int g) { return c.big ? 32 : g == 1 ? 1 : 2 + int(rng() % 7); },
        [&](int k, int32_t shared_tokens) {
          // New tokens after the shared prefix (and after own cached ones): decode, short or longer extends.
          const int32_t q_len = c.big ? 16 : k % 3 == 0 ? 1 : k % 3 == 1 ? 1 + int32_t(rng() % 40) : int32_t(rng() % 3);
          const int32_t cached_own = c.big ? 0 : (k == 0 ? 0 : int32_t(rng() % 60));
          return SeqLens{shared_tokens + cached_own + q_len, q_len};
        },
        [&](int k) {
          const int32_t len = 1 + int32_t(rng() % 200);
          return SeqLens{len, k == 0 ? len : std::min(len, 1 + int32_t(rng() % 20))};  // a prefill, extends
        });
    for (const GroupedSeq& s : seqs) qstart.push_back(qstart.back() + s.q_len);
    total_q = uint32_t(qstart.back());
    cache.k.fill_random(rng);
    cache.v.fill_random(rng);
    q = Tensor(c.dtype, size_t(std::max(1u, total_q)) * num_q_heads * c.head_dim);
    q.fill_random(rng, -2.f, 2.f);
  }

  kvb_prefill_args args(const void* qp, void* op, const int32_t* qs, const int32_t* len, const int32_t* tab, void* ws,
                        size_t wss, const kvb_prefix_groups* g) const {
    kvb_prefill_args a;
    kvb_prefill_args_init(&a);
    a.total_q_tokens = total_q;
    a.query_start = qs;
    set_paged(a, num_seqs, num_q_heads, max_blocks, qp, op, tab, len);
    set_mask(a, cf.soft_cap, cf.window, cf.sink);
    a.workspace = ws;
    a.workspace_size = wss;
    a.prefix_groups = g;
    return a;
  }

  Tensor cpu(const kvb_prefix_groups* g) {
    Tensor out(cf.dtype, q.n);
    out.poison();
    attend_cpu(cache.desc, args(q.data(), out.data(), qstart.data(), lens.data(), tables.data(), nullptr, 0, g));
    return out;
  }

  size_t valid_elems() const { return size_t(total_q) * num_q_heads * cf.head_dim; }

  const char* name() const { return cf.name(); }
};

std::vector<Config> configs() {
  std::vector<Config> out;
  const uint32_t dtypes[] = {KVB_DTYPE_FP16, KVB_DTYPE_BF16, KVB_DTYPE_FP32};
  const uint32_t dims[] = {64, 128, 256};
  unsigned seed = 101;
  for (uint32_t dt : dtypes)
    for (uint32_t d : dims) {
      out.push_back({dt, d, 16, 2, 4, 0, 0, 0.f, seed++, false});
      if (quick()) continue;
      out.push_back({dt, d, 16, 1, 8, 48, 4, 0.f, seed++, false});  // the window cuts into the shared keys
      out.push_back({dt, d, 1, 3, 1, 0, 0, 30.f, seed++, false});
    }
  if (quick()) return out;
  out.push_back({KVB_DTYPE_FP16, 128, 16, 2, 16, 0, 0, 0.f, seed++, false});
  out.push_back({KVB_DTYPE_BF16, 64, 16, 4, 4, 100, 0, 20.f, seed++, false});
  out.push_back({KVB_DTYPE_FP16, 128, 16, 8, 4, 0, 0, 0.f, seed++, true});
  out.push_back({KVB_DTYPE_BF16, 128, 16, 8, 4, 1000, 16, 0.f, seed++, true});
  return out;
}

#if KVB_WITH_CUDA
struct DeviceBatch : DeviceCache {
  DeviceBuffer q, qs, tab, len;
  explicit DeviceBatch(Batch& b)
      : DeviceCache(b.cache),
        q(b.q.data(), b.q.bytes()),
        qs(b.qstart.data(), b.qstart.size() * 4),
        tab(b.tables.data(), b.tables.size() * 4),
        len(b.lens.data(), b.lens.size() * 4) {}
  Tensor run(Batch& b, const kvb_prefix_groups* g, bool graph, size_t* ws_out = nullptr) {
    Tensor out(b.cf.dtype, b.q.n);
    out.poison();
    DeviceBuffer o(out.data(), out.bytes());
    attend_cuda(desc,
                b.args(q.p, o.p, static_cast<int32_t*>(qs.p), static_cast<int32_t*>(len.p), static_cast<int32_t*>(tab.p),
                       nullptr, 0, g),
                graph, ws_out);
    o.to_host(out.data());
    return out;
  }
};

void test_cuda_groups_equal_plain() {
  int bad = 0, i = 0;
  for (const Config& c : configs()) {
    Batch b(c);
    const Tensor cpu = b.cpu(nullptr);
    DeviceBatch d(b);
    kvb_prefix_groups g = b.groups();
    size_t ws_plain = 0, ws_groups = 0;
    const Tensor plain = d.run(b, nullptr, false, &ws_plain);
    const Tensor grouped = d.run(b, &g, (i++ % 5) == 2, &ws_groups);
    const size_t n = b.valid_elems();
    bad += compare(plain, cpu, n, c.dtype, "cuda plain vs cpu", b.name());
    bad += compare(grouped, cpu, n, c.dtype, "cuda groups vs cpu", b.name());
    bad += compare(grouped, plain, n, c.dtype, "cuda groups vs cuda plain", b.name());
    if (ws_groups < ws_plain && bad++ < 3)
      fprintf(stderr, "  %s: workspace %zu with groups, %zu without\n", b.name(), ws_groups, ws_plain);
    // fp16 / bf16 take the shared path: its workspace is asked for.
    if (c.dtype != KVB_DTYPE_FP32 && ws_groups == ws_plain && bad++ < 3)
      fprintf(stderr, "  %s: the workspace query did not count the shared path\n", b.name());
  }
  CHECK(bad == 0);
}

void test_cuda_member_with_other_blocks_faults() {
  Config c{KVB_DTYPE_FP16, 128, 16, 2, 4, 0, 0, 0.f, 177, false};
  Batch b(c);
  // The last member of group 0 with new tokens (its rows show the NaN), not the first (whose table is read).
  const int32_t lead = b.members[0];
  int32_t other = -1;
  for (int32_t k = b.group_start[1] - 1; k > 0 && other < 0; --k)
    if (b.qstart[size_t(b.members[size_t(k)]) + 1] > b.qstart[size_t(b.members[size_t(k)])]) other = b.members[size_t(k)];
  CHECK(other >= 0);
  if (other < 0) return;
  b.tables[size_t(other) * b.max_blocks] = (b.tables[size_t(lead) * b.max_blocks] + 1) % int32_t(b.num_blocks);
  DeviceBatch d(b);
  kvb_prefix_groups g = b.groups();
  kvb_kernel_fault f;
  kvb_kernel_fault_init(&f);
  CHECK_OK(kvb_cuda_take_fault(0, nullptr, &f));  // nothing left over from earlier tests
  const Tensor out = d.run(b, &g, false);
  CHECK_STATUS(kvb_cuda_take_fault(0, nullptr, &f), KVB_ERR_INVALID_ARGUMENT);
  CHECK(f.kind == KVB_FAULT_BLOCK_ID && f.index == other && f.column == 0);
  const size_t rowlen = size_t(b.num_q_heads) * c.head_dim;
  if (b.qstart[size_t(other) + 1] > b.qstart[size_t(other)])
    CHECK(std::isnan(out.get(size_t(b.qstart[size_t(other)]) * rowlen)));
  if (b.qstart[size_t(lead) + 1] > b.qstart[size_t(lead)])
    CHECK(std::isfinite(out.get(size_t(b.qstart[size_t(lead)]) * rowlen)));
}

// A sequence with no query rows and a bad seq_len (-3) is reported as the plain prefill reports it
// (SEQ_LEN, its row, the value), with or without the description: the own tile that finds it has no
// rows, and returned before recording the fault (nothing was reported with groups).
void test_cuda_faulty_sequence_without_rows_is_reported() {
  for (unsigned seed = 300; seed < 400; ++seed) {
    Batch b(Config{KVB_DTYPE_FP16, 64, 16, 2, 4, 0, 0, 0.f, seed, false});
    int32_t empty = -1;
    for (uint32_t s = 0; s < b.num_seqs && empty < 0; ++s)
      if (b.qstart[s + 1] == b.qstart[s]) empty = int32_t(s);
    if (empty < 0) continue;
    b.lens[size_t(empty)] = -3;  // before the upload
    DeviceBatch d(b);
    kvb_prefix_groups g = b.groups();
    const kvb_prefix_groups* descs[] = {nullptr, &g};
    for (const kvb_prefix_groups* gp : descs) {
      kvb_kernel_fault f;
      kvb_kernel_fault_init(&f);
      CHECK_OK(kvb_cuda_take_fault(0, nullptr, &f));  // nothing left over from earlier tests
      d.run(b, gp, false);
      CHECK_STATUS(kvb_cuda_take_fault(0, nullptr, &f), KVB_ERR_INVALID_ARGUMENT);
      CHECK(f.kind == KVB_FAULT_SEQ_LEN && f.kernel == KVB_KERNEL_PREFILL_ATTENTION && f.index == empty &&
            f.value == -3);
    }
    return;
  }
  CHECK(!"no seed in [300, 400) gives a sequence with an empty query");
}
#endif

// Without a device the batches still run on the CPU: the CPU call with and without the description
// agree (the generator's batches are valid descriptions).
void test_batches_valid_on_cpu() {
  int bad = 0;
  for (const Config& c : configs()) {
    if (c.big) continue;
    Batch b(c);
    kvb_prefix_groups g = b.groups();
    bad += compare(b.cpu(&g), b.cpu(nullptr), b.valid_elems(), c.dtype, "cpu groups vs cpu plain", b.name());
  }
  CHECK(bad == 0);
}

// The workspace queries on a CUDA cache (shapes only: no device needed, only a CUDA build): with the
// description fp16 / bf16 ask for the shared path's parts (more than the plain plan), fp32 for the plain
// plan only; a bad description fails the query naming the value.
void test_workspace_query_counts_the_shared_path() {
  const uint32_t dtypes[] = {KVB_DTYPE_FP16, KVB_DTYPE_BF16, KVB_DTYPE_FP32};
  for (uint32_t dt : dtypes) {
    Config c{dt, 128, 16, 2, 4, 0, 0, 0.f, 5, false};
    Batch b(c);
    HostCache dev(b.cache);
    dev.desc.device_type = KVB_DEVICE_CUDA;
    kvb_prefix_groups g = b.groups();
    size_t plain = 0, grouped = 0;
    kvb_prefill_args a = b.args(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, nullptr);
    CHECK_OK(kvb_prefill_attention_workspace_size(&dev.desc, &a, &plain));
    a.prefix_groups = &g;
    CHECK_OK(kvb_prefill_attention_workspace_size(&dev.desc, &a, &grouped));
    // parts x (head_dim + 2) floats per (query row, head): at least 2 parts.
    const size_t least = size_t(b.total_q) * b.num_q_heads * 2 * (c.head_dim + 2) * 4;
    if (dt == KVB_DTYPE_FP32) CHECK(grouped == plain);
    else CHECK(grouped >= least && grouped > plain);
    b.members[0] = int32_t(b.num_seqs);  // not a row of the batch
    CHECK_STATUS(kvb_prefill_attention_workspace_size(&dev.desc, &a, &grouped), KVB_ERR_INVALID_ARGUMENT);
    CHECK(std::strstr(kvb_last_error(), "prefix_groups.members[0]") != nullptr);
  }
}

}  // namespace

int main() {
  RUN_TEST(test_batches_valid_on_cpu);
  if (cuda_built()) RUN_TEST(test_workspace_query_counts_the_shared_path);
  else SKIP_TEST(test_workspace_query_counts_the_shared_path, "built without CUDA");
  RUN_CUDA_TEST(test_cuda_groups_equal_plain);
  RUN_CUDA_TEST(test_cuda_member_with_other_blocks_faults);
  RUN_CUDA_TEST(test_cuda_faulty_sequence_without_rows_is_reported);
  TEST_SUMMARY();
}
