// Replaces every variant of the global operator new / delete (plain, array, nothrow, aligned, sized) with
// the two functions the including test defines (declared here, so before or after the include):
//   void* test_alloc(std::size_t n, std::size_t align) noexcept;  // align 0 = default; nullptr = failure
//   void test_free(void* p) noexcept;
// system_alloc is the plain allocation a counting test_alloc passes on to (release it with std::free).
// Include it in one translation unit of a test binary only. The library is linked statically into such
// binaries, so every allocation it makes goes through the test's functions.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <new>

void* test_alloc(std::size_t n, std::size_t align) noexcept;
void test_free(void* p) noexcept;

inline void* system_alloc(std::size_t n, std::size_t align) noexcept {
  if (n == 0) n = 1;
  if (align <= alignof(std::max_align_t)) return std::malloc(n);
  void* p = nullptr;
  return posix_memalign(&p, align, n) == 0 ? p : nullptr;
}

inline void* test_alloc_or_throw(std::size_t n, std::size_t align) {
  void* p = test_alloc(n, align);
  if (!p) throw std::bad_alloc();
  return p;
}

void* operator new(std::size_t n) { return test_alloc_or_throw(n, 0); }
void* operator new[](std::size_t n) { return test_alloc_or_throw(n, 0); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return test_alloc(n, 0); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return test_alloc(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return test_alloc_or_throw(n, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return test_alloc_or_throw(n, static_cast<std::size_t>(a)); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return test_alloc(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return test_alloc(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept { test_free(p); }
void operator delete[](void* p) noexcept { test_free(p); }
void operator delete(void* p, std::size_t) noexcept { test_free(p); }
void operator delete[](void* p, std::size_t) noexcept { test_free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { test_free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { test_free(p); }
void operator delete(void* p, std::align_val_t) noexcept { test_free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { test_free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { test_free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { test_free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { test_free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { test_free(p); }
