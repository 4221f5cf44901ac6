// write_kv (reshape_and_cache): the validated form of kvb_write_kv_args, its checker and the two back
// ends (kernels/write_kv/write_kv_capi.cpp is the C boundary).
#pragma once
#include <cstdint>

#include "../../abi/kvblock.h"
#include "../common/types.h"

namespace kvb {
namespace kern {

struct WriteKv {
  int64_t num_tokens = 0;
  const void* key = nullptr;
  const void* value = nullptr;
  int64_t key_token_stride = 0, key_head_stride = 0, value_token_stride = 0, value_head_stride = 0;
  const int64_t* slots = nullptr;
  Dtype input_dtype = Dtype::f16;  // dtype of key/value: the cache's, or fp16/bf16/fp32 for an fp8 cache
};

// Checks args against the cache (validate.cpp); the slots are checked by the back ends.
WriteKv read_write_kv(const Cache& c, const kvb_write_kv_args* args);

namespace cpu {
void write_kv(const Cache& c, const WriteKv& a);  // checks every slot before it writes
}
namespace cuda {
void write_kv(const Cache& c, const WriteKv& a, void* stream);  // unsupported without nvcc
}

}  // namespace kern
}  // namespace kvb
