#define XXH_INLINE_ALL  // the streaming state lives on the stack; inlining is measurably faster
#include "hash.h"
#include "xxh64_words.h"

// GCC 12 misreads XXH3_128bits_reset_withSeed (which fills the state) as reading it uninitialised.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <xxhash.h>
#pragma GCC diagnostic pop

#include <cstring>
#include <fstream>
#include <random>

namespace kvb {

static_assert(sizeof(int64_t) == 8, "token layout");

// Tokens are hashed as int64 little-endian. On the little-endian targets we support, that is their
// in-memory layout, so they go to xxHash as-is.
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "libkvblock assumes a little-endian host"
#endif

uint64_t public_block_hash(const ChainLink& link, const int64_t* tokens, size_t n, ExtraKey extra) {
  return xxh64_words(link.kind != ChainLink::none, link.hash, tokens, n, extra.present, extra.value);
}

static_assert(XXH3_SECRET_DEFAULT_SIZE == 192, "BlockHasher::secret_ size");

BlockHasher::BlockHasher(uint64_t seed) : seed_(seed) { XXH3_generateSecret_fromSeed(secret_, seed); }

namespace {

// The content digest of a block: XXH3-128 over its tokens, then the extra key if present, read where
// they lie (a stack copy only to append an extra key). It does not depend on the parent, so the chain
// of keys waits on the short outer hash only.
// Inputs up to XXH3_MIDSIZE_MAX (240) bytes use the seed alone (XXH3_128bits_withSecretandSeed would
// dispatch to the same code): called directly, on the commit path's hot case (16 tokens, 128 bytes).
__attribute__((always_inline)) inline XXH128_hash_t content_digest(const int64_t* tokens, size_t n, ExtraKey extra,
                                                                    const unsigned char* secret, size_t secret_size,
                                                                    uint64_t seed) {
  if (!extra.present) {
    if (n * 8 <= XXH3_MIDSIZE_MAX) return XXH3_128bits_withSeed(tokens, n * 8, seed);
    return XXH3_128bits_withSecretandSeed(tokens, n * 8, secret, secret_size, seed);
  }
  constexpr size_t kStackBytes = 2048;
  if (8 * (n + 1) <= kStackBytes) {
    alignas(8) unsigned char buf[kStackBytes];
    std::memcpy(buf, tokens, n * 8);
    std::memcpy(buf + n * 8, &extra.value, 8);
    return XXH3_128bits_withSecretandSeed(buf, 8 * (n + 1), secret, secret_size, seed);
  }
  XXH3_state_t st;
  // reset reads st.seed (and st.extSecret) to decide whether the secret must be derived again: a state
  // on the stack must be initialised first (valgrind: conditional jump on uninitialised value).
  XXH3_INITSTATE(&st);
  XXH3_128bits_reset_withSecretandSeed(&st, secret, secret_size, seed);
  XXH3_128bits_update(&st, tokens, n * 8);
  XXH3_128bits_update(&st, &extra.value, 8);
  return XXH3_128bits_digest(&st);
}

}  // namespace

// The key: XXH3-128 of [link.key (16 bytes), tag (8 bytes), content digest (16 bytes)], the tag being
// kind | extra present << 8 | n << 16. Two blocks with equal keys have (up to 128-bit collisions of
// the outer hash) equal parent keys, equal tags and equal content digests, hence (up to 128-bit
// collisions of the digest) equal tokens and extra keys: by induction on the parent key, equal
// histories. The parent's public hash is not hashed again: the parent key already fixes it.
Key128 BlockHasher::key(const ChainLink& link, const int64_t* tokens, size_t n, ExtraKey extra) const {
  const XXH128_hash_t digest = content_digest(tokens, n, extra, secret_, sizeof secret_, seed_);
  const uint64_t tag = static_cast<uint64_t>(link.kind) | (static_cast<uint64_t>(extra.present) << 8) |
                       (static_cast<uint64_t>(n) << 16);
  const uint64_t outer[5] = {link.key.lo, link.key.hi, tag, digest.low64, digest.high64};
  const XXH128_hash_t h = XXH3_128bits_withSeed(outer, sizeof outer, seed_);  // 40 bytes: the seed alone
  return Key128{h.low64, h.high64};
}

void BlockHasher::hash_and_key(const ChainLink& link, const int64_t* tokens, size_t n, ExtraKey extra,
                               uint64_t* hash, Key128* key) const {
  *hash = public_block_hash(link, tokens, n, extra);
  *key = this->key(link, tokens, n, extra);
}

uint64_t xxh64_bytes(const void* data, size_t len) { return XXH64(data, len, 0); }

uint64_t os_random_u64() {
  uint64_t v = 0;
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  if (urandom.read(reinterpret_cast<char*>(&v), sizeof v) && v != 0) return v;
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ 0x9e3779b97f4a7c15ULL;
}

}  // namespace kvb
