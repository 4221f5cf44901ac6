// C boundary: descriptor / argument initialisers, cache allocation helpers, CUDA device query.
#include <cstring>

#include "../libkvblock/capi_guard.h"
#include "backends.h"
#include "validate.h"

using namespace kvb;
using namespace kvb::kern;

extern "C" {

KVB_API void kvb_cache_desc_init(kvb_cache_desc* desc) {
  if (!desc) return;
  std::memset(desc, 0, sizeof *desc);
  desc->struct_size = sizeof *desc;
  desc->device_type = KVB_DEVICE_CPU;
  desc->dtype = KVB_DTYPE_FP16;
}

KVB_API void kvb_write_kv_args_init(kvb_write_kv_args* args) {
  if (!args) return;
  std::memset(args, 0, sizeof *args);
  args->struct_size = sizeof *args;
}

KVB_API void kvb_attention_args_init(kvb_attention_args* args) {
  if (!args) return;
  std::memset(args, 0, sizeof *args);
  args->struct_size = sizeof *args;
}

KVB_API kvb_status kvb_cuda_device_count(int32_t* count) {
  return guarded([&] {
    KVB_REQUIRE_ARG(count != nullptr, "count is NULL");
    *count = 0;
    if (!cuda::built()) fail(Code::unsupported, "libkvblock was built without CUDA");
    *count = cuda::device_count();
  });
}

KVB_API kvb_status kvb_cache_alloc(kvb_cache_desc* desc) {
  return guarded([&] {
    KVB_REQUIRE_ARG(desc != nullptr, "desc is NULL");
    KVB_REQUIRE_ARG(desc->struct_size >= sizeof(kvb_cache_desc),
                    "desc: struct_size %u is smaller than %zu (call kvb_cache_desc_init)", desc->struct_size,
                    sizeof(kvb_cache_desc));
    KVB_REQUIRE_ARG(desc->k == nullptr && desc->v == nullptr && desc->alloc_kind == KVB_ALLOC_NONE,
                    "desc already holds memory (k, v or alloc_kind set)");
    KVB_REQUIRE_ARG(desc->block_stride == 0 && desc->token_stride == 0 && desc->head_stride == 0,
                    "desc: kvb_cache_alloc makes dense caches; leave the strides 0");
    kvb_cache_desc shape = *desc;
    shape.k = shape.v = reinterpret_cast<void*>(uintptr_t(256));  // placeholders: validate the shape only
    Cache c = read_cache(&shape, "desc");
    require_backend(c, "desc");
    const size_t bytes = size_t(c.num_blocks) * size_t(c.block_stride) * c.elem();
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
        fail(Code::out_of_memory, "cannot allocate 2 x %zu bytes of host memory", bytes);
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
    KVB_REQUIRE_ARG(desc != nullptr, "desc is NULL");
    KVB_REQUIRE_ARG(desc->struct_size >= sizeof(kvb_cache_desc),
                    "desc: struct_size %u is smaller than %zu (call kvb_cache_desc_init)", desc->struct_size,
                    sizeof(kvb_cache_desc));
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
