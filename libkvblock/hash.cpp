#define XXH_INLINE_ALL  // the streaming state lives on the stack; inlining is measurably faster
#include "hash.h"

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
  if (link.kind == ChainLink::none && !extra.present) return XXH64(tokens, n * 8, 0);
  // One-shot XXH64 over a stack copy is about twice as fast as the streaming API for a block of 16-64
  // tokens; larger blocks stream.
  constexpr size_t kStackBytes = 2048;
  const size_t bytes = 8 * (n + (link.kind != ChainLink::none) + extra.present);
  if (bytes <= kStackBytes) {
    alignas(8) unsigned char buf[kStackBytes];
    size_t off = 0;
    if (link.kind != ChainLink::none) {
      std::memcpy(buf, &link.hash, 8);
      off = 8;
    }
    std::memcpy(buf + off, tokens, n * 8);
    off += n * 8;
    if (extra.present) {
      std::memcpy(buf + off, &extra.value, 8);
      off += 8;
    }
    return XXH64(buf, off, 0);
  }
  XXH64_state_t st;
  XXH64_reset(&st, 0);
  if (link.kind != ChainLink::none) XXH64_update(&st, &link.hash, 8);
  XXH64_update(&st, tokens, n * 8);
  if (extra.present) XXH64_update(&st, &extra.value, 8);
  return XXH64_digest(&st);
}

static_assert(XXH3_SECRET_DEFAULT_SIZE == 192, "BlockHasher::secret_ size");

BlockHasher::BlockHasher(uint64_t seed) : seed_(seed) { XXH3_generateSecret_fromSeed(secret_, seed); }

namespace {

// The key's 24-byte head: the parent's key (or {salt, 0}, or zeros) and the tag that fixes the layout.
inline void key_head(const ChainLink& link, size_t n, ExtraKey extra, unsigned char* out) {
  const uint64_t tag = static_cast<uint64_t>(link.kind) | (static_cast<uint64_t>(extra.present) << 8) |
                       (static_cast<uint64_t>(n) << 16);
  std::memcpy(out, &link.key.lo, 8);
  std::memcpy(out + 8, &link.key.hi, 8);
  std::memcpy(out + 16, &tag, 8);
}

// Inputs up to this size are laid out once on the stack: [key head][public hash input]. One-shot hashes
// over a stack copy beat the streaming APIs by about 2x for blocks of 16-64 tokens.
constexpr size_t kHeadBytes = 24;
constexpr size_t kStackBytes = 2048;

// Lays out [key head][link.hash?][tokens][extra?] in buf; returns the total length.
inline size_t lay_out(const ChainLink& link, const int64_t* tokens, size_t n, ExtraKey extra, unsigned char* buf) {
  key_head(link, n, extra, buf);
  size_t off = kHeadBytes;
  if (link.kind != ChainLink::none) {
    std::memcpy(buf + off, &link.hash, 8);
    off += 8;
  }
  std::memcpy(buf + off, tokens, n * 8);
  off += n * 8;
  if (extra.present) {
    std::memcpy(buf + off, &extra.value, 8);
    off += 8;
  }
  return off;
}

inline size_t input_bytes(const ChainLink& link, size_t n, ExtraKey extra) {
  return kHeadBytes + 8 * (n + (link.kind != ChainLink::none) + extra.present);
}

}  // namespace

void BlockHasher::hash_and_key(const ChainLink& link, const int64_t* tokens, size_t n, ExtraKey extra,
                               uint64_t* hash, Key128* key) const {
  if (input_bytes(link, n, extra) > kStackBytes) {
    *hash = public_block_hash(link, tokens, n, extra);
    *key = this->key(link, tokens, n, extra);
    return;
  }
  alignas(8) unsigned char buf[kStackBytes];
  const size_t len = lay_out(link, tokens, n, extra, buf);
  *hash = XXH64(buf + kHeadBytes, len - kHeadBytes, 0);
  XXH128_hash_t h = XXH3_128bits_withSecretandSeed(buf, len, secret_, sizeof secret_, seed_);
  *key = Key128{h.low64, h.high64};
}

Key128 BlockHasher::key(const ChainLink& link, const int64_t* tokens, size_t n, ExtraKey extra) const {
  XXH128_hash_t h;
  if (input_bytes(link, n, extra) <= kStackBytes) {
    alignas(8) unsigned char buf[kStackBytes];
    h = XXH3_128bits_withSecretandSeed(buf, lay_out(link, tokens, n, extra, buf), secret_, sizeof secret_, seed_);
  } else {
    XXH3_state_t st;
    // reset reads st.seed (and st.extSecret) to decide whether the secret must be derived again: a state
    // on the stack must be initialised first (valgrind: conditional jump on uninitialised value).
    XXH3_INITSTATE(&st);
    XXH3_128bits_reset_withSecretandSeed(&st, secret_, sizeof secret_, seed_);
    unsigned char head[kHeadBytes];
    key_head(link, n, extra, head);
    XXH3_128bits_update(&st, head, sizeof head);
    if (link.kind != ChainLink::none) XXH3_128bits_update(&st, &link.hash, 8);
    XXH3_128bits_update(&st, tokens, n * 8);
    if (extra.present) XXH3_128bits_update(&st, &extra.value, 8);
    h = XXH3_128bits_digest(&st);
  }
  return Key128{h.low64, h.high64};
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
