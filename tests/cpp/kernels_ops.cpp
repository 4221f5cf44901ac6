// write_kv, copy_blocks, swap_blocks, cache allocation and every validation error of the kernel API:
// CPU always, CUDA against CPU when a GPU is present (SKIP otherwise).
#include <cmath>

#include "kernels_util.h"

using namespace kt;

namespace {

void test_fp16_bf16_conversion() {
  const float vals[] = {0.f, -0.f, 1.f, -2.5f, 65504.f, 6.1035156e-05f, 5.9604645e-08f, 3.14159f, 1e-3f, 70000.f};
  for (float x : vals) {
    const float h = cpuk::half_to_float(cpuk::float_to_half(x));
    CHECK(x >= 65520.f ? std::isinf(h) : std::fabs(h - x) <= std::fabs(x) * 1e-3f + 1e-7f);
    const float b = cpuk::bf16_to_float(cpuk::float_to_bf16(x));
    CHECK(std::fabs(b - x) <= std::fabs(x) * 8e-3f);
  }
  for (uint32_t u = 0; u < 0x10000; ++u) {  // every finite half round-trips exactly
    const uint16_t h = uint16_t(u);
    if ((h & 0x7c00) == 0x7c00) continue;
    CHECK(cpuk::float_to_half(cpuk::half_to_float(h)) == h);
  }
  CHECK(std::isnan(cpuk::half_to_float(cpuk::float_to_half(NAN))));
  CHECK(std::isnan(cpuk::bf16_to_float(cpuk::float_to_bf16(NAN))));
  CHECK(cpuk::float_to_half(1.f + 1.f / 2048.f) == 0x3c00);  // tie rounds to even
}

// New K/V for the given slots, with padded token rows.
struct NewKv {
  Tensor k, v;
  std::vector<int64_t> slots;
  int64_t ts;
  NewKv(const HostCache& c, std::mt19937& rng, size_t n) {
    ts = int64_t(c.desc.num_kv_heads) * c.desc.head_dim + 8;
    k = Tensor(c.desc.dtype, size_t(ts) * n);
    v = Tensor(c.desc.dtype, size_t(ts) * n);
    k.fill_random(rng);
    v.fill_random(rng);
    const int64_t total = int64_t(c.desc.num_blocks) * c.desc.block_size;
    std::vector<int64_t> all(static_cast<size_t>(total));
    for (int64_t i = 0; i < total; ++i) all[size_t(i)] = i;
    std::shuffle(all.begin(), all.end(), rng);
    for (size_t i = 0; i < n; ++i) slots.push_back(i % 5 == 3 ? -1 : all[i]);
  }
  kvb_write_kv_args args(const void* kp, const void* vp, const int64_t* sp) const {
    kvb_write_kv_args a = write_args(slots.size(), kp, vp, sp);
    a.key_token_stride = ts;
    a.value_token_stride = ts;
    return a;
  }
};

void test_write_kv_cpu() {
  std::mt19937 rng(1);
  for (uint32_t dt : {KVB_DTYPE_FP16, KVB_DTYPE_BF16, KVB_DTYPE_FP32}) {
    HostCache c(dt, 6, 16, 2, 64, 0, 8, 16);  // padded token and block strides
    c.k.poison();
    c.v.poison();
    NewKv n(c, rng, 40);
    kvb_write_kv_args a = n.args(n.k.data(), n.v.data(), n.slots.data());
    CHECK_OK(kvb_write_kv(&c.desc, &a, nullptr));
    std::vector<bool> written(c.k.n, false);
    int bad = 0;
    for (size_t i = 0; i < n.slots.size(); ++i) {
      if (n.slots[i] < 0) continue;
      const int64_t b = n.slots[i] / 16, t = n.slots[i] % 16;
      for (uint32_t h = 0; h < 2; ++h)
        for (uint32_t d = 0; d < 64; ++d) {
          const size_t o = c.offset(b, t, h, d), src = size_t(int64_t(i) * n.ts + h * 64 + d);
          written[o] = true;
          bad += c.k.get(o) != n.k.get(src) || c.v.get(o) != n.v.get(src);
        }
    }
    for (size_t o = 0; o < c.k.n; ++o)
      if (!written[o]) bad += !std::isnan(c.k.get(o)) || !std::isnan(c.v.get(o));
    CHECK(bad == 0);
  }
}

// Block contents of layer copies equal after copy/swap.
bool same_block(const HostCache& a, int64_t ba, const HostCache& b, int64_t bb) {
  for (uint32_t t = 0; t < a.desc.block_size; ++t)
    for (uint32_t h = 0; h < a.desc.num_kv_heads; ++h)
      for (uint32_t d = 0; d < a.desc.head_dim; ++d) {
        const size_t oa = a.offset(ba, t, h, d), ob = b.offset(bb, t, h, d);
        if (memcmp(static_cast<const char*>(a.k.data()) + oa * esize(a.desc.dtype),
                   static_cast<const char*>(b.k.data()) + ob * esize(a.desc.dtype), esize(a.desc.dtype)) ||
            memcmp(static_cast<const char*>(a.v.data()) + oa * esize(a.desc.dtype),
                   static_cast<const char*>(b.v.data()) + ob * esize(a.desc.dtype), esize(a.desc.dtype)))
          return false;
      }
  return true;
}

void test_copy_blocks_cpu() {
  std::mt19937 rng(2);
  std::vector<HostCache> layers, before;
  for (int l = 0; l < 3; ++l) {
    layers.emplace_back(KVB_DTYPE_BF16, 10, 8, 2, 64);
    layers.back().k.fill_random(rng);
    layers.back().v.fill_random(rng);
  }
  before = layers;
  for (auto& c : before) c.desc.k = c.k.data(), c.desc.v = c.v.data();
  std::vector<kvb_cache_desc> descs;
  for (auto& c : layers) descs.push_back(c.desc);
  const int32_t pairs[] = {1, 5, 2, 6, 3, 7, 9, 0};
  CHECK_OK(kvb_copy_blocks(descs.data(), descs.size(), pairs, 4, nullptr));
  for (int l = 0; l < 3; ++l) {
    for (int i = 0; i < 4; ++i) CHECK(same_block(layers[size_t(l)], pairs[2 * i + 1], before[size_t(l)], pairs[2 * i]));
    for (int b : {4, 8}) CHECK(same_block(layers[size_t(l)], b, before[size_t(l)], b));
  }
}

// A swap large enough (> 4 MiB moved) for the non-temporal copy, with runs of consecutive pairs that
// are merged, into a dense cache and into a padded one (per-block copies).
void test_swap_blocks_cpu_large() {
  std::mt19937 rng(4);
  HostCache src(KVB_DTYPE_FP16, 96, 16, 8, 128);  // 32 KiB blocks
  src.k.fill_random(rng);
  src.v.fill_random(rng);
  std::vector<int32_t> pairs;
  for (int32_t i = 0; i < 64; ++i) pairs.insert(pairs.end(), {i, 100 + i});  // one run of 64
  for (int32_t i = 64; i < 96; ++i) pairs.insert(pairs.end(), {i, 95 - i + 64 + 200});  // reversed: no runs
  for (int64_t pad : {int64_t(0), int64_t(24)}) {
    HostCache dst(KVB_DTYPE_FP16, 300, 16, 8, 128, 0, 0, pad);
    dst.k.poison();
    dst.v.poison();
    CHECK_OK(kvb_swap_blocks(&src.desc, &dst.desc, 1, pairs.data(), pairs.size() / 2, KVB_SWAP_AUTO, nullptr));
    for (size_t i = 0; i < pairs.size() / 2; ++i) CHECK(same_block(dst, pairs[2 * i + 1], src, pairs[2 * i]));
    CHECK(std::isnan(dst.k.get(dst.offset(99, 0, 0, 0))) && std::isnan(dst.v.get(dst.offset(164, 15, 7, 127))));
  }
}

void test_swap_blocks_cpu_strided() {
  std::mt19937 rng(3);
  HostCache src(KVB_DTYPE_FP16, 8, 16, 4, 64);
  src.k.fill_random(rng);
  src.v.fill_random(rng);
  // Destination in HND layout ([block, head, token, dim]) with padded blocks.
  HostCache dst(KVB_DTYPE_FP16, 12, 16, 4, 64);
  dst.desc.token_stride = 64;
  dst.desc.head_stride = 16 * 64;
  dst.desc.block_stride = 4 * 16 * 64 + 32;
  dst.k = Tensor(KVB_DTYPE_FP16, size_t(12 * dst.desc.block_stride));
  dst.v = Tensor(KVB_DTYPE_FP16, size_t(12 * dst.desc.block_stride));
  dst.desc.k = dst.k.data();
  dst.desc.v = dst.v.data();
  const int32_t pairs[] = {0, 11, 1, 3, 2, 4, 7, 0};
  for (uint32_t flags : {KVB_SWAP_AUTO, KVB_SWAP_USE_MEMCPY}) {
    dst.k.poison();
    dst.v.poison();
    CHECK_OK(kvb_swap_blocks(&src.desc, &dst.desc, 1, pairs, 4, flags, nullptr));
    for (int i = 0; i < 4; ++i) CHECK(same_block(dst, pairs[2 * i + 1], src, pairs[2 * i]));
  }
}

void test_cache_alloc_cpu() {
  kvb_cache_desc d = kvbt_cache(KVB_DTYPE_FP32, nullptr, nullptr, 4, 16, 2, 64);
  CHECK_OK(kvb_cache_alloc(&d));
  CHECK(d.k && d.v && d.alloc_kind != KVB_ALLOC_NONE);
  CHECK(d.block_stride == 16 * 2 * 64 && d.token_stride == 128 && d.head_stride == 64);
  memset(d.k, 0, 4 * 16 * 128 * 4);
  CHECK_STATUS(kvb_cache_alloc(&d), KVB_ERR_INVALID_ARGUMENT);  // already holds memory
  CHECK_OK(kvb_cache_free(&d));
  CHECK(d.k == nullptr && d.v == nullptr);
  CHECK_STATUS(kvb_cache_free(&d), KVB_ERR_INVALID_ARGUMENT);  // caller-owned / already freed
  CHECK_STATUS(kvb_cache_alloc(nullptr), KVB_ERR_INVALID_ARGUMENT);
  d.head_dim = 0;
  CHECK_STATUS(kvb_cache_alloc(&d), KVB_ERR_INVALID_ARGUMENT);
}

void test_validation_errors() {
  HostCache c(KVB_DTYPE_FP16, 4, 16, 2, 64);
  std::vector<int64_t> slots = {0, 1};
  Tensor kv(KVB_DTYPE_FP16, 2 * 2 * 64);
  const kvb_write_kv_args w = write_args(2, kv.data(), kv.data(), slots.data());
  CHECK_OK(kvb_write_kv(&c.desc, &w, nullptr));
  CHECK_STATUS(kvb_write_kv(nullptr, &w, nullptr), KVB_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvb_write_kv(&c.desc, nullptr, nullptr), KVB_ERR_INVALID_ARGUMENT);
  kvb_cache_desc d = c.desc;
  d.dtype = 7;
  CHECK_STATUS(kvb_write_kv(&d, &w, nullptr), KVB_ERR_INVALID_ARGUMENT);
  d = c.desc;
  d.k = nullptr;
  CHECK_STATUS(kvb_write_kv(&d, &w, nullptr), KVB_ERR_INVALID_ARGUMENT);
  d = c.desc;
  d.block_size = 12;
  CHECK_STATUS(kvb_write_kv(&d, &w, nullptr), KVB_ERR_INVALID_ARGUMENT);
  d = c.desc;
  d.struct_size = 8;
  CHECK_STATUS(kvb_write_kv(&d, &w, nullptr), KVB_ERR_INVALID_ARGUMENT);
  d = c.desc;
  d.head_stride = 32;  // heads overlap
  CHECK_STATUS(kvb_write_kv(&d, &w, nullptr), KVB_ERR_INVALID_ARGUMENT);
  d = c.desc;
  d.token_stride = -1;
  CHECK_STATUS(kvb_write_kv(&d, &w, nullptr), KVB_ERR_INVALID_ARGUMENT);
  kvb_write_kv_args w2 = w;
  w2.key = nullptr;
  CHECK_STATUS(kvb_write_kv(&c.desc, &w2, nullptr), KVB_ERR_INVALID_ARGUMENT);
  w2 = w;
  w2.slot_mapping = nullptr;
  CHECK_STATUS(kvb_write_kv(&c.desc, &w2, nullptr), KVB_ERR_INVALID_ARGUMENT);
  slots[1] = 64;  // 4 blocks * 16 slots
  CHECK_STATUS(kvb_write_kv(&c.desc, &w, nullptr), KVB_ERR_INVALID_ARGUMENT);
  slots[1] = -2;
  CHECK_STATUS(kvb_write_kv(&c.desc, &w, nullptr), KVB_ERR_INVALID_ARGUMENT);
  slots[1] = -1;
  CHECK_OK(kvb_write_kv(&c.desc, &w, nullptr));

  // Attention arguments.
  Tensor q(KVB_DTYPE_FP16, 4 * 64), out(KVB_DTYPE_FP16, 4 * 64);
  std::vector<int32_t> table = {0, 1, 2, 3}, lens = {20};
  kvb_attention_args a;
  kvb_attention_args_init(&a);
  set_paged(a, 1, 4, 4, q.data(), out.data(), table.data(), lens.data());
  CHECK_OK(kvb_paged_attention(&c.desc, &a, nullptr));
  kvb_attention_args b = a;
  b.num_q_heads = 3;
  CHECK_STATUS(kvb_paged_attention(&c.desc, &b, nullptr), KVB_ERR_INVALID_ARGUMENT);
  b = a;
  b.q = nullptr;
  CHECK_STATUS(kvb_paged_attention(&c.desc, &b, nullptr), KVB_ERR_INVALID_ARGUMENT);
  b = a;
  b.block_tables = nullptr;
  CHECK_STATUS(kvb_paged_attention(&c.desc, &b, nullptr), KVB_ERR_INVALID_ARGUMENT);
  b = a;
  b.scale = NAN;
  CHECK_STATUS(kvb_paged_attention(&c.desc, &b, nullptr), KVB_ERR_INVALID_ARGUMENT);
  b = a;
  b.sink_tokens = 4;  // sinks need a window
  CHECK_STATUS(kvb_paged_attention(&c.desc, &b, nullptr), KVB_ERR_INVALID_ARGUMENT);
  d = c.desc;
  d.head_dim = 96;
  d.head_stride = d.token_stride = d.block_stride = 0;
  CHECK_STATUS(kvb_paged_attention(&d, &a, nullptr), KVB_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvb_last_error(), "head_dim 96") != nullptr);
  size_t ws = 0;
  CHECK_STATUS(kvb_paged_attention_workspace_size(&c.desc, &a, nullptr), KVB_ERR_INVALID_ARGUMENT);
  table[1] = 4;  // out of range, inside the used range (tokens 16..19)
  CHECK_STATUS(kvb_paged_attention(&c.desc, &a, nullptr), KVB_ERR_INVALID_ARGUMENT);
  table[1] = 1;
  // Workspace: a long table needs one; too small is refused.
  HostCache big(KVB_DTYPE_FP16, 64, 16, 2, 64);
  std::vector<int32_t> big_table(64);
  for (int i = 0; i < 64; ++i) big_table[size_t(i)] = i;
  lens[0] = 1000;
  b = a;
  b.max_blocks_per_seq = 64;
  b.block_tables = big_table.data();
  CHECK_OK(kvb_paged_attention_workspace_size(&big.desc, &b, &ws));
  CHECK(ws > 0);
  std::vector<float> work(ws / 4);
  b.workspace = work.data();
  b.workspace_size = ws - 4;
  CHECK_STATUS(kvb_paged_attention(&big.desc, &b, nullptr), KVB_ERR_BUFFER_TOO_SMALL);
  b.workspace_size = ws;
  CHECK_OK(kvb_paged_attention(&big.desc, &b, nullptr));
  b.workspace = nullptr;
  CHECK_STATUS(kvb_paged_attention(&big.desc, &b, nullptr), KVB_ERR_INVALID_ARGUMENT);
  lens[0] = 20;

