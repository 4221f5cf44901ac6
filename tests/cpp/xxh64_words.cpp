// kvb::xxh64_words (the public block hash computed in place, libkvblock/xxh64_words.h) against the
// system xxHash's XXH64 over the laid-out bytes [head][tokens][tail], for every piece combination and
// every length from 0 to 80 words (each branch: short input, stripes of tokens only, stripes that
// start with the head or end in the tail, remainders of 0-3 words), random words.
#include <xxhash.h>

#include <cstring>
#include <vector>

#include "../libkvblock/xxh64_words.h"
#include "cpp/splitmix.h"
#include "harness.h"

static void test_matches_xxh64() {
  SplitMix64 rng(27, 1);
  for (size_t n = 0; n <= 80; ++n)
    for (int pieces = 0; pieces < 4; ++pieces) {
      const bool head = pieces & 1, tail = pieces & 2;
      std::vector<int64_t> tokens(n + 1);
      for (int64_t& t : tokens) t = static_cast<int64_t>(rng.next());
      const uint64_t h = rng.next(), x = rng.next();
      std::vector<unsigned char> bytes;
      auto put = [&](const void* p, size_t len) {
        bytes.insert(bytes.end(), static_cast<const unsigned char*>(p), static_cast<const unsigned char*>(p) + len);
      };
      if (head) put(&h, 8);
      put(tokens.data(), n * 8);
      if (tail) put(&x, 8);
      const uint64_t want = XXH64(bytes.data(), bytes.size(), 0);
      const uint64_t got = kvb::xxh64_words(head, h, tokens.data(), n, tail, x);
      if (got != want) {
        fprintf(stderr, "n=%zu head=%d tail=%d: got %016llx want %016llx\n", n, head, tail,
                (unsigned long long)got, (unsigned long long)want);
        kvbt_case_failures++;
      }
    }
}

int main() {
  RUN_TEST(test_matches_xxh64);
  TEST_SUMMARY();
}
