/* replay_store.h - the in-memory model store of `kvblock replay --store-blocks N`: keys only (the replay
   moves no bytes), N blocks at most, least recently used dropped first (a key found by a lookup counts
   as used); gets complete at the next poll. */
#ifndef KVBLOCK_TOOL_REPLAY_STORE_H
#define KVBLOCK_TOOL_REPLAY_STORE_H

#include <stdint.h>

#include "kvblock.h"

typedef struct replay_store replay_store;

/* Registers a model store of `blocks` blocks on m (prints the error; NULL on failure). exclusive: a get
   takes the key out (one engine's what-if: no copy kept below a block in use); otherwise a get keeps it
   (a shared store). */
replay_store* replay_store_attach(kvb_manager* m, uint64_t blocks, uint32_t block_size, int exclusive);
/* Unregisters it from m (m may be NULL if already destroyed) and frees it. */
void replay_store_free(replay_store* s, kvb_manager* m);
/* Blocks it holds now, and blocks it dropped for room. */
uint64_t replay_store_size(const replay_store* s);
uint64_t replay_store_evictions(const replay_store* s);

#endif