  // copy / swap arguments.
  const int32_t ok_pairs[] = {0, 1};
  CHECK_OK(kvb_copy_blocks(&c.desc, 1, ok_pairs, 1, nullptr));
  CHECK_OK(kvb_copy_blocks(nullptr, 0, nullptr, 0, nullptr));
  CHECK_STATUS(kvb_copy_blocks(nullptr, 1, ok_pairs, 1, nullptr), KVB_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvb_copy_blocks(&c.desc, 1, nullptr, 1, nullptr), KVB_ERR_INVALID_ARGUMENT);
  const int32_t bad_pairs[] = {0, 4};
  CHECK_STATUS(kvb_copy_blocks(&c.desc, 1, bad_pairs, 1, nullptr), KVB_ERR_INVALID_ARGUMENT);
  const int32_t dup_pairs[] = {0, 2, 1, 2};
  CHECK_STATUS(kvb_copy_blocks(&c.desc, 1, dup_pairs, 2, nullptr), KVB_ERR_INVALID_ARGUMENT);
  const int32_t chain_pairs[] = {0, 1, 1, 2};
  CHECK_STATUS(kvb_copy_blocks(&c.desc, 1, chain_pairs, 2, nullptr), KVB_ERR_INVALID_ARGUMENT);
  kvb_cache_desc two[2] = {c.desc, big.desc};
  CHECK_STATUS(kvb_copy_blocks(two, 2, ok_pairs, 1, nullptr), KVB_ERR_INVALID_ARGUMENT);  // num_blocks differ
  HostCache other(KVB_DTYPE_FP32, 4, 16, 2, 64);
  CHECK_STATUS(kvb_swap_blocks(&c.desc, &other.desc, 1, ok_pairs, 1, 0, nullptr), KVB_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvb_swap_blocks(&c.desc, &big.desc, 1, ok_pairs, 1, 9, nullptr), KVB_ERR_INVALID_ARGUMENT);
  CHECK_OK(kvb_swap_blocks(&c.desc, &big.desc, 1, ok_pairs, 1, 0, nullptr));
}

