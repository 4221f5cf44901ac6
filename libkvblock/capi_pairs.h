// Block-pair outputs at the C boundary (copy-on-write drain, swaps): the size is reported first, so
// that a caller whose buffer is too small learns the size it needs.
#pragma once
#include <cstddef>
#include <cstdint>

#include "error.h"

namespace kvb {

inline void require_pairs(int32_t* pairs, size_t capacity_pairs, size_t* num_pairs, size_t needed, const char* what) {
  if (!num_pairs) fail(Code::invalid_argument, "num_pairs is NULL");
  *num_pairs = needed;
  if (capacity_pairs < needed)
    fail(Code::buffer_too_small, "%s produces %zu block pair%s, capacity_pairs is %zu", what, needed, plural_s(needed),
         capacity_pairs);
  if (!pairs && needed > 0) fail(Code::invalid_argument, "pairs is NULL");
}

}  // namespace kvb
