// kvb::Xxh3MidSecret (the index key's XXH3-128 with the seeded secret worked out once, libkvblock/
// xxh3_words.h) against the system xxHash's XXH3_128bits_withSeed over the same bytes: every length of
// its range (17 to 30 words), the in-place 16-token form, and seeds 0, 1, a random one and 2^64 - 1.
// Also kvb::xxh64_head_16_tokens (the public hash of a 16-token block with a parent, xxh64_words.h).
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstring>
#include <vector>

#include "../libkvblock/xxh3_words.h"
#include "../libkvblock/xxh64_words.h"
#include "cpp/splitmix.h"
#include "harness.h"

static std::vector<unsigned char> default_secret() {
  std::vector<unsigned char> s(XXH3_SECRET_DEFAULT_SIZE);
  XXH3_generateSecret_fromSeed(s.data(), 0);  // seed 0: the default secret itself
  return s;
}

static void expect_equal(const char* what, size_t words, uint64_t seed, uint64_t lo, uint64_t hi, XXH128_hash_t want) {
  if (lo == want.low64 && hi == want.high64) return;
  fprintf(stderr, "%s: %zu words, seed %016llx: got %016llx %016llx want %016llx %016llx\n", what, words,
          (unsigned long long)seed, (unsigned long long)lo, (unsigned long long)hi, (unsigned long long)want.low64,
          (unsigned long long)want.high64);
  kvbt_case_failures++;
}

static void test_mid_matches_xxh3() {
  SplitMix64 rng(27, 2);
  const std::vector<unsigned char> secret = default_secret();
  const uint64_t seeds[] = {0, 1, rng.next(), ~0ULL};
  for (uint64_t seed : seeds) {
    const kvb::Xxh3MidSecret mid(secret.data(), seed);
    for (size_t words = 17; words <= 30; ++words)
      for (int rep = 0; rep < 8; ++rep) {
        std::vector<uint64_t> w(words);
        for (uint64_t& x : w) x = rep == 0 ? 0 : rng.next();  // rep 0: all zero words (a multiply by zero)
        uint64_t lo = 0, hi = 0;
        mid.hash(w.data(), words, &lo, &hi);
        expect_equal("hash", words, seed, lo, hi, XXH3_128bits_withSeed(w.data(), words * 8, seed));
      }
  }
}

static void test_16_tokens_in_place() {
  SplitMix64 rng(27, 3);
  const std::vector<unsigned char> secret = default_secret();
  const uint64_t seeds[] = {0, rng.next()};
  for (uint64_t seed : seeds) {
    const kvb::Xxh3MidSecret mid(secret.data(), seed);
    for (int rep = 0; rep < 64; ++rep) {
      uint64_t w[19];
      for (uint64_t& x : w) x = rng.next();
      int64_t tokens[17];  // one word more, so that the tokens also start off a 16-byte boundary
      int64_t* t = tokens + (rep & 1);
      std::memcpy(t, w + 1, 16 * 8);
      uint64_t lo = 0, hi = 0;
      mid.hash_16_tokens(w[0], t, w[17], w[18], &lo, &hi);
      expect_equal("hash_16_tokens", 19, seed, lo, hi, XXH3_128bits_withSeed(w, sizeof w, seed));
    }
  }
}

static void test_xxh64_head_16_tokens() {
  SplitMix64 rng(27, 4);
  for (int rep = 0; rep < 64; ++rep) {
    uint64_t w[17];
    for (uint64_t& x : w) x = rng.next();
    int64_t tokens[16];
    std::memcpy(tokens, w + 1, sizeof tokens);
    const uint64_t got = kvb::xxh64_head_16_tokens(w[0], tokens), want = XXH64(w, sizeof w, 0);
    if (got != want) {
      fprintf(stderr, "xxh64_head_16_tokens: got %016llx want %016llx\n", (unsigned long long)got,
              (unsigned long long)want);
      kvbt_case_failures++;
    }
  }
}

int main() {
  RUN_TEST(test_mid_matches_xxh3);
  RUN_TEST(test_16_tokens_in_place);
  RUN_TEST(test_xxh64_head_16_tokens);
  TEST_SUMMARY();
}
