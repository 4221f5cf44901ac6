// Differential test of the block manager: the model's hashes. The public chain hash is the xxh64
// layout of docs/ARCHITECTURE.md, "Hash chain" (checked against kvb_hash_tokens by hash_compat); the
// index key is the model's own.
#pragma once

#include <xxhash.h>

#include <cstdint>
#include <vector>

namespace {

void put_u64(std::vector<unsigned char>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<unsigned char>(v >> (8 * i)));
}

// docs/ARCHITECTURE.md, "Hash chain": xxh64 (seed 0) over [parent hash or salt, u64 LE] + tokens
// (i64 LE) + [extra key, u64 LE].
uint64_t model_hash(bool has_parent, uint64_t parent, const int64_t* toks, size_t n, bool has_extra, uint64_t extra) {
  std::vector<unsigned char> bytes;
  if (has_parent) put_u64(bytes, parent);
  for (size_t i = 0; i < n; ++i) put_u64(bytes, static_cast<uint64_t>(toks[i]));
  if (has_extra) put_u64(bytes, extra);
  return XXH64(bytes.data(), bytes.size(), 0);
}

// Index key, in both index modes: a hash over an unambiguous layout (KV cache group, kind byte, the
// parent's *key*, tokens, extra-present byte, extra), so that equal keys mean equal whole histories in
// one group: "salt 1 + tokens [0,2]", "parent 1 + tokens [0,2]" and "tokens [1,0] + extra key 2" hash
// the same public xxh64 bytes but are different keys, and so are their children; the same history in
// two groups is two keys (kvblock.h: a cached block is keyed by its group and its whole history). The
// keys never leave the model, so its own hash of that layout serves.
uint64_t model_key(uint32_t group, int kind, uint64_t parent_key, const int64_t* toks, size_t n, bool hx, uint64_t xv) {
  std::vector<unsigned char> bytes;
  put_u64(bytes, group);
  bytes.push_back(static_cast<unsigned char>(kind));
  put_u64(bytes, parent_key);
  for (size_t i = 0; i < n; ++i) put_u64(bytes, static_cast<uint64_t>(toks[i]));
  bytes.push_back(hx);
  put_u64(bytes, xv);
  return XXH64(bytes.data(), bytes.size(), 0x5eed);
}

}  // namespace
