// CPU write_kv (reshape_and_cache): every slot is checked before anything is written.
#include <cstring>

#include "../../libkvblock/error.h"
#include "write_kv.h"
#include "../common/types.h"
#include "../common/convert_cpu.h"

namespace kvb {
namespace kern {
namespace cpu {

namespace {

// fp8 cache: each element of key/value (a.input_dtype) quantized with its head's scale (fp8.h, the
// conversion the CUDA write_kv uses too, so both write the same bytes).
void write_kv_fp8(const Cache& c, const WriteKv& a) {
  const bool e5m2 = c.dtype == Dtype::e5m2;
  const int64_t ies = int64_t(dtype_size(a.input_dtype)), D = c.head_dim;
  for (int64_t i = 0; i < a.num_tokens; ++i) {
    const int64_t s = a.slots[i];
    if (s < 0) continue;
    const int64_t base = c.slot_row(s);
    for (int64_t h = 0; h < c.num_kv_heads; ++h) {
      uint8_t* kd = static_cast<uint8_t*>(c.k) + base + c.head(h);
      uint8_t* vd = static_cast<uint8_t*>(c.v) + base + c.head(h);
      const char* ks = static_cast<const char*>(a.key) + (i * a.key_token_stride + h * a.key_head_stride) * ies;
      const char* vs = static_cast<const char*>(a.value) + (i * a.value_token_stride + h * a.value_head_stride) * ies;
      const float kscale = c.k_scale_of(h), vscale = c.v_scale_of(h);
      for (int64_t d = 0; d < D; ++d) {
        kd[d] = fp8::quantize(load_elem(ks, a.input_dtype, d), kscale, e5m2);
        vd[d] = fp8::quantize(load_elem(vs, a.input_dtype, d), vscale, e5m2);
      }
    }
  }
}

}  // namespace

void write_kv(const Cache& c, const WriteKv& a) {
  const int64_t num_slots = c.num_blocks * c.block_size;
  for (int64_t i = 0; i < a.num_tokens; ++i) {
    const int64_t s = a.slots[i];
    if (s != -1 && (s < 0 || s >= num_slots))
      fail(Code::invalid_argument, "slot_mapping[%lld] = %lld is not -1 nor in [0, %lld)", (long long)i,
           (long long)s, (long long)num_slots);
  }
  if (c.fp8()) return write_kv_fp8(c, a);
  const size_t es = c.elem();
  const size_t row = size_t(c.head_dim) * es;
  for (int64_t i = 0; i < a.num_tokens; ++i) {
    const int64_t s = a.slots[i];
    if (s < 0) continue;
    const int64_t base = c.slot_row(s);
    for (int64_t h = 0; h < c.num_kv_heads; ++h) {
      const int64_t dst = (base + c.head(h)) * int64_t(es);
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
