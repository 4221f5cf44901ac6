// C boundary of the cache descriptor: its initialiser, cache allocation, the CUDA device query and kernel
// faults. (Each kernel's argument initialiser lives beside its kernel: write_kv_capi.cpp, decode_capi.cpp,
// prefill_capi.cpp.)
#include <algorithm>
#include <cstddef>
#include <cstring>

#include "../../libkvblock/capi_guard.h"
#include "../../libkvblock/capi_struct.h"
#include "cache.h"
#include "validate.h"

using namespace kvb;
using namespace kvb::kern;

namespace {
// The size of the KVB_0.1 layout: the offset of the first field added after it.
constexpr size_t kCacheDescSize01 = offsetof(kvb_cache_desc, k_scale);
static_assert(kCacheDescSize01 == 80, "kvb_cache_desc of KVB_0.1 is 80 bytes");
}  // namespace

extern "C" {

KVB_API void kvb_cache_desc_init(kvb_cache_desc* desc) {
  if (!desc) return;
  std::memset(desc, 0, sizeof *desc);
  desc->struct_size = sizeof *desc;
  desc->device_type = KVB_DEVICE_CPU;
  desc->dtype = KVB_DTYPE_FP16;
  desc->k_scale = 1.f;
  desc->v_scale = 1.f;
}

// The KVB_0.1 _init of kvb_cache_desc, which grew with fp8 caches (abi/ABI.md, "Symbol versions"): a
// binary linked against KVB_0.1 binds this, which writes only the 0.1 layout. (A name outside kvb_*, so
// that only its versioned alias is exported.)
KVB_API void kvbv01_cache_desc_init(kvb_cache_desc* desc) {
  if (!desc) return;
  std::memset(desc, 0, kCacheDescSize01);
  desc->struct_size = uint32_t(kCacheDescSize01);
  desc->device_type = KVB_DEVICE_CPU;
  desc->dtype = KVB_DTYPE_FP16;
}
__asm__(".symver kvbv01_cache_desc_init, kvb_cache_desc_init@KVB_0.1");

KVB_API kvb_status kvb_cuda_device_count(int32_t* count) {
  return guarded([&] {
    KVB_REQUIRE_ARG(count != nullptr, "count is NULL");
    *count = 0;
    if (!cuda::built()) fail(Code::unsupported, "libkvblock was built without CUDA");
    *count = cuda::device_count();
  });
}

KVB_API void kvb_kernel_fault_init(kvb_kernel_fault* fault) {
  if (!fault) return;
  std::memset(fault, 0, sizeof *fault);
  fault->struct_size = sizeof *fault;
  fault->index = fault->column = -1;
}

KVB_API kvb_status kvb_cuda_take_fault(int32_t device_index, void* stream, kvb_kernel_fault* fault) {
  return guarded([&] {
    require_struct(fault, sizeof(kvb_kernel_fault), "fault", "kvb_kernel_fault_init");
    KVB_REQUIRE_ARG(device_index >= 0, "device_index %d is negative", device_index);
    if (!cuda::built()) fail(Code::unsupported, "libkvblock was built without CUDA");
    cuda::check_device(device_index);
    const Fault f = cuda::take_fault(device_index, stream);
    const uint32_t size = fault->struct_size;
    kvb_kernel_fault_init(fault);
    fault->struct_size = size;
    fault->kind = f.kind;
    fault->kernel = f.kernel;
    fault->index = f.index;
    fault->column = f.column;
    fault->value = f.value;
    fault->count = f.count;
    if (f.count == 0 && f.kind == KVB_FAULT_NONE) return;
    const char* kernel = f.kernel == KVB_KERNEL_WRITE_KV          ? "kvb_write_kv"
                         : f.kernel == KVB_KERNEL_PREFILL_ATTENTION ? "kvb_prefill_attention"
                                                                    : "kvb_paged_attention";
    const unsigned long long n = (unsigned long long)f.count;
    switch (f.kind) {
      case KVB_FAULT_SEQ_LEN:
        fail(Code::invalid_argument, "CUDA device %d: %s met seq_lens[%lld] = %lld, not in [0 (prefill: the query rows), "
             "max_blocks_per_seq * block_size] (outputs NaN; first of %llu faulty items since the last check)", device_index, kernel,
             (long long)f.index, (long long)f.value, n);
      case KVB_FAULT_BLOCK_ID:
        fail(Code::invalid_argument, "CUDA device %d: %s met block_tables[%lld][%lld] = %lld, not in [0, num_blocks) "
             "for an attended block (outputs NaN; first of %llu faulty items since the last check)", device_index,
             kernel, (long long)f.index, (long long)f.column, (long long)f.value, n);
      case KVB_FAULT_QUERY_START:
        fail(Code::invalid_argument, "CUDA device %d: %s met query_start[%lld] = %lld, which breaks 0 = query_start[0] "
             "<= ... <= query_start[num_seqs] = total_q_tokens (outputs NaN; first of %llu faulty items since the last "
             "check)", device_index, kernel, (long long)f.index, (long long)f.value, n);
      case KVB_FAULT_SLOT:
        fail(Code::invalid_argument, "CUDA device %d: %s met slot_mapping[%lld] = %lld, neither -1 nor a slot of the "
             "cache (token not written; first of %llu faulty items since the last check)", device_index, kernel,
             (long long)f.index, (long long)f.value, n);
      default:
        fail(Code::invalid_argument, "CUDA device %d: %llu faulty kernel items whose details are still being "
             "recorded by work on another stream (check again after it completes)", device_index, n);
    }
  });
}

KVB_API kvb_status kvb_cache_alloc(kvb_cache_desc* desc) {
  return guarded([&] {
    kvb_cache_desc shape = read_versioned(desc, kCacheDescSize01, kvb_cache_desc_init, "desc", "kvb_cache_desc_init");
    KVB_REQUIRE_ARG(desc->k == nullptr && desc->v == nullptr && desc->alloc_kind == KVB_ALLOC_NONE,
                    "desc already holds memory (k, v or alloc_kind set)");
    KVB_REQUIRE_ARG(desc->block_stride == 0 && desc->token_stride == 0 && desc->head_stride == 0,
                    "desc: kvb_cache_alloc makes dense caches; leave the strides 0");
    shape.k = shape.v = reinterpret_cast<void*>(uintptr_t(256));  // placeholders: validate the shape only
    Cache c = read_cache(&shape, "desc");
    require_backend(c, "desc");
    const size_t bytes = size_t(c.blocks_extent(c.num_blocks)) * c.elem();
    void* k = nullptr;
    void* v = nullptr;
    uint32_t kind;
    if (c.cuda) {
      kind = KVB_ALLOC_CUDA;
      k = cuda::alloc_device(c.device_index, bytes);
      try {
        v = cuda::alloc_device(c.device_index, bytes);
      } catch (...) {
        cuda::free_device(c.device_index, k);
        throw;
      }
    } else if (cuda::built() && cuda::device_count() > 0) {
      kind = KVB_ALLOC_HOST_PINNED;
      k = cuda::alloc_pinned(bytes);
      try {
        v = cuda::alloc_pinned(bytes);
      } catch (...) {
        cuda::free_pinned(k);
        throw;
      }
    } else {
      kind = KVB_ALLOC_HOST;
      k = cpu::alloc_host(bytes);
      v = cpu::alloc_host(bytes);
      if (!k || !v) {
        cpu::free_host(k);
        cpu::free_host(v);
        fail_alloc("the K and V caches in host memory", 2ull * bytes, "2 x %zu bytes", bytes);
      }
    }
    desc->k = k;
    desc->v = v;
    desc->head_stride = c.head_stride;
    desc->token_stride = c.token_stride;
    desc->block_stride = c.block_stride;
    desc->alloc_kind = kind;
  });
}

KVB_API kvb_status kvb_cache_free(kvb_cache_desc* desc) {
  return guarded([&] {
    require_struct(desc, kCacheDescSize01, "desc", "kvb_cache_desc_init");
    switch (desc->alloc_kind) {
      case KVB_ALLOC_CUDA:
        KVB_REQUIRE_ARG(desc->device_type == KVB_DEVICE_CUDA && desc->device_index >= 0,
                        "desc: alloc_kind CUDA on a non-CUDA descriptor");
        cuda::free_device(desc->device_index, desc->k);
        cuda::free_device(desc->device_index, desc->v);
        break;
      case KVB_ALLOC_HOST_PINNED:
        cuda::free_pinned(desc->k);
        cuda::free_pinned(desc->v);
        break;
      case KVB_ALLOC_HOST:
        cpu::free_host(desc->k);
        cpu::free_host(desc->v);
        break;
      default:
        fail(Code::invalid_argument, "desc: alloc_kind %u is not memory from kvb_cache_alloc", desc->alloc_kind);
    }
    desc->k = desc->v = nullptr;
    desc->alloc_kind = KVB_ALLOC_NONE;
  });
}

}  // extern "C"
