// Versioned-struct helpers for the C boundary: a caller compiled against an older header passes a
// smaller struct_size, and the library reads and writes only the fields that size covers.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstring>

#include "error.h"

namespace kvb {

// True if the caller's struct (its struct_size) includes `field`.
#define KVB_COVERS(ptr, type, field) \
  ((ptr)->struct_size >= offsetof(type, field) + sizeof(((type*)0)->field))

// Rejects a struct too small to hold its first-version fields (or absurdly sized).
template <class T>
void require_struct(const T* p, size_t min_size, const char* name) {
  if (!p) fail(Code::invalid_argument, "%s is NULL", name);
  if (p->struct_size < min_size)
    fail(Code::invalid_argument, "%s->struct_size %u is smaller than its first version (%zu); call %s_init first",
         name, p->struct_size, min_size, name);
}

// Copies a fully built output struct into the caller's, truncated to the caller's struct_size.
template <class T>
void write_versioned(T* dst, const T& src) {
  uint32_t caller_size = dst->struct_size;
  std::memcpy(static_cast<void*>(dst), &src, std::min<size_t>(caller_size, sizeof(T)));
  dst->struct_size = caller_size;
}

}  // namespace kvb
