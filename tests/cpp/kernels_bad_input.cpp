// Bad input at the kernel boundary that must be refused, not wrapped or dereferenced: strides and
// extents whose offsets overflow, workspace sizes that wrap size_t, arrays of older (smaller) versioned
// structs, and CUDA input faults (device-side record, reported by kvb_cuda_take_fault).
#include <cstddef>
#include <cstdint>

#include "kernels_util.h"

using namespace kt;

namespace {

constexpr int64_t k2p60 = int64_t(1) << 60;
constexpr int64_t k2p61 = int64_t(1) << 61;
constexpr int64_t k2p62 = int64_t(1) << 62;

bool mentions(const char* word) { return std::strstr(kvb_last_error(), word) != nullptr; }

// A one-sequence decode over a small valid cache; tests break one field at a time.
struct AttnCase {
  HostCache c{KVB_DTYPE_FP16, 4, 16, 2, 64};
  Tensor q{KVB_DTYPE_FP16, 2 * 4 * 64}, out{KVB_DTYPE_FP16, 2 * 4 * 64};
  std::vector<int32_t> table{0, 1, 2, 3, 0, 1, 2, 3};
  std::vector<int32_t> lens{20, 20};
  kvb_attention_args a;
  AttnCase() {
    kvb_attention_args_init(&a);
    set_paged(a, 2, 4, 4, q.data(), out.data(), table.data(), lens.data());
  }
};

void test_attention_stride_overflow() {
  AttnCase t;
  CHECK_OK(kvb_paged_attention(&t.c.desc, &t.a, nullptr));
  kvb_attention_args b = t.a;
  b.q_head_stride = k2p61;  // was: signed overflow computing the default seq stride, then SIGSEGV
  CHECK_STATUS(kvb_paged_attention(&t.c.desc, &b, nullptr), KVB_ERR_INVALID_ARGUMENT);
  CHECK(mentions("q_head_stride"));
  b = t.a;
  b.q_head_stride = k2p60 / 2;  // stride fits, 3 * stride + default seq stride do not
  CHECK_STATUS(kvb_paged_attention(&t.c.desc, &b, nullptr), KVB_ERR_INVALID_ARGUMENT);
  b = t.a;
  b.q_seq_stride = k2p62;  // was: accepted, reading at a wrapped offset
  CHECK_STATUS(kvb_paged_attention(&t.c.desc, &b, nullptr), KVB_ERR_INVALID_ARGUMENT);
  CHECK(mentions("q_seq_stride"));
  b = t.a;
  b.q_seq_stride = k2p60 - 1;  // each stride below the limit, the second sequence's row beyond it
  CHECK_STATUS(kvb_paged_attention(&t.c.desc, &b, nullptr), KVB_ERR_INVALID_ARGUMENT);
  b = t.a;
  b.q_seq_stride = -256;  // negative strides are refused
  CHECK_STATUS(kvb_paged_attention(&t.c.desc, &b, nullptr), KVB_ERR_INVALID_ARGUMENT);
  CHECK(mentions("negative"));
  b = t.a;
  b.out_seq_stride = k2p62;
  CHECK_STATUS(kvb_paged_attention(&t.c.desc, &b, nullptr), KVB_ERR_INVALID_ARGUMENT);
  b = t.a;
  b.out_head_stride = INT64_MAX;
  CHECK_STATUS(kvb_paged_attention(&t.c.desc, &b, nullptr), KVB_ERR_INVALID_ARGUMENT);
  // A q whose rows would wrap the address space.
  b = t.a;
  b.q = reinterpret_cast<const void*>(UINTPTR_MAX - 255);
  CHECK_STATUS(kvb_paged_attention(&t.c.desc, &b, nullptr), KVB_ERR_INVALID_ARGUMENT);
  CHECK(mentions("wrap"));
  // The workspace query checks shapes and strides too.
  size_t ws = 0;
  b = t.a;
  b.q_head_stride = k2p61;
  CHECK_STATUS(kvb_paged_attention_workspace_size(&t.c.desc, &b, &ws), KVB_ERR_INVALID_ARGUMENT);
  // Nothing was written by any refused call.
  for (size_t i = 0; i < t.out.n; ++i) CHECK(std::isfinite(t.out.get(i)));
}

void test_cache_stride_overflow() {
  AttnCase t;
  kvb_cache_desc d = t.c.desc;
  d.block_stride = k2p61;
  CHECK_STATUS(kvb_paged_attention(&d, &t.a, nullptr), KVB_ERR_INVALID_ARGUMENT);
  d = t.c.desc;
  d.head_stride = k2p62;  // the default token and block strides would overflow
  CHECK_STATUS(kvb_paged_attention(&d, &t.a, nullptr), KVB_ERR_INVALID_ARGUMENT);
  CHECK(mentions("head_stride"));
  d = t.c.desc;
  d.block_stride = -d.block_stride;
  CHECK_STATUS(kvb_paged_attention(&d, &t.a, nullptr), KVB_ERR_INVALID_ARGUMENT);
  d = t.c.desc;
  d.k = reinterpret_cast<void*>(UINTPTR_MAX - 4095);
  const int32_t pairs[] = {0, 1};
  CHECK_STATUS(kvb_copy_blocks(&d, 1, pairs, 1, nullptr), KVB_ERR_INVALID_ARGUMENT);
}

void test_write_kv_stride_overflow() {
  HostCache c(KVB_DTYPE_FP16, 4, 16, 2, 64);
  std::vector<int64_t> slots = {0, 1};
  Tensor kv(KVB_DTYPE_FP16, 2 * 2 * 64);
  const kvb_write_kv_args w = write_args(2, kv.data(), kv.data(), slots.data());
  CHECK_OK(kvb_write_kv(&c.desc, &w, nullptr));
  kvb_write_kv_args b = w;
  b.key_token_stride = k2p62;  // was: accepted, reading token 1 at a wrapped offset
  CHECK_STATUS(kvb_write_kv(&c.desc, &b, nullptr), KVB_ERR_INVALID_ARGUMENT);
  CHECK(mentions("key_token_stride"));
  b = w;
  b.value_head_stride = k2p61;  // default value_token_stride = 2 * 2^61 overflows
  CHECK_STATUS(kvb_write_kv(&c.desc, &b, nullptr), KVB_ERR_INVALID_ARGUMENT);
  b = w;
  b.key_head_stride = -64;
  CHECK_STATUS(kvb_write_kv(&c.desc, &b, nullptr), KVB_ERR_INVALID_ARGUMENT);
  b = w;
  b.value_token_stride = k2p60 - 1;
  CHECK_STATUS(kvb_write_kv(&c.desc, &b, nullptr), KVB_ERR_INVALID_ARGUMENT);
  b = w;
  b.num_tokens = 1;  // with one token the token stride is never multiplied: any in-range value is fine
  b.key_token_stride = k2p60 - 1;
  CHECK_OK(kvb_write_kv(&c.desc, &b, nullptr));
}

void test_workspace_size_overflow() {
  // 65535 sequences x 2^20 query heads x ~2^22 partitions x 258 floats: ~2^74 bytes.
  kvb_cache_desc d;
  kvb_cache_desc_init(&d);
  d.num_blocks = 1;
  d.block_size = 16;
  d.num_kv_heads = 4096;
  d.head_dim = 256;
  d.k = d.v = reinterpret_cast<void*>(uintptr_t(4096));  // never read by the size query
  kvb_attention_args a;
  kvb_attention_args_init(&a);
  a.num_seqs = 65535;
  a.num_q_heads = 4096 * 256;
  a.max_blocks_per_seq = (0x7fffffffu / 16);
  size_t ws = 12345;
  CHECK_STATUS(kvb_paged_attention_workspace_size(&d, &a, &ws), KVB_ERR_INVALID_ARGUMENT);
  CHECK(ws == 12345);
  CHECK(mentions("workspace"));
  a.num_seqs = 1;  // a large but representable size is still answered
  a.num_q_heads = 4096;
  CHECK_OK(kvb_paged_attention_workspace_size(&d, &a, &ws));
  CHECK(ws > (size_t(1) << 32));
}

// layers[] built by a caller whose kvb_cache_desc is older (smaller, without alloc_kind/reserved): the
// library must step through it by that caller's struct_size.
struct OldLayers {
  static constexpr uint32_t kSize = offsetof(kvb_cache_desc, alloc_kind);  // 72: the first kvb_cache_desc
  std::vector<uint64_t> storage;
  explicit OldLayers(const std::vector<kvb_cache_desc>& layers) : storage(layers.size() * kSize / 8) {
    char* p = reinterpret_cast<char*>(storage.data());
    for (size_t l = 0; l < layers.size(); ++l) {
      kvb_cache_desc d = layers[l];
      d.struct_size = kSize;
      std::memcpy(p + l * kSize, &d, kSize);
    }
  }
  const kvb_cache_desc* data() const { return reinterpret_cast<const kvb_cache_desc*>(storage.data()); }
};

bool same_block(const HostCache& a, int32_t ba, const HostCache& b, int32_t bb) {
  const size_t n = size_t(a.desc.block_stride);
  for (size_t i = 0; i < n; ++i)
    if (a.k.get(ba * n + i) != b.k.get(bb * n + i) || a.v.get(ba * n + i) != b.v.get(bb * n + i)) return false;
  return true;
}

void test_layers_of_older_struct() {
  static_assert(OldLayers::kSize % alignof(kvb_cache_desc) == 0, "older struct size must be an array stride");
  std::mt19937 rng(5);
  std::vector<HostCache> caches, hosts;
  for (int l = 0; l < 3; ++l) {
    caches.emplace_back(KVB_DTYPE_FP16, 4, 16, 2, 64);
    hosts.emplace_back(KVB_DTYPE_FP16, 4, 16, 2, 64);
  }
  std::vector<kvb_cache_desc> descs, host_descs;
  for (auto& c : caches) {
    c.k.fill_random(rng);
    c.v.fill_random(rng);
    descs.push_back(c.desc);
  }
  for (auto& h : hosts) host_descs.push_back(h.desc);
  const OldLayers old(descs), old_hosts(host_descs);
  const int32_t pairs[] = {0, 3, 1, 2};
  CHECK_OK(kvb_copy_blocks(old.data(), 3, pairs, 2, nullptr));
  for (auto& c : caches) CHECK(same_block(c, 0, c, 3) && same_block(c, 1, c, 2));
  // Swap with an older-struct source array and a current-struct destination array, and back.
  CHECK_OK(kvb_swap_blocks(old.data(), host_descs.data(), 3, pairs, 2, KVB_SWAP_AUTO, nullptr));
  for (size_t l = 0; l < 3; ++l) CHECK(same_block(caches[l], 0, hosts[l], 3) && same_block(caches[l], 1, hosts[l], 2));
  const int32_t back[] = {3, 1};
  hosts[2].k.set(size_t(3 * hosts[2].desc.block_stride), 0.5f);
  CHECK_OK(kvb_swap_blocks(old_hosts.data(), descs.data(), 3, back, 1, KVB_SWAP_AUTO, nullptr));
  CHECK(caches[2].k.get(size_t(caches[2].desc.block_stride)) == 0.5f);
  // Mixed sizes within one array, and a size that cannot be an array stride, are refused.
  std::vector<uint64_t> mixed(old.storage);
  uint32_t other = sizeof(kvb_cache_desc);
  std::memcpy(reinterpret_cast<char*>(mixed.data()) + OldLayers::kSize, &other, 4);
  CHECK_STATUS(kvb_copy_blocks(reinterpret_cast<const kvb_cache_desc*>(mixed.data()), 3, pairs, 2, nullptr),
               KVB_ERR_INVALID_ARGUMENT);
  CHECK(mentions("layers[1]"));
  kvb_cache_desc odd = descs[0];
  odd.struct_size = 76;
  CHECK_STATUS(kvb_copy_blocks(&odd, 1, pairs, 2, nullptr), KVB_ERR_INVALID_ARGUMENT);
}

// Without CUDA in the build: UNSUPPORTED. Built with CUDA but no usable driver or device: DEVICE, with a
// message that says so (not only the runtime's "CUDA driver version is insufficient").
void test_cuda_take_fault_without_gpu() {
  kvb_kernel_fault f;
  kvb_kernel_fault_init(&f);
  CHECK(f.struct_size == sizeof f && f.kind == KVB_FAULT_NONE && f.count == 0 && f.index == -1);
  CHECK_STATUS(kvb_cuda_take_fault(0, nullptr, nullptr), KVB_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvb_cuda_take_fault(-1, nullptr, &f), KVB_ERR_INVALID_ARGUMENT);
  const kvb_status want = cuda_built() ? KVB_ERR_DEVICE : KVB_ERR_UNSUPPORTED;
  CHECK_STATUS(kvb_cuda_take_fault(0, nullptr, &f), want);
  if (want == KVB_ERR_DEVICE) CHECK(mentions("no usable CUDA device or driver was found"));
  // Kernel calls on a CUDA descriptor say the same.
  HostCache c(KVB_DTYPE_FP16, 4, 16, 2, 64);
  kvb_cache_desc d = c.desc;
  d.device_type = KVB_DEVICE_CUDA;
  const int32_t pairs[] = {0, 1};
  CHECK_STATUS(kvb_copy_blocks(&d, 1, pairs, 1, nullptr), want);
  if (want == KVB_ERR_DEVICE) CHECK(mentions("no usable CUDA device or driver was found"));
}

#if KVB_WITH_CUDA
// The device checks what the CPU checks: bad seq_lens and block ids (attended blocks only) give NaN
// outputs and a recorded fault; a bad slot is not written; kvb_cuda_take_fault reports and clears.
struct DevAttn {
  HostCache h;
  DeviceBuffer dk, dv;
  kvb_cache_desc desc;
  Tensor q, out;
  std::vector<int32_t> table, lens;
  kvb_attention_args a;
  DevAttn(uint32_t blocks, uint32_t max_blocks, std::mt19937& rng)
      : h(KVB_DTYPE_FP16, blocks, 16, 2, 64), dk(nullptr, h.k.bytes()), dv(nullptr, h.v.bytes()),
        q(KVB_DTYPE_FP16, 2 * 4 * 64), out(KVB_DTYPE_FP16, 2 * 4 * 64), table(2 * max_blocks), lens(2) {
    h.k.fill_random(rng);
    h.v.fill_random(rng);
    q.fill_random(rng);
    kvb::kern::devutil::copy(dk.p, h.k.data(), h.k.bytes());
    kvb::kern::devutil::copy(dv.p, h.v.data(), h.v.bytes());
    desc = h.desc;
    desc.device_type = KVB_DEVICE_CUDA;
    desc.k = dk.p;
    desc.v = dv.p;
    for (size_t i = 0; i < table.size(); ++i) table[i] = int32_t(i % max_blocks);
    kvb_attention_args_init(&a);
    a.num_seqs = 2;
    a.num_q_heads = 4;
    a.max_blocks_per_seq = max_blocks;
  }
  // Runs on the device; returns the take status and fills f and out.
  kvb_status run(kvb_kernel_fault& f, uint32_t window = 0) {
    DeviceBuffer dq(q.data(), q.bytes()), dout(nullptr, out.bytes());
    DeviceBuffer dt(table.data(), table.size() * 4), dl(lens.data(), lens.size() * 4);
    kvb_attention_args b = a;
    b.q = dq.p;
    b.out = dout.p;
    b.block_tables = static_cast<const int32_t*>(dt.p);
    b.seq_lens = static_cast<const int32_t*>(dl.p);
    b.window_tokens = window;
    size_t ws = 0;
    CHECK_OK(kvb_paged_attention_workspace_size(&desc, &b, &ws));
    DeviceBuffer dws(nullptr, ws);
    b.workspace = ws ? dws.p : nullptr;
    b.workspace_size = ws;
    CHECK_OK(kvb_paged_attention(&desc, &b, nullptr));
    kvb_kernel_fault_init(&f);
    const kvb_status st = kvb_cuda_take_fault(0, nullptr, &f);
    dout.to_host(out.data());
    return st;
  }
  bool seq_all(int s, bool nan) const {
    for (size_t i = size_t(s) * 256; i < size_t(s + 1) * 256; ++i)
      if (std::isnan(out.get(i)) != nan) return false;
    return true;
  }
};

void test_cuda_faults() {
  std::mt19937 rng(3);
  kvb_kernel_fault f;
  kvb_kernel_fault_init(&f);
  kvb_cuda_take_fault(0, nullptr, &f);  // start clean whatever earlier tests left
  for (uint32_t max_blocks : {4u, 64u}) {  // single pass, then split-K (1000 tokens)
    DevAttn t(64, max_blocks, rng);
    const int32_t len = max_blocks == 4 ? 40 : 1000;
    t.lens = {len, len};
    CHECK_OK(t.run(f));
    CHECK(f.kind == KVB_FAULT_NONE && f.count == 0 && t.seq_all(0, false) && t.seq_all(1, false));
    // A bad id in an attended block of sequence 1.
    t.table[max_blocks + 1] = 99;
    CHECK_STATUS(t.run(f), KVB_ERR_INVALID_ARGUMENT);
    CHECK(mentions("block_tables[1][1] = 99"));
    CHECK(f.kind == KVB_FAULT_BLOCK_ID && f.kernel == KVB_KERNEL_PAGED_ATTENTION && f.index == 1 && f.column == 1 &&
          f.value == 99 && f.count >= 1);
    CHECK(t.seq_all(0, false) && t.seq_all(1, true));
    kvb_kernel_fault again;
    kvb_kernel_fault_init(&again);
    CHECK_OK(kvb_cuda_take_fault(0, nullptr, &again));  // consumed
    CHECK(again.kind == KVB_FAULT_NONE && again.count == 0);
    // -1 inside the attended range is a fault too; outside a window nothing is read or checked.
    t.table[max_blocks + 1] = -1;
    CHECK_STATUS(t.run(f), KVB_ERR_INVALID_ARGUMENT);
    CHECK(f.kind == KVB_FAULT_BLOCK_ID && f.value == -1);
    t.table[max_blocks + 0] = -7;
    CHECK_OK(t.run(f, 8));  // window of 8: only the last block is attended
    CHECK(t.seq_all(0, false) && t.seq_all(1, false));
    // seq_lens beyond the table.
    t.table[max_blocks + 0] = 0;
    t.table[max_blocks + 1] = 1;
    t.lens[1] = int32_t(max_blocks * 16 + 1);
    CHECK_STATUS(t.run(f), KVB_ERR_INVALID_ARGUMENT);
    CHECK(f.kind == KVB_FAULT_SEQ_LEN && f.index == 1 && f.value == int64_t(max_blocks * 16 + 1));
    CHECK(t.seq_all(0, false) && t.seq_all(1, true));
    t.lens[1] = -3;
    CHECK_STATUS(t.run(f), KVB_ERR_INVALID_ARGUMENT);
    CHECK(f.kind == KVB_FAULT_SEQ_LEN && f.value == -3);
  }
  // write_kv: a bad slot is not written and is reported.
  DevAttn t(8, 4, rng);
  Tensor kv(KVB_DTYPE_FP16, 4 * 2 * 64);
  kv.fill_random(rng);
  std::vector<int64_t> slots = {0, -1, 5000, 3};
  DeviceBuffer dkv(kv.data(), kv.bytes()), ds(slots.data(), slots.size() * 8);
  kvb_write_kv_args w;
  kvb_write_kv_args_init(&w);
  w.num_tokens = 4;
  w.key = w.value = dkv.p;
  w.slot_mapping = static_cast<const int64_t*>(ds.p);
  CHECK_OK(kvb_write_kv(&t.desc, &w, nullptr));
  CHECK_STATUS(kvb_cuda_take_fault(0, nullptr, &f), KVB_ERR_INVALID_ARGUMENT);
  CHECK(f.kind == KVB_FAULT_SLOT && f.kernel == KVB_KERNEL_WRITE_KV && f.index == 2 && f.value == 5000);
  t.dk.to_host(t.h.k.data());
  CHECK(t.h.k.get(t.h.offset(0, 3, 1, 5)) == kv.get(3 * 128 + 64 + 5));
}
#endif

}  // namespace

int main() {
  RUN_TEST(test_attention_stride_overflow);
  RUN_TEST(test_cache_stride_overflow);
  RUN_TEST(test_write_kv_stride_overflow);
  RUN_TEST(test_workspace_size_overflow);
  RUN_TEST(test_layers_of_older_struct);
  if (cuda_devices() == 0) {
    RUN_TEST(test_cuda_take_fault_without_gpu);
    SKIP_TEST(test_cuda_faults, cuda_built() ? "no CUDA device" : "built without CUDA");
  } else {
#if KVB_WITH_CUDA
    RUN_TEST(test_cuda_faults);
#endif
  }
  TEST_SUMMARY();
}
