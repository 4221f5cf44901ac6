// splitmix64, the random numbers of the randomized C++ tests: the same numbers on every platform and
// standard library, so that a failing seed reproduces anywhere. `stream` keeps the tests' sequences apart.
#pragma once
#include <cstdint>

struct SplitMix64 {
  uint64_t s;
  SplitMix64(uint64_t seed, uint64_t stream) : s(seed * 0x9E3779B97F4A7C15ULL + stream) {}
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
};