// A CUDA descriptor: UNSUPPORTED without CUDA in the build, DEVICE without a driver or device.
void test_cuda_descriptor_without_gpu() {
  HostCache c(KVB_DTYPE_FP16, 4, 16, 2, 64);
  kvb_cache_desc d = c.desc;
  d.device_type = KVB_DEVICE_CUDA;
  std::vector<int64_t> slots = {0};
  Tensor kv(KVB_DTYPE_FP16, 2 * 64);
  kvb_write_kv_args w;
  kvb_write_kv_args_init(&w);
  w.num_tokens = 1;
  w.key = w.value = kv.data();
  w.slot_mapping = slots.data();
  int32_t n = -1;
  const kvb_status count = kvb_cuda_device_count(&n);
  const kvb_status want = count == KVB_ERR_UNSUPPORTED ? KVB_ERR_UNSUPPORTED : KVB_ERR_DEVICE;
  CHECK(n == 0);
  CHECK_STATUS(kvb_write_kv(&d, &w, nullptr), want);
  const int32_t pairs[] = {0, 1};
  CHECK_STATUS(kvb_copy_blocks(&d, 1, pairs, 1, nullptr), want);
  CHECK_STATUS(kvb_swap_blocks(&d, &c.desc, 1, pairs, 1, 0, nullptr), want);
  kvb_cache_desc a = kvbt_cache(KVB_DTYPE_FP16, nullptr, nullptr, 2, 16, 1, 64);
  a.device_type = KVB_DEVICE_CUDA;
  CHECK_STATUS(kvb_cache_alloc(&a), want);
  CHECK(a.k == nullptr);
}

