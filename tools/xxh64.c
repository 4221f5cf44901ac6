/* xxh64.c - XXH64 over a stream of 64-bit little-endian words (parent hash, then the tokens).
   Little-endian hosts only (as libkvblock). */
#include "xxh64.h"

#define P1 0x9E3779B185EBCA87ULL
#define P2 0xC2B2AE3D27D4EB4FULL
#define P3 0x165667B19E3779F9ULL
#define P4 0x85EBCA77C2B2AE63ULL
#define P5 0x27D4EB2F165667C5ULL

static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static uint64_t round1(uint64_t acc, uint64_t in) { return rotl(acc + in * P2, 31) * P1; }
static uint64_t merge(uint64_t h, uint64_t v) { return (h ^ round1(0, v)) * P1 + P4; }

uint64_t xxh64_chain(uint64_t parent, const int64_t* tokens, size_t n) {
  size_t words = n + 1, i = 0, len = words * 8;
  uint64_t h;
#define WORD(k) ((k) == 0 ? parent : (uint64_t)tokens[(k) - 1])
  if (words >= 4) {
    uint64_t v1 = P1 + P2, v2 = P2, v3 = 0, v4 = 0 - P1;
    /* First stripe holds the parent; the rest read the tokens directly. */
    v1 = round1(v1, parent);
    v2 = round1(v2, (uint64_t)tokens[0]);
    v3 = round1(v3, (uint64_t)tokens[1]);
    v4 = round1(v4, (uint64_t)tokens[2]);
    for (i = 4; i + 4 <= words; i += 4) {
      const int64_t* t = tokens + i - 1;
      v1 = round1(v1, (uint64_t)t[0]);
      v2 = round1(v2, (uint64_t)t[1]);
      v3 = round1(v3, (uint64_t)t[2]);
      v4 = round1(v4, (uint64_t)t[3]);
    }
    h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
    h = merge(h, v1);
    h = merge(h, v2);
    h = merge(h, v3);
    h = merge(h, v4);
  } else {
    h = P5;
  }
  h += (uint64_t)len;
  for (; i < words; i++) h = rotl(h ^ round1(0, WORD(i)), 27) * P1 + P4;
#undef WORD
  h ^= h >> 33;
  h *= P2;
  h ^= h >> 29;
  h *= P3;
  h ^= h >> 32;
  return h;
}
