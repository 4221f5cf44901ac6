// Memory for the tables that grow with the pool: the prefix index's slots, the block metadata and the
// token store. On a large pool the miss path touches an index slot at random for every block it evicts
// and for every block it indexes; on 4 KiB pages nearly each of those is also a TLB miss (a 2^20-block
// pool has a 16 MiB index: 4,096 pages). Allocations of kHugeFromBytes or more are therefore aligned to
// 2 MiB and marked for transparent huge pages (madvise: a hint; where THP is off or refused nothing
// changes). They go through the global operator new (aligned form), as every other allocation does, so
// that an allocation failure is still a std::bad_alloc and the out-of-memory tests still see them.
#pragma once
#include <cstddef>
#include <new>
#include <type_traits>

#include <sys/mman.h>

namespace kvb {

constexpr size_t kHugePageBytes = size_t{2} << 20;
constexpr size_t kHugeFromBytes = 2 * kHugePageBytes;  // smaller tables gain little: plain pages

inline void* large_alloc(size_t bytes) {
  if (bytes < kHugeFromBytes) return ::operator new(bytes);
  void* p = ::operator new(bytes, std::align_val_t{kHugePageBytes});
#ifdef MADV_HUGEPAGE
  const size_t page = 4096;
  (void)madvise(p, (bytes + page - 1) & ~(page - 1), MADV_HUGEPAGE);  // before the first touch
#endif
  return p;
}

inline void large_free(void* p, size_t bytes) noexcept {
  if (bytes < kHugeFromBytes) ::operator delete(p);
  else ::operator delete(p, std::align_val_t{kHugePageBytes});
}

// For std::vector.
template <class T>
struct LargeAllocator {
  using value_type = T;
  LargeAllocator() = default;
  template <class U>
  LargeAllocator(const LargeAllocator<U>&) noexcept {}
  T* allocate(size_t n) { return static_cast<T*>(large_alloc(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { large_free(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const LargeAllocator<U>&) const noexcept { return true; }
  template <class U>
  bool operator!=(const LargeAllocator<U>&) const noexcept { return false; }
};

// A fixed array of n elements from large_alloc; `construct`: value-initialise them (else left untouched,
// so that pages are touched only when used, as the token store wants).
template <class T>
class LargeArray {
  static_assert(std::is_trivially_destructible<T>::value, "elements are never destroyed one by one");

 public:
  LargeArray(size_t n, bool construct) : p_(static_cast<T*>(large_alloc(n * sizeof(T)))), n_(n) {
    if (construct)
      for (size_t i = 0; i < n; ++i) new (p_ + i) T();
  }
  ~LargeArray() { large_free(p_, n_ * sizeof(T)); }
  LargeArray(const LargeArray&) = delete;
  LargeArray& operator=(const LargeArray&) = delete;

  T* get() const { return p_; }
  T& operator[](size_t i) const { return p_[i]; }

 private:
  T* p_;
  size_t n_;
};

}  // namespace kvb
