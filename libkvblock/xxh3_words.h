// XXH3-128 with a seed of an input of 129 to 240 bytes made of 64-bit little-endian words (the index key
// of a block of 14 to 27 tokens: libkvblock/hash.cpp), with the seeded secret words worked out once per
// seed instead of at every 16-byte mix, and its four first rounds unrolled. The digest is that of the
// system xxHash's XXH3_128bits_withSeed over the same bytes: written from the XXH3 specification
// (xxhash's doc/xxhash_spec.md, "XXH3 128-bit, 129-240 bytes"), checked against the system xxHash by
// tests/cpp/xxh3_words.cpp for every length of the range and several seeds.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace kvb {

// The secret words that the 129-240 byte path reads, each with the seed already added or subtracted.
class Xxh3MidSecret {
 public:
  static constexpr size_t kMinBytes = 129, kMaxBytes = 240;
  // default_secret: XXH3's 192-byte default secret (kSecret).
  Xxh3MidSecret(const unsigned char* default_secret, uint64_t seed) : seed_(seed) {
    auto at = [&](size_t off) {
      uint64_t v;
      std::memcpy(&v, default_secret + off, 8);
      return v;
    };
    // Rounds 0-3 read the secret at 0, 32, 64, 96 (16 words); rounds 4-6 at 3 + 32 k (12 words); the
    // last round at 136 - 17 - 16 = 103 (4 words), with the seed negated.
    for (size_t i = 0; i < 16; i += 2) {
      first_[i] = at(8 * i) + seed;
      first_[i + 1] = at(8 * i + 8) - seed;
    }
    for (size_t k = 0; k < 3; ++k)
      for (size_t j = 0; j < 4; j += 2) {
        middle_[4 * k + j] = at(3 + 32 * k + 8 * j) + seed;
        middle_[4 * k + j + 1] = at(3 + 32 * k + 8 * j + 8) - seed;
      }
    for (size_t j = 0; j < 4; j += 2) {
      last_[j] = at(103 + 8 * j) - seed;
      last_[j + 1] = at(103 + 8 * j + 8) + seed;
    }
  }

  // XXH3-128 (seed) of the `words` words w[0..words) as bytes, 129 <= 8 * words <= 240; lo, hi as in
  // XXH128_hash_t's low64, high64.
  inline void hash(const uint64_t* w, size_t words, uint64_t* lo, uint64_t* hi) const;
  // The same hash of the 19 words [w0, tokens[0..16), w17, w18], the tokens read where they lie (the index
  // key of a 16-token block without an extra key: tag, tokens, parent key).
  __attribute__((always_inline)) inline void hash_16_tokens(uint64_t w0, const int64_t* tokens, uint64_t w17, uint64_t w18, uint64_t* lo,
                             uint64_t* hi) const;

 private:
  uint64_t seed_;
  uint64_t first_[16], middle_[12], last_[4];
};

namespace xxh3w {

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kP4 = 0x85EBCA77C2B2AE63ULL;

__extension__ typedef unsigned __int128 u128;  // (GCC and Clang; __extension__: -Wpedantic)

inline uint64_t fold_mul(uint64_t a, uint64_t b) {  // the 128-bit product, its halves xored
  const u128 p = static_cast<u128>(a) * b;
  return static_cast<uint64_t>(p) ^ static_cast<uint64_t>(p >> 64);
}
inline uint64_t avalanche(uint64_t h) {
  h ^= h >> 37;
  h *= 0x165667919E3779F9ULL;
  return h ^ (h >> 32);
}
// One 32-byte round: a = 16 bytes, b = the other 16, s = their four seeded secret words.
inline void mix32(uint64_t& acc_lo, uint64_t& acc_hi, const uint64_t* a, const uint64_t* b, const uint64_t* s) {
  acc_lo += fold_mul(a[0] ^ s[0], a[1] ^ s[1]);
  acc_lo ^= b[0] + b[1];
  acc_hi += fold_mul(b[0] ^ s[2], b[1] ^ s[3]);
  acc_hi ^= a[0] + a[1];
}

}  // namespace xxh3w

inline void Xxh3MidSecret::hash(const uint64_t* w, size_t words, uint64_t* lo, uint64_t* hi) const {
  using namespace xxh3w;
  const uint64_t len = 8 * words;
  uint64_t a = len * kP1, b = 0;
  mix32(a, b, w, w + 2, first_);
  mix32(a, b, w + 4, w + 6, first_ + 4);
  mix32(a, b, w + 8, w + 10, first_ + 8);
  mix32(a, b, w + 12, w + 14, first_ + 12);
  a = avalanche(a);
  b = avalanche(b);
  for (size_t k = 0; k + 4 < len / 32; ++k) mix32(a, b, w + 16 + 4 * k, w + 18 + 4 * k, middle_ + 4 * k);
  mix32(a, b, w + words - 2, w + words - 4, last_);
  *lo = avalanche(a + b);
  *hi = 0 - avalanche(a * kP1 + b * kP4 + (len - seed_) * kP2);
}

inline void Xxh3MidSecret::hash_16_tokens(uint64_t w0, const int64_t* tokens, uint64_t w17, uint64_t w18,
                                          uint64_t* lo, uint64_t* hi) const {
  using namespace xxh3w;
  auto t = [tokens](int i) {  // loaded where it is used (a local copy of the block cost 30 instructions)
    uint64_t v;
    std::memcpy(&v, tokens + i, 8);
    return v;
  };
  // One round over the words (x0, x1) and (y0, y1) with the secret words s[0..4).
  auto round = [](uint64_t& a, uint64_t& b, uint64_t x0, uint64_t x1, uint64_t y0, uint64_t y1, const uint64_t* s) {
    a += fold_mul(x0 ^ s[0], x1 ^ s[1]);
    a ^= y0 + y1;
    b += fold_mul(y0 ^ s[2], y1 ^ s[3]);
    b ^= x0 + x1;
  };
  constexpr uint64_t len = 8 * 19;
  uint64_t a = len * kP1, b = 0;
  round(a, b, w0, t(0), t(1), t(2), first_);
  round(a, b, t(3), t(4), t(5), t(6), first_ + 4);
  round(a, b, t(7), t(8), t(9), t(10), first_ + 8);
  round(a, b, t(11), t(12), t(13), t(14), first_ + 12);
  a = avalanche(a);
  b = avalanche(b);
  round(a, b, w17, w18, t(14), t(15), last_);  // 152 bytes: no middle rounds; the last reads words 17-18, 15-16
  *lo = avalanche(a + b);
  *hi = 0 - avalanche(a * kP1 + b * kP4 + (len - seed_) * kP2);
}

}  // namespace kvb
