/* xxh64.h - XXH64 (seed 0) written from the xxHash specification, for the bench's bare-hash baseline.
   xxh64_chain hashes the bytes [parent u64 LE][tokens as i64 LE] without copying them together: the
   exact input of a libkvblock block hash with a parent (kvb_hash_tokens(&parent, tokens, n)). */
#ifndef KVBLOCK_TOOL_XXH64_H
#define KVBLOCK_TOOL_XXH64_H

#include <stddef.h>
#include <stdint.h>

uint64_t xxh64_chain(uint64_t parent, const int64_t* tokens, size_t n);

#endif