#if KVB_WITH_CUDA
namespace du = kvb::kern::devutil;

void test_cuda_write_kv() {
  std::mt19937 rng(11);
  for (uint32_t dt : {KVB_DTYPE_FP16, KVB_DTYPE_BF16, KVB_DTYPE_FP32}) {
    HostCache cpu(dt, 6, 16, 2, 128, 0, 8, 16);
    cpu.k.poison();
    cpu.v.poison();
    HostCache gpu = cpu;
    gpu.desc.k = gpu.k.data();
    gpu.desc.v = gpu.v.data();
    DeviceCache dc(cpu);
    NewKv n(cpu, rng, 50);
    n.slots[7] = 6 * 16 + 3;  // out of range: skipped on CUDA (the CPU refuses it)
    DeviceBuffer k(n.k.data(), n.k.bytes()), v(n.v.data(), n.v.bytes()), s(n.slots.data(), n.slots.size() * 8);
    kvb_write_kv_args a = n.args(k.p, v.p, static_cast<int64_t*>(s.p));
    CHECK_OK(kvb_write_kv(&dc.desc, &a, nullptr));
    du::synchronize();
    dc.to_host(gpu);
    n.slots[7] = -1;
    a = n.args(n.k.data(), n.v.data(), n.slots.data());
    CHECK_OK(kvb_write_kv(&cpu.desc, &a, nullptr));
    CHECK(memcmp(cpu.k.data(), gpu.k.data(), cpu.k.bytes()) == 0);
    CHECK(memcmp(cpu.v.data(), gpu.v.data(), cpu.v.bytes()) == 0);
  }
}

