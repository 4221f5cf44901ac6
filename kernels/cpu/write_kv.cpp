// CPU write_kv (reshape_and_cache): every slot is checked before anything is written.
#include <cstring>

#include "../../libkvblock/error.h"
#include "../backends.h"

namespace kvb {
namespace kern {
namespace cpu {

void write_kv(const Cache& c, const WriteKv& a) {
  const int64_t num_slots = c.num_blocks * c.block_size;
  for (int64_t i = 0; i < a.num_tokens; ++i) {
    const int64_t s = a.slots[i];
    if (s != -1 && (s < 0 || s >= num_slots))
      fail(Code::invalid_argument, "slot_mapping[%lld] = %lld is not -1 nor in [0, %lld)", (long long)i,
           (long long)s, (long long)num_slots);
  }
  const size_t es = c.elem();
  const size_t row = size_t(c.head_dim) * es;
  for (int64_t i = 0; i < a.num_tokens; ++i) {
    const int64_t s = a.slots[i];
    if (s < 0) continue;
    const int64_t base = (s >> c.block_shift) * c.block_stride + (s & (c.block_size - 1)) * c.token_stride;
    for (int64_t h = 0; h < c.num_kv_heads; ++h) {
      const int64_t dst = (base + h * c.head_stride) * int64_t(es);
      std::memcpy(static_cast<char*>(c.k) + dst,
                  static_cast<const char*>(a.key) + (i * a.key_token_stride + h * a.key_head_stride) * int64_t(es), row);
      std::memcpy(static_cast<char*>(c.v) + dst,
                  static_cast<const char*>(a.value) + (i * a.value_token_stride + h * a.value_head_stride) * int64_t(es),
                  row);
    }
  }
}

}  // namespace cpu
}  // namespace kern
}  // namespace kvb
