// Argument checking shared by the kernel entry points: public structs -> validated internal forms.
// Every function throws kvb::Error(invalid_argument, message naming the bad value) on bad input.
#pragma once
#include "../abi/kvblock.h"
#include "types.h"

namespace kvb {
namespace kern {

// Checks one cache descriptor (`what` names it in messages, e.g. "cache" or "layers[3]").
Cache read_cache(const kvb_cache_desc* desc, const char* what);
// Checks that a CUDA cache can be used here (built with CUDA, device present), else unsupported/device.
void require_backend(const Cache& c, const char* what);
// Checks that a and b have the same dtype, block_size, num_kv_heads and head_dim.
void require_same_shape(const Cache& a, const Cache& b, const char* what_a, const char* what_b);

WriteKv read_write_kv(const Cache& c, const kvb_write_kv_args* args);
// With need_pointers false only the shapes are checked (workspace size query).
Attention read_attention(const Cache& c, const kvb_attention_args* args, bool need_pointers);

}  // namespace kern
}  // namespace kvb
