// Differential test of the block manager: small helpers shared by every part (see ../differential.cpp).
#pragma once

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvblock.h"
#include "../splitmix.h"

namespace {

struct Rng : SplitMix64 {  // the same numbers on every platform and standard library
  explicit Rng(uint64_t seed) : SplitMix64(seed, 0x1234567ULL) {}
  size_t below(size_t n) { return n ? static_cast<size_t>(next() % n) : 0; }
  size_t range(size_t lo, size_t hi) { return lo + below(hi - lo + 1); }  // inclusive
  bool chance(double p) { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0) < p; }
};

struct Divergence : std::runtime_error {
  explicit Divergence(const std::string& m) : std::runtime_error(m) {}
};

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, f);
  vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

template <class T>
std::string vec_str(const std::vector<T>& v) {
  std::string s = "[";
  if (v.size() > 48) return "[" + std::to_string(v.size()) + " items: " + std::to_string(v[0]) + "," + std::to_string(v[1]) + ",...," + std::to_string(v.back()) + "]";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

const char* sname(kvb_status s) { return kvb_status_string(s); }

}  // namespace
