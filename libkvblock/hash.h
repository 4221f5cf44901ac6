// Block hashing. The public hash is the xxh64 chain of docs/ARCHITECTURE.md, "Hash chain" (bit-identical to
// nano-vllm's compute_hash); the index key is a 128-bit XXH3 chain over the same input plus its structure
// (see BlockHasher), under a secret seed when KVB_CONFIG_KEYED_INDEX is set so that crafted collisions
// cannot match.
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
  Key128 key;         // parent's index key, or {salt, 0}
};

// The optional per-block extra key (u64 LE after the tokens).
struct ExtraKey {
  bool present = false;
  uint64_t value = 0;
};

// xxh64(seed 0) over [link.hash if link.kind != none] + tokens (i64 LE) + [extra key]: the public hash.
uint64_t public_block_hash(const ChainLink& link, const int64_t* tokens, size_t n, ExtraKey extra);

// The index key of a block, in two XXH3-128 hashes: the content digest over its tokens (+ extra key),
// read once where they lie, then an outer hash of [link.key (16 bytes), tag = kind | extra present << 8
// | n << 16 (8 bytes), digest (16 bytes)]. The tag fixes the layout, and link.key is the parent's own
// index key, so equal keys mean equal histories back to the first block (salt or none, every block's
// tokens and extra key), up to 128-bit collisions. The public xxh64 chain cannot promise that: `salt ‖
// tokens` and `tokens ‖ extra` are the same bytes, and xxh64 collisions are easy to make, so the key is
// never derived from the public hash. Unkeyed managers use seed 0; KVB_CONFIG_KEYED_INDEX a secret seed
// (both hashes). The two cost about what one XXH3-128 over [key, tag, parent hash, tokens] did (callgrind,
// block size 16), but the digest needs neither a stack copy nor the parent, so the chain of keys from
// block to block waits only on the 40-byte outer hash.
class BlockHasher {
 public:
  explicit BlockHasher(uint64_t seed);
  // Public hash and index key together (commit).
  void hash_and_key(const ChainLink& link, const int64_t* tokens, size_t n, ExtraKey extra, uint64_t* hash,
                    Key128* key) const;
  // The index key alone (prefix lookup needs no public hash).
  Key128 key(const ChainLink& link, const int64_t* tokens, size_t n, ExtraKey extra) const;

 private:
  uint64_t seed_;
  unsigned char secret_[192];  // XXH3 secret derived from the seed once (inputs over 240 bytes use it)
};

// Plain xxh64 of a buffer (benchmarks compare against it).
uint64_t xxh64_bytes(const void* data, size_t len);

// 64 random bits from the OS (keyed-index seed).
uint64_t os_random_u64();

}  // namespace kvb