void test_cuda_copy_and_swap() {
  std::mt19937 rng(12);
  const int32_t pairs[] = {1, 5, 2, 6, 3, 7, 9, 0};
  std::vector<HostCache> cpu;
  for (int l = 0; l < 3; ++l) {
    cpu.emplace_back(KVB_DTYPE_FP16, 10, 16, 2, 128);
    cpu.back().k.fill_random(rng);
    cpu.back().v.fill_random(rng);
  }
  std::vector<std::unique_ptr<DeviceCache>> dev;
  std::vector<kvb_cache_desc> cd, dd;
  for (auto& c : cpu) {
    dev.emplace_back(new DeviceCache(c));
    dd.push_back(dev.back()->desc);
    cd.push_back(c.desc);
  }
  CHECK_OK(kvb_copy_blocks(dd.data(), 3, pairs, 4, nullptr));
  CHECK_OK(kvb_copy_blocks(cd.data(), 3, pairs, 4, nullptr));
  du::synchronize();
  for (int l = 0; l < 3; ++l) {
    HostCache got = cpu[size_t(l)];
    dev[size_t(l)]->to_host(got);
    CHECK(memcmp(got.k.data(), cpu[size_t(l)].k.data(), got.k.bytes()) == 0);
    CHECK(memcmp(got.v.data(), cpu[size_t(l)].v.data(), got.v.bytes()) == 0);
  }
  // Swap out to page-locked host caches and back, with both methods.
  for (uint32_t flags : {KVB_SWAP_AUTO, KVB_SWAP_USE_MEMCPY, KVB_SWAP_USE_KERNEL}) {
    std::vector<kvb_cache_desc> host(3);
    for (auto& h : host) {
      kvb_cache_desc_init(&h);
      h.dtype = KVB_DTYPE_FP16;
      h.num_blocks = 12;
      h.block_size = 16;
      h.num_kv_heads = 2;
      h.head_dim = 128;
      CHECK_OK(kvb_cache_alloc(&h));
      CHECK(h.alloc_kind == KVB_ALLOC_HOST_PINNED);
    }
    const int32_t out_pairs[] = {0, 11, 1, 3, 2, 4, 7, 0};
    CHECK_OK(kvb_swap_blocks(dd.data(), host.data(), 3, out_pairs, 4, flags, nullptr));
    du::synchronize();
    for (int l = 0; l < 3; ++l) {
      HostCache view = cpu[size_t(l)];
      view.desc = host[size_t(l)];
      view.k = Tensor(KVB_DTYPE_FP16, 12 * 16 * 2 * 128);
      view.v = Tensor(KVB_DTYPE_FP16, 12 * 16 * 2 * 128);
      memcpy(view.k.data(), host[size_t(l)].k, view.k.bytes());
      memcpy(view.v.data(), host[size_t(l)].v, view.v.bytes());
      for (int i = 0; i < 4; ++i) CHECK(same_block(view, out_pairs[2 * i + 1], cpu[size_t(l)], out_pairs[2 * i]));
    }
    const int32_t in_pairs[] = {11, 8, 3, 9};
    CHECK_OK(kvb_swap_blocks(host.data(), dd.data(), 3, in_pairs, 2, flags, nullptr));
    du::synchronize();
    for (int l = 0; l < 3; ++l) {
      HostCache got = cpu[size_t(l)];
      dev[size_t(l)]->to_host(got);
      CHECK(same_block(got, 8, cpu[size_t(l)], 0));
      CHECK(same_block(got, 9, cpu[size_t(l)], 1));
    }
    for (auto& h : host) CHECK_OK(kvb_cache_free(&h));
  }
  // Pageable host memory: the kernel method is refused, memcpy works.
  HostCache pageable(KVB_DTYPE_FP16, 10, 16, 2, 128);
  CHECK_STATUS(kvb_swap_blocks(dd.data(), &pageable.desc, 1, pairs, 1, KVB_SWAP_USE_KERNEL, nullptr),
               KVB_ERR_INVALID_ARGUMENT);
  CHECK_OK(kvb_swap_blocks(dd.data(), &pageable.desc, 1, pairs, 1, KVB_SWAP_USE_MEMCPY, nullptr));
  du::synchronize();
  CHECK(same_block(pageable, 5, cpu[0], 5));
}
#endif

}  // namespace

int main() {
  RUN_TEST(test_fp16_bf16_conversion);
  RUN_TEST(test_write_kv_cpu);
  RUN_TEST(test_copy_blocks_cpu);
  RUN_TEST(test_swap_blocks_cpu_strided);
  RUN_TEST(test_swap_blocks_cpu_large);
  RUN_TEST(test_cache_alloc_cpu);
  RUN_TEST(test_validation_errors);
  if (cuda_devices() == 0) {
    RUN_TEST(test_cuda_descriptor_without_gpu);
#if KVB_WITH_CUDA
    SKIP_TEST(test_cuda_write_kv, "no CUDA device");
    SKIP_TEST(test_cuda_copy_and_swap, "no CUDA device");
#else
    SKIP_TEST(test_cuda_write_kv, "built without CUDA");
#endif
  } else {
#if KVB_WITH_CUDA
    RUN_TEST(test_cuda_write_kv);
    RUN_TEST(test_cuda_copy_and_swap);
#endif
  }
  TEST_SUMMARY();
}
