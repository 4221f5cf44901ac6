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

namespace {
// XXH3's default secret: the secret derived from seed 0 is the default secret itself.
struct DefaultSecret {
  unsigned char bytes[XXH3_SECRET_DEFAULT_SIZE];
  DefaultSecret() { XXH3_generateSecret_fromSeed(bytes, 0); }
};
}  // namespace

BlockHasher::BlockHasher(uint64_t seed) : seed_(seed), mid_(DefaultSecret().bytes, seed) {
  XXH3_generateSecret_fromSeed(secret_, seed);
}

static uint64_t layout_tag(const ChainLink& link, size_t n, ExtraKey extra) {
  return static_cast<uint64_t>(link.kind) | (static_cast<uint64_t>(extra.present) << 8) | (static_cast<uint64_t>(n) << 16);
}

// The key: XXH3-128 of the words [tag, tokens..., extra key if present, link.key.lo, link.key.hi] (u64 LE),
// the tag being kind | extra present << 8 | n << 16. The tag comes first and fixes the layout (how many
// tokens, whether an extra key follows), so equal keys mean (up to 128-bit collisions) equal tags, tokens,
// extra keys and parent keys: by induction on the parent key, equal histories. The parent's public hash
// is not hashed again: the parent key already fixes it. The parent key comes last, so everything but the
// hash's last 32-byte round and its finalisation is independent of the parent: from block to block, the
// chain of keys waits on that tail only.
Key128 BlockHasher::key(const ChainLink& link, const int64_t* tokens, size_t n, ExtraKey extra) const {
  const uint64_t tag = layout_tag(link, n, extra);
  if (n == 16 && !extra.present) {  // the usual block: in place
    Key128 k;
    mid_.hash_16_tokens(tag, tokens, link.key.lo, link.key.hi, &k.lo, &k.hi);
    return k;
  }
  const size_t len = 8 * (n + 3 + (extra.present ? 1 : 0));
  if (len >= Xxh3MidSecret::kMinBytes && len <= Xxh3MidSecret::kMaxBytes) {  // 13-27 tokens
    uint64_t w[Xxh3MidSecret::kMaxBytes / 8];
    w[0] = tag;
    std::memcpy(w + 1, tokens, n * 8);
    size_t i = 1 + n;
    if (extra.present) w[i++] = extra.value;
    w[i] = link.key.lo;
    w[i + 1] = link.key.hi;
    Key128 k;
    mid_.hash(w, i + 2, &k.lo, &k.hi);
    return k;
  }
  XXH128_hash_t h;
  constexpr size_t kStackBytes = 2048;
  if (len <= kStackBytes) {
    alignas(8) unsigned char buf[kStackBytes];
    std::memcpy(buf, &tag, 8);
    std::memcpy(buf + 8, tokens, n * 8);
    unsigned char* p = buf + 8 + n * 8;
    if (extra.present) {
      std::memcpy(p, &extra.value, 8);
      p += 8;
    }
    std::memcpy(p, &link.key.lo, 8);
    std::memcpy(p + 8, &link.key.hi, 8);
    // Up to XXH3_MIDSIZE_MAX (240) bytes XXH3 uses the seed alone (XXH3_128bits_withSecretandSeed would
    // dispatch to the same code); here that is blocks of up to 13 tokens (128 bytes).
    h = len <= XXH3_MIDSIZE_MAX ? XXH3_128bits_withSeed(buf, len, seed_)
                                : XXH3_128bits_withSecretandSeed(buf, len, secret_, sizeof secret_, seed_);
  } else {
    XXH3_state_t st;
    // reset reads st.seed (and st.extSecret) to decide whether the secret must be derived again: a state
    // on the stack must be initialised first (valgrind: conditional jump on uninitialised value).
    XXH3_INITSTATE(&st);
    XXH3_128bits_reset_withSecretandSeed(&st, secret_, sizeof secret_, seed_);
    XXH3_128bits_update(&st, &tag, 8);
    XXH3_128bits_update(&st, tokens, n * 8);
    if (extra.present) XXH3_128bits_update(&st, &extra.value, 8);
    XXH3_128bits_update(&st, &link.key, 16);
    h = XXH3_128bits_digest(&st);
  }
  return Key128{h.low64, h.high64};
}

void BlockHasher::hash_and_key(const ChainLink& link, const int64_t* tokens, size_t n, ExtraKey extra,
                               uint64_t* hash, Key128* key) const {
  if (n == 16 && !extra.present && link.kind != ChainLink::none) {
    // The commit path's usual block: both hashes straight-line in one function, so that the compiler
    // interleaves their independent multiply chains.
    hash_and_key_16(link, tokens, hash, key);
    return;
  }
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
