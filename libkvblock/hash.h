// Block hashing. The public hash is the xxh64 chain of DESIGN §4 (bit-identical to nano-vllm's
// compute_hash); the optional keyed hash is a 128-bit XXH3 chain under a secret seed, used as the
// index key when KVB_CONFIG_KEYED_INDEX is set so that crafted xxh64 collisions cannot match.
#pragma once
#include <cstddef>
#include <cstdint>

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
  Key128 key;         // parent's keyed hash, or {salt, 0} (keyed mode only)
};

// The optional per-block extra key (u64 LE after the tokens).
struct ExtraKey {
  bool present = false;
  uint64_t value = 0;
};

// xxh64(seed 0) over [link.hash if link.kind != none] + tokens (i64 LE) + [extra key].
uint64_t public_block_hash(const ChainLink& link, const int64_t* tokens, size_t n, ExtraKey extra);

// XXH3-128(seed) over [kind byte, link key] + tokens + [extra key].
Key128 keyed_block_hash(uint64_t seed, const ChainLink& link, const int64_t* tokens, size_t n, ExtraKey extra);

// Plain xxh64 of a buffer (benchmarks compare against it).
uint64_t xxh64_bytes(const void* data, size_t len);

// 64 random bits from the OS (keyed-index seed).
uint64_t os_random_u64();

}  // namespace kvb
