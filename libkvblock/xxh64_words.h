// XXH64 (seed 0) of a run of 64-bit little-endian words given in three pieces: an optional head word
// (the parent hash or salt), the tokens where they lie, an optional tail word (the extra key). The
// digest is that of XXH64 over the concatenated bytes (the public hash of DESIGN §4), computed without
// laying them out: the commit path used to copy every block to the stack for it. Written from the
// XXH64 specification (xxhash's doc/xxhash_spec.md); tests/c/hash_vectors.c checks it against digests
// computed by another implementation, and diff_core.py against nano-vllm.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace kvb {
namespace xxh64w {

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kP3 = 0x165667B19E3779F9ULL;
constexpr uint64_t kP4 = 0x85EBCA77C2B2AE63ULL;
constexpr uint64_t kP5 = 0x27D4EB2F165667C5ULL;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t round(uint64_t acc, uint64_t input) { return rotl(acc + input * kP2, 31) * kP1; }
inline uint64_t merge(uint64_t acc, uint64_t lane) { return (acc ^ round(0, lane)) * kP1 + kP4; }
inline uint64_t load(const int64_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

}  // namespace xxh64w

inline uint64_t xxh64_words(bool has_head, uint64_t head, const int64_t* tokens, size_t n, bool has_tail,
                            uint64_t tail) {
  using namespace xxh64w;
  const size_t words = (has_head ? 1 : 0) + n + (has_tail ? 1 : 0);
  const int64_t* p = tokens;  // the tokens not consumed yet: [p, p + left)
  size_t left = n;
  bool tail_left = has_tail;
  uint64_t h;
  if (words >= 4) {
    uint64_t v1 = kP1 + kP2, v2 = kP2, v3 = 0, v4 = 0 - kP1;
    if (has_head) {  // the first stripe: the head and the first three words after it
      uint64_t w[3];
      for (int k = 0; k < 3; ++k) {
        if (left > 0) {
          w[k] = load(p++);
          --left;
        } else {
          w[k] = tail;
          tail_left = false;
        }
      }
      v1 = round(v1, head);
      v2 = round(v2, w[0]);
      v3 = round(v3, w[1]);
      v4 = round(v4, w[2]);
    }
    for (; left >= 4; p += 4, left -= 4) {  // stripes of tokens, read in place
      v1 = round(v1, load(p));
      v2 = round(v2, load(p + 1));
      v3 = round(v3, load(p + 2));
      v4 = round(v4, load(p + 3));
    }
    if (left == 3 && tail_left) {  // a last stripe that ends with the tail
      v1 = round(v1, load(p));
      v2 = round(v2, load(p + 1));
      v3 = round(v3, load(p + 2));
      v4 = round(v4, tail);
      left = 0;
      tail_left = false;
    }
    h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
    h = merge(h, v1);
    h = merge(h, v2);
    h = merge(h, v3);
    h = merge(h, v4);
  } else {
    h = kP5;
  }
  h += static_cast<uint64_t>(words) * 8;
  // What is left is fewer than 4 words, head included when the input is that short.
  if (words < 4 && has_head) h = rotl(h ^ round(0, head), 27) * kP1 + kP4;
  for (; left > 0; ++p, --left) h = rotl(h ^ round(0, load(p)), 27) * kP1 + kP4;
  if (tail_left) h = rotl(h ^ round(0, tail), 27) * kP1 + kP4;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

// The same hash of [head, tokens[0..16)] (a 16-token block with a parent and no extra key: the commit
// path's usual case), straight-line: the stripes are (head, t0, t1, t2), (t3..t6), (t7..t10), (t11..t14),
// then t15 alone.
__attribute__((always_inline)) inline uint64_t xxh64_head_16_tokens(uint64_t head, const int64_t* tokens) {
  using namespace xxh64w;
  const int64_t* t = tokens;
  uint64_t v1 = round(kP1 + kP2, head), v2 = round(kP2, load(t)), v3 = round(0, load(t + 1)),
           v4 = round(0 - kP1, load(t + 2));
  for (int s = 3; s < 15; s += 4) {
    v1 = round(v1, load(t + s));
    v2 = round(v2, load(t + s + 1));
    v3 = round(v3, load(t + s + 2));
    v4 = round(v4, load(t + s + 3));
  }
  uint64_t h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
  h = merge(h, v1);
  h = merge(h, v2);
  h = merge(h, v3);
  h = merge(h, v4);
  h += 17 * 8;
  h = rotl(h ^ round(0, load(t + 15)), 27) * kP1 + kP4;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

}  // namespace kvb
