// Versioned-struct helpers for the C boundary: a caller compiled against an older header passes a
// smaller struct_size, and the library reads and writes only the fields that size covers.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstring>

#include "error.h"

namespace kvb {

// What every kvb_xxx_init starts with: false for NULL (tolerated), else *s zeroed up to `size` bytes (less
// than sizeof(T) in the aliases that write an older version's layout) and struct_size set to it.
template <class T>
bool init_struct(T* s, size_t size = sizeof(T)) {
  if (!s) return false;
  std::memset(static_cast<void*>(s), 0, size);
  s->struct_size = static_cast<uint32_t>(size);
  return true;
}

// True if the caller's struct (its struct_size) includes `field`.
#define KVB_COVERS(ptr, type, field) \
  ((ptr)->struct_size >= offsetof(type, field) + sizeof(((type*)0)->field))

// Rejects NULL and a struct too small to hold its first-version fields. `name` names the struct in the
// message; `init` the function that fills it (NULL: name's own _init, for names that are type names).
template <class T>
void require_struct(const T* p, size_t min_size, const char* name, const char* init = nullptr) {
  if (!p) fail(Code::invalid_argument, "%s is NULL", name);
  if (p->struct_size < min_size)
    fail(Code::invalid_argument, "%s: struct_size %u is smaller than its first version (%zu bytes); call %s%s first",
         name, p->struct_size, min_size, init ? init : name, init ? "" : "_init");
}

// The whole input rule in one call: require_struct, then a copy of the caller's struct over the
// defaults `init` writes. The copy reads min(struct_size, sizeof(T)) bytes: fields an older header
// lacks keep their defaults, and the fields a newer header added are not read. struct_size is ours.
template <class T>
T read_versioned(const T* in, size_t min_size, void (*init)(T*), const char* name, const char* init_name) {
  require_struct(in, min_size, name, init_name);
  T out;
  init(&out);
  std::memcpy(static_cast<void*>(&out), in, std::min<size_t>(in->struct_size, sizeof(T)));
  out.struct_size = sizeof(T);
  return out;
}

// Copies a fully built output struct into the caller's, truncated to the caller's struct_size.
template <class T>
void write_versioned(T* dst, const T& src) {
  uint32_t caller_size = dst->struct_size;
  std::memcpy(static_cast<void*>(dst), &src, std::min<size_t>(caller_size, sizeof(T)));
  dst->struct_size = caller_size;
}

}  // namespace kvb
