// Open-addressing hash table with linear probing and backward-shift deletion (no tombstones), used for
// the prefix index and the sequence table. Slots are small PODs; the Traits say how to tell an empty
// slot and where a stored slot's probe sequence starts, so that keys may live outside the table.
#pragma once
#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

#include "error.h"
#include "large_alloc.h"

namespace kvb {

inline uint64_t mix64(uint64_t x) {  // splitmix64 finaliser: spreads ids that are small or sequential
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Traits: static Slot empty(); static bool is_empty(const Slot&); uint64_t home(const Slot&) const.
template <class Slot, class Traits>
class OpenTable {
 public:
  // what: the table's name in an out-of-memory message ("the device prefix index").
  OpenTable(size_t min_capacity, Traits traits, const char* what) : traits_(traits), what_(what) { reset(min_capacity); }

  void reset(size_t min_capacity) {
    size_t cap = 16;
    while (cap < 2 * min_capacity) cap <<= 1;  // load factor <= 1/2
    allocating(cap, [&] { slots_.assign(cap, Traits::empty()); });
    mask_ = cap - 1;
    size_ = 0;
  }

  size_t size() const { return size_; }
  size_t capacity() const { return slots_.size(); }
  const Slot& at(size_t pos) const { return slots_[pos]; }
  Slot& at(size_t pos) { return slots_[pos]; }

  // Position of the first slot on h's probe path for which match(slot) holds, or -1.
  template <class Match>
  long find(uint64_t h, Match&& match) const {
    for (size_t pos = h & mask_;; pos = (pos + 1) & mask_) {
      const Slot& s = slots_[pos];
      if (Traits::is_empty(s)) return -1;
      if (match(s)) return static_cast<long>(pos);
    }
  }

  // One probe for find-or-insert: the position of the first slot on h's path that matches, or of the
  // empty slot that ends the path (*found = false; fill it with occupy()).
  template <class Match>
  size_t find_or_empty(uint64_t h, Match&& match, bool* found) const {
    for (size_t pos = h & mask_;; pos = (pos + 1) & mask_) {
      const Slot& s = slots_[pos];
      if (Traits::is_empty(s)) {
        *found = false;
        return pos;
      }
      if (match(s)) {
        *found = true;
        return pos;
      }
    }
  }
  void occupy(size_t pos, const Slot& s) {
    slots_[pos] = s;
    ++size_;
  }

  // Starts loading the line where h's probe begins, and the next line too when the probe begins in the
  // last slot of its line: an erase reads the slot after the one it removes (does the cluster go on?) and
  // a put of an occupied home the slot after it, which on a table beyond the caches were a DRAM miss in
  // one probe of 8 (2^20-block pool, `kvblock bench` miss: 72 -> 66 ns per block). Always inline: once,
  // out of line, the compiler dropped the prefetches from the commit loop altogether.
  __attribute__((always_inline)) void prefetch(uint64_t h) const {
    static_assert(64 % sizeof(Slot) == 0, "slots tile a 64-byte line");
    constexpr size_t kSlotsPerLine = 64 / sizeof(Slot);
    const size_t pos = h & mask_;
    __builtin_prefetch(&slots_[pos]);
    if ((pos + 1) % kSlotsPerLine == 0) __builtin_prefetch(&slots_[(pos + 1) & mask_]);
  }

  // Inserts a slot whose key is known to be absent. The caller keeps the load under 1/2 (see grow_for).
  size_t insert(uint64_t h, const Slot& s) {
    size_t pos = h & mask_;
    while (!Traits::is_empty(slots_[pos])) pos = (pos + 1) & mask_;
    slots_[pos] = s;
    ++size_;
    return pos;
  }

  // Removes slots_[pos] and shifts later members of the cluster back so every probe path stays intact.
  // s may move into the hole iff the hole lies on its probe path, cyclically in [home, next): its
  // distance from home to next is at least the hole's distance to next. Written without a branch on
  // that test (a select), which mispredicted on every other slot of the eviction path.
  void erase(size_t pos) {
    size_t hole = pos;
    for (size_t next = (hole + 1) & mask_;; next = (next + 1) & mask_) {
      const Slot s = slots_[next];
      if (Traits::is_empty(s)) break;
      const size_t home = traits_.home(s) & mask_;
      const bool movable = ((next - home) & mask_) >= ((next - hole) & mask_);
      slots_[hole] = movable ? s : slots_[hole];
      hole = movable ? next : hole;
    }
    slots_[hole] = Traits::empty();
    --size_;
  }

  // Doubles the table while one more entry would push the load over 1/2 (allocates: not on hot paths).
  void grow_for(size_t entries) {
    if (2 * entries <= slots_.size()) return;
    size_t cap = slots_.size();
    while (2 * entries > cap) cap <<= 1;
    // Allocate before touching the table: if this throws, the table is unchanged.
    std::vector<Slot, LargeAllocator<Slot>> old;
    allocating(cap, [&] { old.assign(cap, Traits::empty()); });
    old.swap(slots_);
    mask_ = cap - 1;
    size_ = 0;
    for (const Slot& s : old)
      if (!Traits::is_empty(s)) insert(traits_.home(s), s);
  }

  Traits& traits() { return traits_; }

 private:
  template <class Alloc>
  void allocating(size_t cap, Alloc&& alloc) {
    try {
      alloc();
    } catch (const std::bad_alloc&) {
      fail_alloc(what_, static_cast<unsigned long long>(cap) * sizeof(Slot), "%zu slots of %zu bytes", cap, sizeof(Slot));
    }
  }

  Traits traits_;
  const char* what_;
  std::vector<Slot, LargeAllocator<Slot>> slots_;  // large tables on huge pages (large_alloc.h)
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace kvb
