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

Key128 keyed_block_hash(uint64_t seed, const ChainLink& link, const int64_t* tokens, size_t n, ExtraKey extra) {
  XXH3_state_t st;
  // reset_withSeed reads st.seed (and st.extSecret) to decide whether the secret must be derived again:
  // a state on the stack must be initialised first (valgrind: conditional jump on uninitialised value).
  XXH3_INITSTATE(&st);
  XXH3_128bits_reset_withSeed(&st, seed);
  // The kind byte separates "salt S" from "parent whose key is S" and from "no parent".
  unsigned char head[17];
  head[0] = static_cast<unsigned char>(link.kind);
  std::memcpy(head + 1, &link.key.lo, 8);
  std::memcpy(head + 9, &link.key.hi, 8);
  XXH3_128bits_update(&st, head, sizeof head);
  XXH3_128bits_update(&st, tokens, n * 8);
  unsigned char tail[9] = {static_cast<unsigned char>(extra.present)};
  std::memcpy(tail + 1, &extra.value, 8);
  XXH3_128bits_update(&st, tail, sizeof tail);
  XXH128_hash_t h = XXH3_128bits_digest(&st);
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
