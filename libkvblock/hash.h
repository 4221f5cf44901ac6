// Block hashing. The public hash is the xxh64 chain of docs/ARCHITECTURE.md, "Hash chain" (bit-identical to
// nano-vllm's compute_hash); the index key is a 128-bit XXH3 chain over the same input plus its structure
// (see BlockHasher), under a secret seed when KVB_CONFIG_KEYED_INDEX is set so that crafted collisions
// cannot match.
#pragma once
#include <cstddef>
#include <cstdint>

#include "xxh3_words.h"
#include "xxh64_words.h"

namespace kvb {

struct Key128 {
  uint64_t lo = 0, hi = 0;
  bool operator==(const Key128& o) const { return lo == o.lo && hi == o.hi; }
  bool operator!=(const Key128& o) const { return !(*this == o); }
};

// What precedes a block's tokens in its hash input.
struct ChainLink {
  enum Kind : uint8_t { none = 0, parent = 1, salt = 2 } kind = none;
  uint64_t hash = 0;  // parent's public hash, or the salt
  Key128 key;         // parent's index key, or {salt, 0}
};

// The optional per-block extra key (u64 LE after the tokens).
struct ExtraKey {
  bool present = false;
  uint64_t value = 0;
};

// xxh64(seed 0) over [link.hash if link.kind != none] + tokens (i64 LE) + [extra key]: the public hash.
uint64_t public_block_hash(const ChainLink& link, const int64_t* tokens, size_t n, ExtraKey extra);

// The index key of a block: one XXH3-128 of the words [tag, tokens, extra key if present, link.key.lo,
// link.key.hi] (u64 LE), tag = kind | extra present << 8 | n << 16. The tag comes first and fixes the
// layout, and link.key is the parent's own index key, so equal keys mean equal histories back to the
// first block (salt or none, every block's tokens and extra key), up to 128-bit collisions. The public
// xxh64 chain cannot promise that: `salt ‖ tokens` and `tokens ‖ extra` are the same bytes, and xxh64
// collisions are easy to make, so the key is never derived from the public hash. Unkeyed managers use
// seed 0; KVB_CONFIG_KEYED_INDEX a secret seed. The parent key comes last, so the chain of keys from
// block to block waits only on the hash's last round and finalisation. Blocks of 16 tokens without an
// extra key (the usual case) are hashed in place, both hashes in one straight-line function
// (xxh3_words.h, xxh64_words.h); other sizes of 129-240 bytes use the same XXH3 code over a stack copy,
// the rest the system xxHash.
class BlockHasher {
 public:
  explicit BlockHasher(uint64_t seed);
  // Public hash and index key together (commit).
  void hash_and_key(const ChainLink& link, const int64_t* tokens, size_t n, ExtraKey extra, uint64_t* hash,
                    Key128* key) const;
  // hash_and_key of the commit path's usual block (16 tokens, no extra key, a parent or salt link), inline
  // in the commit loop: both hashes straight-line, so that the compiler interleaves their independent
  // multiply chains, and no call.
  __attribute__((always_inline)) void hash_and_key_16(const ChainLink& link, const int64_t* tokens, uint64_t* hash,
                                                     Key128* key) const {
    *hash = xxh64_head_16_tokens(link.hash, tokens);
    mid_.hash_16_tokens(static_cast<uint64_t>(link.kind) | (uint64_t{16} << 16), tokens, link.key.lo, link.key.hi,
                        &key->lo, &key->hi);
  }
  // The index key alone (prefix lookup needs no public hash).
  Key128 key(const ChainLink& link, const int64_t* tokens, size_t n, ExtraKey extra) const;

 private:
  uint64_t seed_;
  unsigned char secret_[192];  // XXH3 secret derived from the seed once (inputs over 240 bytes use it)
  Xxh3MidSecret mid_;          // the seeded secret words of inputs of 129-240 bytes (14-27 tokens)
};

// Plain xxh64 of a buffer (benchmarks compare against it).
uint64_t xxh64_bytes(const void* data, size_t len);

// 64 random bits from the OS (keyed-index seed).
uint64_t os_random_u64();

}  // namespace kvb
