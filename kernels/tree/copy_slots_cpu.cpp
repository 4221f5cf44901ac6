// CPU slot copy: a group whose pairs can run in their order (copy_slots.h in_order: every compaction)
// copies directly, pair after pair; any other group reads its source rows into a buffer first. A
// token's K (or V) row is one memcpy when its heads are back to back, else one per head.
#include <cstring>
#include <vector>

#include "copy_slots.h"

namespace kvb {
namespace kern {
namespace cpu {

namespace {

struct Rows {
  int64_t heads, row_bytes;  // bytes
  PagedKv kv;                // bytes
  int block_shift;
  int64_t block_mask;
  bool dense;  // the heads of a token are one run of heads * row_bytes

  explicit Rows(const Cache& c) {
    const int64_t es = int64_t(c.elem());
    heads = c.num_kv_heads;
    row_bytes = c.head_dim * es;
    kv = c.in_bytes(es);
    block_shift = c.block_shift;
    block_mask = c.block_size - 1;
    dense = kv.head_stride == row_bytes;
  }
  int64_t offset(int64_t slot) const { return kv.slot_row(slot, block_shift, block_mask); }
  int64_t token_bytes() const { return heads * row_bytes; }
  // Token at `from` (a cache address) to `to`, where either side may be a dense buffer row.
  void copy(char* to, bool to_dense, const char* from, bool from_dense) const {
    if (dense) return (void)std::memcpy(to, from, size_t(token_bytes()));
    for (int64_t h = 0; h < heads; ++h)
      std::memcpy(to + h * (to_dense ? row_bytes : kv.head_stride), from + h * (from_dense ? row_bytes : kv.head_stride),
                  size_t(row_bytes));
  }
};

}  // namespace

void copy_slots(const SlotCopy& s) {
  if (s.num_layers == 0 || s.pairs.empty()) return;
  const Rows r(s.layers[0]);
  std::vector<char> staged(size_t(s.largest_group * r.token_bytes()));
  for (int64_t l = 0; l < s.num_layers; ++l)
    for (int kv = 0; kv < 2; ++kv) {
      char* base = static_cast<char*>(kv ? s.layers[l].v : s.layers[l].k);
      for (size_t g = 0; g + 1 < s.group_start.size(); ++g) {
        const int64_t i0 = s.group_start[g], n = s.group_start[g + 1] - i0;
        const int64_t* p = s.pairs.data() + 2 * i0;
        if (s.in_order[g]) {
          for (int64_t i = 0; i < n; ++i) r.copy(base + r.offset(p[2 * i + 1]), false, base + r.offset(p[2 * i]), false);
          continue;
        }
        for (int64_t i = 0; i < n; ++i) r.copy(staged.data() + i * r.token_bytes(), true, base + r.offset(p[2 * i]), false);
        for (int64_t i = 0; i < n; ++i)
          r.copy(base + r.offset(p[2 * i + 1]), false, staged.data() + i * r.token_bytes(), true);
      }
    }
}

}  // namespace cpu
}  // namespace kern
}  // namespace kvb
