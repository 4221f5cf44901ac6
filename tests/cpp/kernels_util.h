// Helpers shared by the kernel tests: host tensors of any kvb dtype, random fill, a CPU cache
// descriptor over host memory, CUDA mirrors of host buffers, and the device-count probe for SKIP.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "../../kernels/common/amx_cpu.h"
#include "../../kernels/common/convert_cpu.h"
#include "../../kernels/common/simd_cpu.h"
#include "../../kernels/common/types.h"
#include "c/kvbt_common.h"
#include "harness.h"
#if KVB_WITH_CUDA
#include "../support/devutil.h"
#endif

namespace kt {

using kvb::kern::Dtype;
namespace cpuk = kvb::kern::cpu;

inline Dtype to_dtype(uint32_t d) { return static_cast<Dtype>(d); }
inline size_t esize(uint32_t d) { return kvb::kern::dtype_size(to_dtype(d)); }
inline const char* dname(uint32_t d) {
  switch (d) {
    case KVB_DTYPE_FP16: return "fp16";
    case KVB_DTYPE_BF16: return "bf16";
    case KVB_DTYPE_FP32: return "fp32";
    case KVB_DTYPE_FP8_E4M3: return "fp8_e4m3";
    default: return "fp8_e5m2";
  }
}

// A host buffer of n elements of dtype d (16-byte aligned).
struct Tensor {
  uint32_t dtype = KVB_DTYPE_FP32;
  size_t n = 0;
  std::vector<uint64_t> storage;
  Tensor() = default;
  Tensor(uint32_t d, size_t count) : dtype(d), n(count), storage((count * esize(d) + 15) / 8 + 2, 0) {}
  void* data() { return storage.data(); }
  const void* data() const { return storage.data(); }
  size_t bytes() const { return n * esize(dtype); }
  float get(size_t i) const { return cpuk::load_elem(data(), to_dtype(dtype), int64_t(i)); }
  void set(size_t i, float x) { cpuk::store_elem(data(), to_dtype(dtype), int64_t(i), x); }
  void fill_random(std::mt19937& rng, float lo = -1.f, float hi = 1.f) {
    std::uniform_real_distribution<float> u(lo, hi);
    for (size_t i = 0; i < n; ++i) set(i, u(rng));
  }
  void poison() { std::memset(storage.data(), 0xff, storage.size() * 8); }  // NaN in every dtype
};

// A CPU cache (K and V) of the given shape over two Tensors, with optional padded strides.
struct HostCache {
  Tensor k, v;
  kvb_cache_desc desc;
  HostCache(uint32_t dtype, uint32_t num_blocks, uint32_t block_size, uint32_t heads, uint32_t head_dim,
            int64_t head_pad = 0, int64_t token_pad = 0, int64_t block_pad = 0) {
    kvb_cache_desc_init(&desc);
    desc.dtype = dtype;
    desc.num_blocks = num_blocks;
    desc.block_size = block_size;
    desc.num_kv_heads = heads;
    desc.head_dim = head_dim;
    desc.head_stride = head_dim + head_pad;
    desc.token_stride = int64_t(heads) * desc.head_stride + token_pad;
    desc.block_stride = int64_t(block_size) * desc.token_stride + block_pad;
    const size_t total = size_t(num_blocks) * size_t(desc.block_stride);
    k = Tensor(dtype, total);
    v = Tensor(dtype, total);
    desc.k = k.data();
    desc.v = v.data();
  }
  size_t offset(int64_t block, int64_t tok, int64_t head, int64_t d) const {
    return size_t(block * desc.block_stride + tok * desc.token_stride + head * desc.head_stride + d);
  }
};

// Runs body(isa) with each CPU vector path this machine supports forced in turn, AMX tiles off, then
// once more on the widest path with AMX on where the CPU and OS allow it (only the default path, AMX as
// it was, when default_only); then restores the default path and AMX.
template <class Body>
void on_each_isa(Body body, bool default_only = false) {
  namespace simd = kvb::kern::cpu::simd;
  namespace amx = kvb::kern::cpu::amx;
  const simd::Isa initial = simd::isa();
  const bool amx_start = amx::active();
  for (int i = 0; i < simd::kNumIsas; ++i) {
    if ((default_only && simd::Isa(i) != initial) || !simd::force_isa(simd::Isa(i))) continue;
    if (!default_only) amx::force(false);
    body(simd::Isa(i));
  }
  if (!default_only && amx::force(true)) body(simd::isa());
  simd::force_isa(initial);
  amx::force(amx_start);
}

// The CPU path the kernels take now, for messages: "avx512", "avx512bf16+amx", ...
inline std::string path_name() {
  namespace cpu = kvb::kern::cpu;
  return std::string(cpu::simd::isa_name(cpu::simd::isa())) + (cpu::amx::active() ? "+amx" : "");
}

// The 27 dtype x head dim x GQA ratio shapes the decode and prefill tests sweep, appended to out as
// C{dtype, head_dim, block_size, kv_heads, gqa ratio, window, sink, soft_cap, flag, seed}: block sizes
// 8 / 16 / 32 in turn, the window window(i) on half of them with sinks on some, a soft cap on a fifth,
// the flag on every other one, seeds from seed0.
template <class C, class Window>
void sweep_shapes(std::vector<C>& out, unsigned seed0, Window window) {
  const uint32_t dtypes[] = {KVB_DTYPE_FP16, KVB_DTYPE_BF16, KVB_DTYPE_FP32};
  const uint32_t dims[] = {64, 128, 256};
  const uint32_t groups[] = {1, 4, 8};
  const uint32_t blocks[] = {8, 16, 32};
  unsigned i = 0;
  for (uint32_t dt : dtypes)
    for (uint32_t d : dims)
      for (uint32_t g : groups) {
        C c{dt, d, blocks[i % 3], g == 8 ? 1u : 2u, g, 0, 0, 0.f, (i % 2) == 1, seed0 + i};
        if ((i / 3) % 2 == 1) {
          c.window = window(i);
          c.sink = (i % 4 == 1) ? 5 : 0;
        }
        if (i % 5 == 2) c.soft_cap = 5.f;
        out.push_back(c);
        ++i;
      }
}

// kvb_write_kv of n tokens from key and value (rows at the default stride) to slots.
inline kvb_write_kv_args write_args(size_t n, const void* key, const void* value, const int64_t* slots) {
  kvb_write_kv_args a;
  kvb_write_kv_args_init(&a);
  a.num_tokens = n;
  a.key = key;
  a.value = value;
  a.slot_mapping = slots;
  return a;
}

// The fields kvb_attention_args and kvb_prefill_args share: the batch's shape and its buffers.
template <class Args>
void set_paged(Args& a, uint32_t num_seqs, uint32_t num_q_heads, uint32_t max_blocks, const void* q, void* out,
               const int32_t* tables, const int32_t* lens) {
  KVBT_PAGED_ARGS(a, num_seqs, num_q_heads, max_blocks, q, out, tables, lens);
}

// A call's key mask and soft cap.
template <class Args>
void set_mask(Args& a, float soft_cap, uint32_t window, uint32_t sink) {
  a.logits_soft_cap = soft_cap;
  a.window_tokens = window;
  a.sink_tokens = sink;
}

// Decode and prefill by their arguments' type, so that one template runs either.
inline kvb_status workspace_size(const kvb_cache_desc* c, const kvb_attention_args* a, size_t* ws) {
  return kvb_paged_attention_workspace_size(c, a, ws);
}
inline kvb_status workspace_size(const kvb_cache_desc* c, const kvb_prefill_args* a, size_t* ws) {
  return kvb_prefill_attention_workspace_size(c, a, ws);
}
inline kvb_status attend(const kvb_cache_desc* c, const kvb_attention_args* a, void* stream) {
  return kvb_paged_attention(c, a, stream);
}
inline kvb_status attend(const kvb_cache_desc* c, const kvb_prefill_args* a, void* stream) {
  return kvb_prefill_attention(c, a, stream);
}

// A CPU call with the workspace its query asks for (the call's own workspace fields are replaced).
template <class Args>
void attend_cpu(const kvb_cache_desc& c, Args a) {
  size_t ws = 0;
  CHECK_OK(workspace_size(&c, &a, &ws));
  std::vector<uint64_t> work(ws / 8 + 2);
  a.workspace = ws ? work.data() : nullptr;
  a.workspace_size = ws;
  CHECK_OK(attend(&c, &a, nullptr));
}

inline bool close(double got, double want, uint32_t dtype) {
  const double atol = dtype == KVB_DTYPE_FP32 ? 2e-5 : dtype == KVB_DTYPE_FP16 ? 2e-3 : 1.6e-2;
  const double rtol = dtype == KVB_DTYPE_FP32 ? 2e-5 : dtype == KVB_DTYPE_FP16 ? 4e-3 : 1.6e-2;
  return std::isfinite(got) && std::fabs(got - want) <= atol + rtol * std::fabs(want);
}

// Elements of a poisoned output that no logical index covers (logical[i] false) must still hold the
// NaN poison; returns how many were overwritten (reporting the first few), counting on from `bad`.
inline int padding_overwritten(const Tensor& got, const std::vector<bool>& logical, const char* what, int bad) {
  for (size_t i = 0; i < got.n; ++i)
    if (!logical[i] && !std::isnan(got.get(i)) && bad++ < 3) fprintf(stderr, "  %s: padding element %zu overwritten\n", what, i);
  return bad;
}

// Runs a test that needs a CUDA device, or prints why it is skipped.
#if KVB_WITH_CUDA
#define RUN_CUDA_TEST(fn)                                         \
  do {                                                            \
    if (kt::cuda_devices() > 0) RUN_TEST(fn);                     \
    else SKIP_TEST(fn, "no CUDA device");                         \
  } while (0)
#else
#define RUN_CUDA_TEST(fn) SKIP_TEST(fn, "built without CUDA")
#endif
// Usable CUDA devices in this build (0 without CUDA or driver).
inline int cuda_devices() {
  int32_t n = 0;
  return kvb_cuda_device_count(&n) == KVB_OK ? n : 0;
}

// True when this library was built with CUDA (whether or not a device is usable).
inline bool cuda_built() {
  int32_t n = 0;
  return kvb_cuda_device_count(&n) != KVB_ERR_UNSUPPORTED;
}

#if KVB_WITH_CUDA
// A device copy of a host buffer, freed at scope exit.
struct DeviceBuffer {
  void* p = nullptr;
  size_t bytes = 0;
  DeviceBuffer(const void* host, size_t n) : bytes(n) {
    p = kvb::kern::devutil::device_malloc(n ? n : 16);
    if (host && n) kvb::kern::devutil::copy(p, host, n);
  }
  explicit DeviceBuffer(size_t n) : DeviceBuffer(nullptr, n) {}
  ~DeviceBuffer() { kvb::kern::devutil::device_free(p); }
  void to_host(void* host) const { kvb::kern::devutil::copy(host, p, bytes); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// A CUDA copy of a host cache (K and V): desc is the host descriptor pointed at the device copies.
struct DeviceCache {
  DeviceBuffer k, v;
  kvb_cache_desc desc;
  explicit DeviceCache(const HostCache& h) : k(h.k.data(), h.k.bytes()), v(h.v.data(), h.v.bytes()), desc(h.desc) {
    desc.device_type = KVB_DEVICE_CUDA;
    desc.k = k.p;
    desc.v = v.p;
  }
  void to_host(HostCache& h) const {
    k.to_host(h.k.data());
    v.to_host(h.v.data());
  }
};

// Runs launch(stream): captured on a new stream into a CUDA graph and replayed (graph), or on the
// default stream (nullptr); returns when the device is done.
template <class Launch>
void run_on_device(bool graph, Launch launch) {
  namespace du = kvb::kern::devutil;
  if (!graph) {
    launch(nullptr);
    du::synchronize();
    return;
  }
  void* stream = du::stream_create();
  du::capture_begin(stream);
  launch(stream);
  void* exec = du::capture_end(stream);
  du::graph_launch(exec, stream);
  du::stream_sync(stream);
  du::graph_destroy(exec);
  du::stream_destroy(stream);
}

// A decode or prefill call on a CUDA cache with the workspace its query asks for (the size also in *ws_out
// when given), on the default stream or captured in a CUDA graph (graph); returns when the device is done.
template <class Args>
void attend_cuda(const kvb_cache_desc& c, Args a, bool graph, size_t* ws_out = nullptr) {
  size_t ws = 0;
  CHECK_OK(workspace_size(&c, &a, &ws));
  if (ws_out) *ws_out = ws;
  DeviceBuffer work(ws);
  a.workspace = work.p;
  a.workspace_size = ws;
  run_on_device(graph, [&](void* stream) { CHECK_OK(attend(&c, &a, stream)); });
}
#endif

}  // namespace kt
