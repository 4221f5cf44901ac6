/*
 * kvblock.h - libkvblock, the KV-cache block manager of an LLM inference engine.
 *
 * Contents (each part below opens with a banner that begins with its name):
 *    1. Status, version                kvb_status, kvb_status_string, kvb_last_error, kvb_version
 *    2. Manager                        kvb_config (flags, KV cache groups), kvb_manager_create / _destroy
 *    3. Hashing                        kvb_hash_tokens, kvb_block_hash
 *    4. Sequences: the core flow       allocate, commit, append, free, block tables, invariants
 *    5. Sequences: cache salt, extra keys, state     kvb_seq_options, kvb_seq_get_info
 *    6. Fork, copy-on-write, rollback, sliding window
 *    6b. Token trees                   kvb_seq_append_tree, kvb_seq_commit_tree, kvb_drain_slot_copies
 *    7. Host tier and swapping         kvb_seq_can_swap_out / _in, kvb_seq_swap_out / _in
 *    8. Host cache                     host blocks as a second prefix-cache level, kvb_drain_host_transfers
 *    9. Store tier                     kvb_store (callbacks), kvb_manager_set_store, kvb_store_poll,
 *                                      directory store
 *   10. Batch export for kernels       kvb_batch_export, kvb_batch_append, kvb_batch_commit
 *   11. Statistics, events, prefix-cache control
 *   12. Kernels                        write K/V, decode and prefill attention, copy / swap blocks, faults:
 *       12.1 Caches                    strides, devices, dtypes, kvb_cache_desc, kvb_cache_alloc / _free
 *       12.2 Write K/V                 kvb_write_kv
 *       12.3 Decode attention          kvb_paged_attention
 *       12.4 Prefill attention         kvb_prefill_attention (prompts, chunks and decodes in one call)
 *       12.5 Copy and swap blocks      kvb_copy_blocks, kvb_swap_blocks
 *       12.6 CUDA input faults         kvb_cuda_take_fault
 * How the library behind this header is built, and the rules the manager follows (hash chain, free queue,
 * prefix index, KV cache groups, host tier): docs/ARCHITECTURE.md. The ABI rules: abi/ABI.md.
 *
 * One engine step (error checks left out; README.md has a complete program):
 *   kvb_seq_allocate(m, id, prompt, n, &cached);     a new request: tokens [cached, n) still to compute
 *   kvb_drain_host_transfers(m, ...);                KVB_CONFIG_HOST_CACHE: run the pairs with
 *                                                      kvb_swap_blocks, all offloads, then all loads
 *   kvb_drain_copies(m, pairs, cap, &num_pairs);     copy-on-write pairs: run them with kvb_copy_blocks
 *   kvb_batch_export(m, ids, num_seqs, &batch);      block tables, seq_lens, query_start, slot_mapping
 *   for each layer l:
 *     kvb_write_kv(&cache[l], &w, stream);           the new tokens' K/V into their slots
 *     kvb_prefill_attention(&cache[l], &a, stream);  any mix of prompts, chunks and decodes
 *   kvb_batch_commit(m, ids, NULL, num_seqs);        K/V written: full blocks enter the prefix index
 *   kvb_batch_append(m, ids, next_tokens, num_seqs); one sampled token each, computed next step
 *   kvb_seq_free(m, id);                             a finished request: its blocks stay cached
 *
 * One header, plain C99. Conventions:
 *  - Every function that can fail returns kvb_status (KVB_OK = 0, errors negative); outputs go through
 *    pointers. kvb_last_error() holds a thread-local message with the detail of the last failure.
 *  - A failed call changes nothing.
 *  - Structs that may grow start with `uint32_t struct_size`; call the matching kvb_xxx_init() first.
 *    The library reads only the fields the caller's struct_size covers. An array of such structs (e.g.
 *    the layers of kvb_copy_blocks) is walked by the caller's size, not the library's: element i starts
 *    i * array[0].struct_size bytes in, and every element must carry that same struct_size (so an array
 *    built against an older or newer header works as it is).
 *  - The library never keeps a caller pointer after a call returns (one exception: what the caller
 *    registers for a manager's lifetime with kvb_manager_set_store, see "Store tier"); arrays come out
 *    into caller buffers with an explicit capacity (KVB_ERR_BUFFER_TOO_SMALL reports the size needed).
 *  - Every function on one kvb_manager may be called from several threads (one lock per manager),
 *    except kvb_manager_destroy: it must not overlap any other call on that manager (it frees the lock).
 *
 * `cc -E -P -DKVB_CDEF kvblock.h` yields text accepted by cffi's FFI.cdef().
 */
#ifndef KVBLOCK_H
#define KVBLOCK_H

#define KVB_VERSION_MAJOR 0
#define KVB_VERSION_MINOR 1
#define KVB_VERSION_PATCH 0

#ifndef KVB_CDEF
#include <stddef.h>
#include <stdint.h>
#define KVB_API __attribute__((visibility("default")))
#ifdef __cplusplus
extern "C" {
#endif
#else
#define KVB_API
#endif

/* ------------------------------------------------------------------------------------------------ */
/* Status, version                                                                                   */
/* ------------------------------------------------------------------------------------------------ */

typedef struct kvb_manager kvb_manager;

typedef enum kvb_status {
  KVB_OK = 0,
  KVB_ERR_INVALID_ARGUMENT = -1, /* NULL pointer, out-of-range value, malformed input */
  KVB_ERR_OUT_OF_BLOCKS = -2,    /* the free queue cannot cover the request (nothing was changed) */
  KVB_ERR_NO_SUCH_SEQUENCE = -3,
  KVB_ERR_SEQUENCE_EXISTS = -4,
  KVB_ERR_BAD_STATE = -5,        /* valid arguments, but not in this state (e.g. sequence swapped out) */
  KVB_ERR_OUT_OF_MEMORY = -6,    /* the C++ runtime could not allocate host memory */
  KVB_ERR_DEVICE = -7,           /* a CUDA call failed; kvb_last_error() has the CUDA error string */
  KVB_ERR_UNSUPPORTED = -8,      /* feature not built in (e.g. CUDA kernels without nvcc) */
  KVB_ERR_BUFFER_TOO_SMALL = -9, /* caller buffer too small; the needed size is reported */
  KVB_ERR_INTERNAL = -10         /* a bug in libkvblock: please report it with kvb_last_error() */
} kvb_status;

/* Name of a status ("KVB_ERR_OUT_OF_BLOCKS"); "KVB_UNKNOWN_STATUS" for other values. Never NULL. */
KVB_API const char* kvb_status_string(kvb_status s);
/* Detail of the last failure on the calling thread ("" if none yet). Valid until the thread's next call. */
KVB_API const char* kvb_last_error(void);
/* MAJOR*10000 + MINOR*100 + PATCH of the loaded library. */
KVB_API uint32_t kvb_version(void);
/* "MAJOR.MINOR.PATCH" of the loaded library. */
KVB_API const char* kvb_version_string(void);

/* ------------------------------------------------------------------------------------------------ */
/* Manager                                                                                           */
/* ------------------------------------------------------------------------------------------------ */

typedef enum kvb_config_flags {
  /* Prefixes are matched by an index key, a 128-bit XXH3 hash of the block's whole history (parent's
     key, no parent / parent / salt, tokens, extra key): a block matches only a block with the same
     salt (or none) and the same tokens and extra keys in every block up to and including itself. This
     flag runs that hash under a secret per-manager seed (collision defence; seed 0 otherwise); the
     public xxh64 chain hash is still computed and reported. */
  KVB_CONFIG_KEYED_INDEX = 1,
  /* Record block stored / removed / cleared events for kvb_drain_events(). */
  KVB_CONFIG_EVENTS = 2,
  /* Host blocks are a second prefix-cache level (needs num_host_blocks > 0; see "Host cache" below). */
  KVB_CONFIG_HOST_CACHE = 4
} kvb_config_flags;

/* KV cache groups (hybrid models: Gemma 2/3, gpt-oss, ... mix sliding-window and full-attention layers).
   A manager created with num_groups >= 1 keeps, per sequence, one block table per group over one shared
   block pool and free queue; the layers of group g read the table of group g (kvb_seq_block_table_group,
   kvb_batch.group). The block size is common to all groups. Every sequence call works on all groups at
   once and stays all-or-nothing across them: allocate, append (also kvb_batch_append), commit, rollback,
   fork(_at) and free; OUT_OF_BLOCKS counts the blocks of every group. A full group keeps every block; a
   window group releases, exactly like kvb_seq_set_window, the blocks no coming query can reach.
   A cached block is keyed by its group and its whole history, so groups never hit each other's blocks;
   the public hash (kvb_block_hash, events) is the same in every group, and events carry the group
   (kvb_drain_events_group).
   A prefix hit is valid for every group: k cached blocks (never the prompt's last block) are a hit when
   every full group has blocks 0 .. k-1 cached and every window group has the blocks that the first
   uncached token (position k * block_size) attends: its window, the block before it, and the sinks.
   A window group takes only those; its other entries read -1.
   With groups, per-sequence windows (kvb_seq_options.window_tokens, kvb_seq_set_window) are refused
   (each group's window is its spec's), kvb_seq_block_table and kvb_batch_export (without .group) give
   group 0, and kvb_seq_get_info reports num_held_blocks summed over the groups (num_blocks, the
   entries of one table, is the same in every group; window_tokens and sink_tokens are group 0's).
   Swapping moves every group at once (see kvb_seq_swap_out). A manager with no groups (num_groups 0) is
   one full group whose windows are per sequence, exactly as before groups.
   Eviction order with groups: a cached block that a window group releases while its sequence runs is
   parked (still free, but taken only when the free queue is empty) and returns to the free queue when
   its sequence ends, with the sequence's other blocks, so pressure cuts a cached prefix from its end in
   every group at once. The hit rule with worked examples, and the eviction order in full:
   docs/ARCHITECTURE.md, "KV cache groups". */
typedef enum kvb_group_kind {
  KVB_GROUP_FULL = 0,   /* full attention: every block is kept */
  KVB_GROUP_WINDOW = 1  /* sliding window (window_tokens > 0) with optional attention sinks */
} kvb_group_kind;

typedef struct kvb_group_spec {
  uint32_t struct_size;
  uint32_t kind;          /* kvb_group_kind, default FULL */
  uint32_t window_tokens; /* WINDOW: the query at p attends [p + 1 - window_tokens, p]; FULL: must be 0 */
  uint32_t sink_tokens;   /* WINDOW: the first sink_tokens tokens are attended too; FULL: must be 0 */
} kvb_group_spec;         /* may grow at the end; an array is walked by its elements' struct_size */

/* Fill defaults (full attention) and struct_size. */
KVB_API void kvb_group_spec_init(kvb_group_spec* spec);

typedef struct kvb_config {
  uint32_t struct_size;
  uint32_t block_size;                 /* tokens per block, default 16 */
  uint32_t num_blocks;                 /* device blocks */
  uint32_t num_host_blocks;            /* host (swap/offload) blocks, 0 = none */
  float    watermark;                  /* fraction of blocks kept free for running sequences, default 0 */
  const int64_t* non_cacheable_tokens; /* copied at create */
  size_t   num_non_cacheable_tokens;   /* at most 2^24 */
  /* --- fields below were added after the core contract; older callers' struct_size omits them --- */
  uint32_t flags;                      /* kvb_config_flags, default 0 */
  uint32_t event_capacity;             /* events kept before dropping (counted), default 65536; the queue
                                          starts at 1 MiB or less and grows as events come, up to this
                                          many events of sizeof(kvb_event) + block_size token ids each */
  uint64_t index_seed;                 /* KVB_CONFIG_KEYED_INDEX seed; 0 = random from the OS */
  uint32_t host_cache_twin_percent;    /* KVB_CONFIG_HOST_CACHE: host blocks (percent, default 1) that may
                                          keep the copy of a block loaded back to the device */
  uint32_t reserved;
  /* --- fields below were added with KV cache groups; older callers' struct_size omits them --- */
  const kvb_group_spec* groups;        /* [num_groups] KV cache groups (see above), copied at create */
  size_t   num_groups;                 /* 0 = no groups (one table per sequence, as before); at most 64 */
} kvb_config;                          /* may grow at the end */

/* Fill defaults (block_size 16, everything else 0) and struct_size. */
KVB_API void kvb_config_init(kvb_config* cfg);
/* Create a manager with num_blocks device blocks, all free, in the queue order 0..num_blocks-1. */
KVB_API kvb_status kvb_manager_create(const kvb_config* cfg, kvb_manager** out);
/* Destroy a manager and everything it holds. NULL is a no-op. No other call on m may be in progress or
   follow: a binding that shares m between threads makes its close wait for the calls in progress. */
KVB_API void kvb_manager_destroy(kvb_manager* m);

/* ------------------------------------------------------------------------------------------------ */
/* Hashing                                                                                           */
/* ------------------------------------------------------------------------------------------------ */

/* xxh64 (seed 0) over [*parent_hash as u64 LE if parent_hash != NULL] + tokens as i64 LE: the public
   block hash, identical to nano-vllm's compute_hash. n == 0 hashes the parent alone (tokens may then be
   NULL). tokens == NULL with n > 0 is invalid: the result is 0 and kvb_last_error() says so (a real
   hash is 0 with probability 2^-64; pass valid arguments rather than test for it). */
KVB_API uint64_t kvb_hash_tokens(const uint64_t* parent_hash /* NULL = first block */, const int64_t* tokens, size_t n);
/* The hash block_id received when committed as a full block, while it still holds that content.
   KVB_ERR_BAD_STATE if it holds no committed full block (never committed, partial, non-cacheable, reused). */
KVB_API kvb_status kvb_block_hash(kvb_manager* m, int32_t block_id, uint64_t* hash);

/* ------------------------------------------------------------------------------------------------ */
/* Sequences: the core flow                                                                          */
/* ------------------------------------------------------------------------------------------------ */

/* Would kvb_seq_allocate of these tokens succeed now? KVB_OK with the would-be cached tokens, or
   KVB_ERR_OUT_OF_BLOCKS (num_cached_tokens is still written). */
KVB_API kvb_status kvb_seq_can_allocate(kvb_manager* m, const int64_t* tokens, size_t n, size_t* num_cached_tokens);
/* Create sequence seq_id holding the prompt: reuse the longest cached prefix (never the last block), take
   free blocks for the rest. *num_cached_tokens (may be NULL) = tokens whose K/V are already computed. */
KVB_API kvb_status kvb_seq_allocate(kvb_manager* m, int64_t seq_id, const int64_t* tokens, size_t n,
                                    size_t* num_cached_tokens);
/* num_tokens more tokens of the sequence have their K/V written; blocks that become full enter the index. */
KVB_API kvb_status kvb_seq_commit(kvb_manager* m, int64_t seq_id, size_t num_tokens);
/* KVB_OK if num_tokens more tokens can be appended now, else KVB_ERR_OUT_OF_BLOCKS. */
KVB_API kvb_status kvb_seq_can_append(kvb_manager* m, int64_t seq_id, size_t num_tokens);
/* Append tokens (decode or speculative), taking blocks as needed; all-or-nothing. */
KVB_API kvb_status kvb_seq_append(kvb_manager* m, int64_t seq_id, const int64_t* tokens, size_t n);
/* Drop the sequence (device or swapped out); its blocks are released last block first (with KV cache
   groups: every group at each block; docs/ARCHITECTURE.md, "Eviction order with groups"). */
KVB_API kvb_status kvb_seq_free(kvb_manager* m, int64_t seq_id);
/* The sequence's block ids, one per block of its tokens (-1 where released by a sliding window).
   *len = the number of entries (also on KVB_ERR_BUFFER_TOO_SMALL). Swapped out: KVB_ERR_BAD_STATE. */
KVB_API kvb_status kvb_seq_block_table(kvb_manager* m, int64_t seq_id, int32_t* out, size_t capacity, size_t* len);
/* kvb_seq_block_table of KV cache group `group` (< num_groups; group 0 also without groups). */
KVB_API kvb_status kvb_seq_block_table_group(kvb_manager* m, int64_t seq_id, uint32_t group, int32_t* out,
                                             size_t capacity, size_t* len);
/* Number of device blocks in the free queue (cached-free blocks included). */
KVB_API kvb_status kvb_num_free_blocks(kvb_manager* m, size_t* n);
/* Full O(N) consistency check of every structure; KVB_ERR_INTERNAL with the broken rule if any. */
KVB_API kvb_status kvb_check_invariants(kvb_manager* m);

/* ------------------------------------------------------------------------------------------------ */
/* Sequences: cache salt, extra keys, state                                                          */
/* ------------------------------------------------------------------------------------------------ */

typedef struct kvb_seq_options {
  uint32_t struct_size;
  uint32_t has_cache_salt;           /* 1: cache_salt is hashed in place of the first block's parent */
  uint64_t cache_salt;               /* per-tenant salt: prompts with different salts never share blocks */
  const uint32_t* extra_key_blocks;  /* block indices (within the sequence) that carry an extra key; below
                                        2^30 (no sequence has more blocks); later blocks may be named */
  const uint64_t* extra_keys;        /* the keys (e.g. image content hash, LoRA id), u64 LE after tokens */
  size_t num_extra_keys;             /* entries in both arrays, indices strictly increasing */
  uint32_t window_tokens;            /* sliding window (0 = none): see kvb_seq_set_window */
  uint32_t sink_tokens;              /* attention-sink tokens kept with the window */
} kvb_seq_options;

/* Fill defaults (no salt, no extra keys, no window) and struct_size. */
KVB_API void kvb_seq_options_init(kvb_seq_options* opts);
/* kvb_seq_can_allocate with options (opts may be NULL). */
KVB_API kvb_status kvb_seq_can_allocate_ex(kvb_manager* m, const int64_t* tokens, size_t n,
                                           const kvb_seq_options* opts, size_t* num_cached_tokens);
/* kvb_seq_allocate with options (opts may be NULL); the options stay with the sequence. */
KVB_API kvb_status kvb_seq_allocate_ex(kvb_manager* m, int64_t seq_id, const int64_t* tokens, size_t n,
                                       const kvb_seq_options* opts, size_t* num_cached_tokens);
/* Give block block_index of the sequence an extra key before it is committed full (chunked or decode
   input of images); KVB_ERR_BAD_STATE if that block was already hashed. */
KVB_API kvb_status kvb_seq_set_extra_key(kvb_manager* m, int64_t seq_id, uint32_t block_index, uint64_t key);

typedef enum kvb_seq_location { KVB_SEQ_ON_DEVICE = 0, KVB_SEQ_SWAPPED_OUT = 1 } kvb_seq_location;

typedef struct kvb_seq_info {
  uint32_t struct_size;
  uint32_t location;          /* kvb_seq_location */
  uint64_t num_tokens;        /* tokens of the sequence */
  uint64_t num_computed;      /* of which K/V are written (cached hits + commits) */
  uint64_t num_cached;        /* tokens that were prefix-cache hits at allocation */
  uint64_t num_blocks;        /* entries of the block table */
  uint64_t num_held_blocks;   /* entries that hold a block (not released by the window) */
  uint32_t window_tokens;
  uint32_t sink_tokens;
} kvb_seq_info;

/* Fill struct_size (everything else 0): the output struct that kvb_seq_get_info writes into. */
KVB_API void kvb_seq_info_init(kvb_seq_info* info);
/* State of one sequence. */
KVB_API kvb_status kvb_seq_get_info(kvb_manager* m, int64_t seq_id, kvb_seq_info* info);

/* ------------------------------------------------------------------------------------------------ */
/* Fork, copy-on-write, rollback, sliding window                                                    */
/* ------------------------------------------------------------------------------------------------ */

/* New sequence child sharing all of parent's blocks (no copy). Every parent token must be committed. */
KVB_API kvb_status kvb_seq_fork(kvb_manager* m, int64_t parent_id, int64_t child_id);
/* Fork sharing only the first num_tokens tokens (TVM fork_pos); they must all be committed. */
KVB_API kvb_status kvb_seq_fork_at(kvb_manager* m, int64_t parent_id, int64_t child_id, size_t num_tokens);
/* Pending copy-on-write copies as (src, dst) block pairs, pairs[2*i] = src, pairs[2*i+1] = dst, oldest
   first, no pair depending on another; run them (kvb_copy_blocks) before the next forward step. A
   pending copy keeps its src block from reuse until drained. All pending pairs are drained at once;
   if capacity_pairs is too small nothing is drained, KVB_ERR_BUFFER_TOO_SMALL, *num_pairs = needed. */
KVB_API kvb_status kvb_drain_copies(kvb_manager* m, int32_t* pairs, size_t capacity_pairs, size_t* num_pairs);
/* Drop the last num_tokens tokens (rejected speculative tokens, TVM PopN). Blocks that become empty are
   released; a committed full block that stops being full leaves the index unless shared. Always possible
   for uncommitted tokens, also under a sliding window (see kvb_seq_set_window). */
KVB_API kvb_status kvb_seq_rollback(kvb_manager* m, int64_t seq_id, size_t num_tokens);
/* Sliding window with attention sinks (window_tokens 0 = off): the query of position p attends positions
   [p + 1 - window_tokens, p] and the first sink_tokens tokens. Blocks are released (their slots read -1,
   they return to the free queue) by kvb_seq_commit, kvb_seq_allocate_ex, kvb_seq_fork(_at) and this call,
   never by append or rollback: block i is released when it lies wholly before position
   num_computed + 1 - window_tokens (the window of the first query still to come, at num_computed),
   contains no sink token, and is not the block of the last computed token. So every appended but
   uncomputed token's query finds its whole window held, and a rollback of uncommitted tokens always
   succeeds. A rollback into committed tokens or a fork_at is refused (KVB_ERR_BAD_STATE) where the
   result would need a released block: its last block, or the window of its next query (at
   min(num_computed, new length)). Example: window 7, block size 4, 19 tokens committed (blocks 0..2
   released): rollback(3) would leave the query at 16 needing block 2, so it is refused; an engine
   verifying draft tokens commits only the accepted ones and rolls back the rest uncommitted.
   Switching the window off or widening it brings no released block back. */
KVB_API kvb_status kvb_seq_set_window(kvb_manager* m, int64_t seq_id, uint32_t window_tokens, uint32_t sink_tokens);

/* ------------------------------------------------------------------------------------------------ */
/* Token trees                                                                                       */
/* ------------------------------------------------------------------------------------------------ */

/* Speculative decoding with a draft tree (EAGLE, Medusa): the target verifies many draft continuations
   in one step, then keeps one accepted root-to-leaf path.

   kvb_seq_append_tree appends n draft tokens after the sequence's c committed tokens. parents[i] is -1
   for a root (a child of the last committed token) or an earlier node (0 <= parents[i] < i; so no
   cycle can be written). Node i takes position c + i in the block table: its K/V slot, and row i of the
   sequence's rows in kvb_batch_export (slot_mapping, tree_mask). depths[i] (if depths is not NULL) is
   0 for a root and depths[parents[i]] + 1 otherwise: the query of node i has position c + depths[i]
   (its RoPE position). Blocks are taken exactly as kvb_seq_append of n tokens takes them (a shared
   partial last block is copied first, no watermark; KVB_ERR_OUT_OF_BLOCKS changes nothing).
   Requires: the sequence on device, every token committed (no uncomputed token) and no pending tree
   (else KVB_ERR_BAD_STATE); n <= KVB_MAX_TREE_NODES and valid parents (else KVB_ERR_INVALID_ARGUMENT);
   n = 0 does nothing. The tree is then pending until kvb_seq_commit_tree.

   While a tree is pending, kvb_seq_append, kvb_seq_commit, kvb_batch_append, kvb_batch_commit,
   kvb_seq_rollback, forking the sequence (kvb_seq_fork / _at with it as parent) and swapping it out
   (kvb_seq_can_swap_out, kvb_seq_swap_out) are refused with KVB_ERR_BAD_STATE: a tree is one step's
   draft, committed or dropped in that step. kvb_seq_free drops a pending tree with the sequence.
   kvb_batch_export lists the tree's nodes as the sequence's uncomputed rows, and kvb_batch.tree_mask
   gives their ancestor bits.

   kvb_seq_commit_tree keeps the accepted path path[0..k) (k may be 0: the whole tree is dropped):
   path[0] must be a root and path[j] a child of path[j - 1] (else KVB_ERR_INVALID_ARGUMENT, nothing
   changed). Node path[j] moves to position c + j; a node already there (path[j] == j: always for a
   chain's prefix) is not copied, any other becomes a slot pair (src, dst) for kvb_drain_slot_copies,
   in every KV cache group. Then the positions from c + k on are dropped as kvb_seq_rollback drops
   uncommitted tokens (blocks left empty return to the free queue, tail first; never refused, not even
   where a window widened since the tree's append lacks released blocks), and the k accepted
   tokens are committed as kvb_seq_commit(k) commits them: full blocks are hashed and enter the prefix
   index (STORED events, the store tier) with the accepted tokens only; a rejected token is never hashed.

   kvb_drain_slot_copies hands out every pending slot pair at once, pairs[2*i] = src slot, pairs[2*i+1]
   = dst slot (block * block_size + offset, the form of slot_mapping; with KV cache groups, every
   group's pairs, group 0's first: run them all on every layer, as a group's layers never read another
   group's blocks). Run them (kvb_copy_slots, K and V of every layer) IN LIST ORDER, or read every
   source before writing any destination: a later pair may overwrite a slot an earlier pair reads
   (path {1, 2} moves c+1 -> c, then c+2 -> c+1), never the reverse. Run them right after the commit:
   before the next forward step reads those positions, and before the pairs of any later drain
   (kvb_drain_copies, kvb_drain_host_transfers, swaps) may copy those blocks. Until drained, a block
   past the accepted path that holds a source keeps a reference (it is not reused). Capacity too small:
   KVB_ERR_BUFFER_TOO_SMALL, *num_pairs = needed, nothing drained.

   Worked example (block_size 4). Sequence 7 holds 6 committed tokens in blocks {3, 5} (positions 0..5;
   block 5 holds positions 4, 5). The draft tree: two roots A and B, A's children C and D, C's child E:
     tokens  {A, B, C, D, E}   parents {-1, -1, 0, 0, 2}   ->  depths {0, 0, 1, 1, 2}
   kvb_seq_append_tree(m, 7, tokens, parents, 5, depths) puts A..E at positions 6..10: block 5 gets A, B
   (positions 6, 7) and a new block 9 gets C, D, E (8..10). RoPE positions are 6 + depth: A 6, B 6,
   C 7, D 7, E 8. kvb_batch_export then gives sequence 7 five rows with slot_mapping {22, 23, 36, 37,
   38} and tree_mask {0b00001, 0b00010, 0b00101, 0b01001, 0b10101} (row i, bit j: node j is node i or
   an ancestor; key j lies at position 6 + j). The target accepts A, C, E: kvb_seq_commit_tree(m, 7,
   {0, 2, 4}, 3) keeps A at 6 (in place), moves C from 8 to 7 and E from 10 to 8: slot pairs (36, 23),
   (38, 36). The sequence now has 9 committed tokens {.., A, C, E} in blocks {3, 5, 9}; block 5 is full
   and enters the prefix index hashed over {t4, t5, A, C}. Accepting only B ({1}, k = 1) would give
   the pair (23, 22) and release block 9. */
enum { KVB_MAX_TREE_NODES = 64 }; /* most nodes of one tree: one uint64_t mask word per node */

KVB_API kvb_status kvb_seq_append_tree(kvb_manager* m, int64_t seq_id, const int64_t* tokens, const int32_t* parents,
                                       size_t n, int32_t* depths);
KVB_API kvb_status kvb_seq_commit_tree(kvb_manager* m, int64_t seq_id, const int32_t* path, size_t k);
KVB_API kvb_status kvb_drain_slot_copies(kvb_manager* m, int64_t* pairs, size_t capacity_pairs, size_t* num_pairs);

/* ------------------------------------------------------------------------------------------------ */
/* Host tier and swapping                                                                            */
/* ------------------------------------------------------------------------------------------------ */

typedef enum kvb_availability {
  KVB_AVAIL_OK = 0,    /* can be done now */
  KVB_AVAIL_LATER = 1, /* could be done once other sequences release blocks */
  KVB_AVAIL_NEVER = 2  /* the pool could never hold it */
} kvb_availability;

/* With KV cache groups a sequence swaps as one: every group's held blocks move (one host table per
   group), counts and availability cover all groups, and a refused swap moves nothing in any group.
   Blocks of all groups live in the one device pool and the one host pool, so pairs are plain block ids
   with no group index: group 0's held blocks first, then group 1's, ..., each group in block order.
   Slots a window group released before the swap (-1) stay released after the swap-in.

   Can the sequence move to host blocks now? (host free blocks vs. its held device blocks) */
KVB_API kvb_status kvb_seq_can_swap_out(kvb_manager* m, int64_t seq_id, kvb_availability* answer);
/* Move the sequence's held device blocks to host blocks. pairs[2*i] = device src, pairs[2*i+1] = host dst;
   run them with kvb_swap_blocks before the device blocks are reused. *num_pairs needed if too small. */
KVB_API kvb_status kvb_seq_swap_out(kvb_manager* m, int64_t seq_id, int32_t* pairs, size_t capacity_pairs,
                                    size_t* num_pairs);
/* Can the swapped-out sequence come back? OK when free - needed >= watermark blocks (vLLM's rule). */
KVB_API kvb_status kvb_seq_can_swap_in(kvb_manager* m, int64_t seq_id, kvb_availability* answer);
/* Bring the sequence back to device blocks. pairs[2*i] = host src, pairs[2*i+1] = device dst, in the
   order of the swap-out. Committed full blocks become findable again (each group's under its own key)
   where no device block holds that key, except a block right after a released slot (the released
   block's hash, its parent, left with it). */
KVB_API kvb_status kvb_seq_swap_in(kvb_manager* m, int64_t seq_id, int32_t* pairs, size_t capacity_pairs,
                                   size_t* num_pairs);

/* ------------------------------------------------------------------------------------------------ */
/* Host cache (KVB_CONFIG_HOST_CACHE): host blocks as a second prefix-cache level                    */
/* ------------------------------------------------------------------------------------------------ */

/* With KVB_CONFIG_HOST_CACHE, a cached device block that is evicted (taken from the free queue for new
   data) is first copied to a host block (write-back), which enters a host index keyed like the device
   one. kvb_seq_allocate(_ex) and kvb_seq_can_allocate(_ex) match the longest prefix across both levels,
   block by block along the chain (device first, else host; token comparison and whole-history keys in
   both). A host hit takes a free device block and a host -> device load; its tokens count as cached:
   the caller runs the loads before the step's forward pass, so they are computed from the step's point
   of view. OUT_OF_BLOCKS stays all-or-nothing (a host hit needs a free device block).
   Host blocks are shared with swapping: swapped-out sequences win (a swap out may evict cached host
   blocks; the cache never takes a swapped-out sequence's blocks). Which cached host block goes first
   (the host copies of blocks loaded back, up to host_cache_twin_percent, then the least recently used)
   and how KV cache groups use the host level (each group's blocks under its own key, a hit rule fed by
   both levels, a load per group that takes a host-hit block): docs/ARCHITECTURE.md, "Host tier".

   kvb_drain_host_transfers hands out every pending transfer at once, oldest first: offload_pairs
   (pairs[2*i] = device src, pairs[2*i+1] = host dst) and load_pairs (host src, device dst). Run them
   before anything overwrites their device blocks, in this order: all offloads, then all loads, then the
   copy-on-write copies (kvb_drain_copies) and swap-in pairs, then the forward step. Until drained, a
   load holds its source host block and its destination device block. With KV cache groups the loads of
   one allocation are listed group 0's first, each group in block order. Both capacities must suffice
   (KVB_ERR_BUFFER_TOO_SMALL sets both counts and drains nothing). */
KVB_API kvb_status kvb_drain_host_transfers(kvb_manager* m, int32_t* offload_pairs, size_t offload_capacity,
                                            size_t* num_offloads, int32_t* load_pairs, size_t load_capacity,
                                            size_t* num_loads);

/* ------------------------------------------------------------------------------------------------ */
/* Store tier: a third prefix-cache level below the host cache (blocks that outlive the process)     */
/* ------------------------------------------------------------------------------------------------ */

/* A store keeps blocks' bytes by key, outside the manager: a directory on a shared file system
   (kvb_store_dir_create below), a key-value server, another engine's cache. The manager never moves
   bytes: it tells the store which host block to read (put) or fill (get), and the host <-> device
   moves stay those of kvb_drain_host_transfers. Needs KVB_CONFIG_HOST_CACHE (the host blocks are the
   store's staging buffers); refused with KV cache groups (phase 1).

   Keys. A block's store key is its whole-history index key (128 bits: the parent's key, salt, tokens,
   extra key; see KVB_CONFIG_KEYED_INDEX) folded with the namespace: ns = XXH3-128 (seed 0) of the
   little-endian bytes "KVBSTNS1", dtype, block_size, num_layers, num_kv_heads, head_dim (u32 each),
   model_id (u64); for an FP8 dtype the tag is "KVBSTNS2" and the bytes go on with the scales the bytes
   were quantized with: for each layer, K's scale of each kv head then V's (num_layers * 2 *
   num_kv_heads f32 bit patterns, u32 each), from layer_scales or else k_scale / v_scale (so the same
   scales given either way fold alike); store key = XXH3-128 (seed 0) of [index key lo, hi, ns lo, hi]
   (4 x u64 LE). kvb_store_key_fold computes it. So blocks of a different layout, model, tenant (a
   tenant picks its own model_id or cache salt) or fp8 calibration never match. A keyed index with a
   random seed is refused (its keys mean nothing to another manager); an explicit index_seed is shared
   by the engines that know it.

   One store, one host cache, one manager. The host_block ids the callbacks get name blocks of the
   manager's host cache, so a store moves the bytes of exactly one host cache, for one manager: a table
   whose (user, put) pair is registered with another live manager is refused (KVB_ERR_BAD_STATE), and a
   table that states the memory it moves (num_host_blocks, block_bytes: the directory store does) is
   refused when that differs from the manager's host blocks or the namespace's block bytes
   (KVB_ERR_INVALID_ARGUMENT; a store built over the device cache has the device's block count).

   Lifetime rule. The library keeps no caller pointer after a call returns, EXCEPT what the caller
   registers explicitly for the manager's lifetime: kvb_manager_set_store copies the table, keeps its
   function pointers and `user` until the store is replaced (or removed) or the manager is destroyed,
   and never calls them after that. The caller keeps `user` (and the host memory the store reads and
   writes) valid until then.

   Callbacks run on the calling thread, inside the manager's lock: they must not call the manager. Each
   returns 0 for success and anything else for failure (counted in kvb_stats, never fatal). */
typedef struct kvb_store_key {
  uint64_t lo, hi;
} kvb_store_key;

typedef struct kvb_store_completion {
  uint64_t ticket;  /* the ticket the get was started with */
  int32_t  status;  /* 0: the host block holds the key's bytes, checked against the checksum stored with
                       them; anything else: missing, partial, corrupted or unreadable (the bytes in the
                       host block are then garbage and are never loaded) */
  uint32_t reserved;
} kvb_store_completion;

typedef enum kvb_store_flags {
  /* Also put each block when it reaches the host tier (its offload was drained, so run, by the next
     kvb_store_poll): the store gets blocks as soon as they leave the device, not only when the host
     tier drops them (write-back, always on). A block already put is not put again at its eviction. */
  KVB_STORE_WRITE_THROUGH = 1
} kvb_store_flags;

typedef struct kvb_store {
  uint32_t struct_size;
  uint32_t flags;  /* kvb_store_flags, default 0 (write-back only) */
  void* user;  /* passed to every callback */
  /* How many of keys[0..n) are stored, in order: *num_found = the k with keys[0..k) all present (the
     longest stored prefix). Side-effect free. A failure counts as 0 found. */
  int (*lookup)(void* user, const kvb_store_key* keys, size_t n, size_t* num_found);
  /* Store host block host_block's bytes under key. The bytes must be read (copied or written out)
     before put returns: the manager reuses the host block right after. Called when a cached host block
     is evicted (write-back). A refusal (nonzero) drops the block, counted in store_put_failures. */
  int (*put)(void* user, const kvb_store_key* key, int32_t host_block);
  /* Start filling host block host_block with key's bytes; report it through poll with this ticket
     (possibly at once). The host block stays reserved for the get until its completion is polled,
     however long that takes. A nonzero return is a failed get (no completion is then expected). */
  int (*get)(void* user, const kvb_store_key* key, int32_t host_block, uint64_t ticket);
  /* Completed gets since the last poll, at most capacity: *num_done written. Called by kvb_store_poll
     until it returns fewer than capacity. A nonzero return means the store gave up on every get in
     flight: the manager fails them all (their sequences recompute) and reuses their host blocks, so
     the store must write into none of them afterwards. */
  int (*poll)(void* user, kvb_store_completion* done, size_t capacity, size_t* num_done);
  /* --- fields below were added after the store tier's first layout; an older caller's struct_size
     omits them (then 0: not stated, not checked) --- */
  uint32_t num_host_blocks;  /* host blocks of the memory the store reads and writes; 0 = not stated, else
                                must equal the manager's num_host_blocks */
  uint32_t reserved;         /* 0 */
  uint64_t block_bytes;      /* bytes the store moves per block; 0 = not stated, else must equal the
                                namespace's (2 * dtype size * block_size * num_layers * num_kv_heads *
                                head_dim) */
} kvb_store;  /* may grow at the end */

/* What makes blocks' bytes compatible: the key namespace. */
typedef struct kvb_store_namespace {
  uint32_t struct_size;
  uint32_t dtype;         /* kvb_dtype */
  uint32_t block_size;    /* must equal the manager's */
  uint32_t num_layers;
  uint32_t num_kv_heads;
  uint32_t head_dim;
  uint64_t model_id;      /* chosen by the caller: a model, a revision, a tenant */
  /* --- fields below were added with fp8 scales in the namespace; an older caller's struct_size omits
     them (then the defaults hold). Read only for an FP8 dtype, where each scale must be finite and > 0:
     the cache's scales (kvb_cache_desc), since fp8 bytes are x / scale. --- */
  float    k_scale;       /* every layer's K scale; default 1.0 */
  float    v_scale;       /* every layer's V scale; default 1.0 */
  const float* layer_scales;  /* NULL (default: k_scale / v_scale everywhere) or num_layers * 2 *
                                 scales_per_layer floats in host memory, read during the call only: for
                                 each layer its K scales then its V scales */
  uint32_t scales_per_layer;  /* with layer_scales: 1 (one K and one V scale per layer) or num_kv_heads
                                 (per kv head, as kvb_cache_desc.k_head_scales) */
  uint32_t reserved;          /* 0 */
} kvb_store_namespace;    /* may grow at the end */

/* Fill defaults (everything 0, scales 1.0) and struct_size. */
KVB_API void kvb_store_init(kvb_store* store);
KVB_API void kvb_store_namespace_init(kvb_store_namespace* ns);
/* The store key of index key (lo, hi) under ns (see "Keys" above). KVB_ERR_INVALID_ARGUMENT for NULLs. */
KVB_API kvb_status kvb_store_key_fold(const kvb_store_namespace* ns, uint64_t index_key_lo, uint64_t index_key_hi,
                                      kvb_store_key* out);
/* Register store (NULL removes it) for blocks of namespace ns. lookup, put, get and poll are all
   required. Needs KVB_CONFIG_HOST_CACHE and no KV cache groups; a keyed index needs an explicit
   index_seed; the store must be no other manager's and match the host cache ("One store, one host
   cache, one manager" above). See the lifetime rule above.

   Removing or replacing a store abandons its gets in flight (a store that never completes can always
   be detached): each fails as if polled failed (its sequence is cut and recomputes), its host block is
   released at once, and it is counted in store_abandoned_gets (and store_get_failures). The old store
   is never called again, and must write into none of those host blocks afterwards (stop or destroy it
   first if it works in the background). Loads of gets already completed good stay pending as usual.

   What the manager does with it:
   - A cached host block that is evicted is put (write-back; its bytes must be in the host block: the
     engine has run the offloads it drained earlier). A block whose offload was never run is dropped.
     With KVB_STORE_WRITE_THROUGH, kvb_store_poll also puts the blocks whose offloads the previous
     kvb_drain_host_transfers handed out (still cached on the host).
   - kvb_seq_allocate(_ex) (and kvb_seq_can_allocate(_ex), with no side effect) continue the prefix match
     past the device and host levels with one batched lookup of the blocks after the first miss (not
     for sequences with a sliding window). Each store hit takes a free device block and a host block (an
     empty one, else a cached one is evicted; fewer host blocks cut the hits), counts as cached, and
     starts a get into the host block. The device blocks are held by the sequence but not indexed (no
     one else matches them) and the sequence is "filling": every call that would run, commit, extend,
     export, fork or swap it is refused with KVB_ERR_BAD_STATE until each of its gets is polled.
   - kvb_store_poll learns completions. A good get becomes a host -> device load (kvb_drain_host_transfers);
     the host block returns to the empty ones once that load is drained. A failed get (or a nonzero get
     return) cuts the sequence: its computed tokens become (that block's index) * block_size, so the engine
     recomputes from that block on; later store blocks of that sequence are recomputed too (their loads,
     if any, are overwritten by the step's own K/V writes). When a sequence's last get resolves, its good
     store blocks enter the device index.
   - A sequence freed while filling releases its device blocks at once; its host blocks stay reserved
     until their gets are polled.

   The engine's order of operations, each step:
     1. kvb_seq_allocate(...)                 new requests (store gets start)
     2. kvb_store_poll(m, &filling)           completions; failures shorten sequences
     3. kvb_seq_store_state(m, id, &computed, &filling) for each sequence to run: skip it this step while
        filling != 0; otherwise run it from `computed` (kvb_batch_export does this by itself)
     4. kvb_drain_host_transfers, run offloads then loads; then copies, export, forward, commit, append
   A sequence whose bytes are not all good is never exported, so nothing wrong is ever attended. */
KVB_API kvb_status kvb_manager_set_store(kvb_manager* m, const kvb_store* store, const kvb_store_namespace* ns);
/* Learn every completed get (see above); with KVB_STORE_WRITE_THROUGH, first put the blocks offloaded
   by the transfers drained before. *num_filling (may be NULL) = gets still in flight. */
KVB_API kvb_status kvb_store_poll(kvb_manager* m, size_t* num_filling);
/* Sequence seq_id's computed tokens now (its cached count at allocation, less what failed gets cut) and
   its gets in flight (0: it may run). */
KVB_API kvb_status kvb_seq_store_state(kvb_manager* m, int64_t seq_id, size_t* num_computed_tokens,
                                       size_t* num_filling);

/* The built-in directory store: one file per block, named by the store key's 32 hex digits (hi then lo)
   + ".kvb", under path (created if missing, with its missing parents, mode 0755). A file is a 64-byte header (magic "KVBSTOR1", format
   version, the store key, the payload size, an xxh64 checksum of the payload) and the payload. Writes
   go to a temporary file in the same directory, then rename() over the final name: readers on any
   machine of a shared file system see a whole file or none. A get checks magic, key, size and checksum.
   It is synchronous (the I/O happens in put and get; completions are reported at the next poll).
   The host memory: num_regions regions (e.g. K and V of every layer of the host cache), block b's
   bytes of region r at regions[r] + b * region_block_stride, region_block_bytes long; the payload is the
   regions' bytes in order. The regions array is copied; the memory it points to must stay valid until
   kvb_store_dir_destroy. */
typedef struct kvb_store_dir_config {
  uint32_t struct_size;
  uint32_t num_host_blocks;       /* host blocks in each region (host_block ids are checked) */
  const char* path;               /* directory; copied */
  void* const* regions;           /* [num_regions] host memory bases; the array is copied */
  size_t   num_regions;
  size_t   region_block_bytes;    /* bytes of one block in one region */
  size_t   region_block_stride;   /* bytes between blocks of a region; 0 = region_block_bytes */
} kvb_store_dir_config;           /* may grow at the end */

typedef struct kvb_store_dir kvb_store_dir;

KVB_API void kvb_store_dir_config_init(kvb_store_dir_config* cfg);
/* Create a directory store and fill *table (its callbacks, user = the store, and as far as table's
   struct_size reaches, num_host_blocks and block_bytes = num_regions * region_block_bytes, which
   kvb_manager_set_store checks against the manager) for kvb_manager_set_store. Register it with one
   manager at a time. */
KVB_API kvb_status kvb_store_dir_create(const kvb_store_dir_config* cfg, kvb_store_dir** out, kvb_store* table);
/* Destroy it (NULL is a no-op). Remove it from its manager first (kvb_manager_set_store(m, NULL, NULL)). */
KVB_API void kvb_store_dir_destroy(kvb_store_dir* dir);

/* ------------------------------------------------------------------------------------------------ */
/* Batch export for kernels                                                                          */
/* ------------------------------------------------------------------------------------------------ */

/* Prefix groups of a batch (shared-prefix, or "cascade", attention). Sequences of one step that hold the
   same block ids at the head of their block tables (forks, n > 1 sampling, beam search, a system prompt
   hit in the prefix cache) read the same K/V. A group is a set of >= 2 batch rows whose tables begin
   with the same shared_blocks[g] block ids; the kernels then attend every member's queries (all query
   heads) over those blocks once, as one matrix product, attend each member's own blocks (the rest of
   its table) as usual, and merge the two parts by log-sum-exp: the same function as the plain call.
   Two levels: the shared prefix of a group, then each member's own blocks. Groups are disjoint; a row
   in no group is an ordinary sequence.

   Export (kvb_batch.prefix_groups != NULL): the manager fills the description in O(total blocks) time,
   allocating nothing once warm. Only full blocks whose K/V are all computed count as shared (a partial
   last block, and blocks holding uncomputed tokens, are each member's own); a -1 entry (released by a
   sliding window) ends the sharing. Rows are grouped by the block id at column min_shared_blocks - 1,
   each candidate is checked against the first row of its group over columns 0 .. min_shared_blocks - 1
   (a candidate that differs stays ordinary), and shared_blocks[g] is the longest prefix common to all
   members; a candidate set of one row is no group. Groups come in the order of their first member,
   members in batch order. With KV cache groups the description is that of kvb_batch.group's tables.
   Every array is a caller buffer; num_seqs entries for members and num_seqs / 2 for groups always
   suffice. Too small: KVB_ERR_BUFFER_TOO_SMALL with num_groups and num_members set to the sizes needed.

   Kernels (kvb_attention_args.prefix_groups, kvb_prefill_args.prefix_groups; NULL or num_groups 0 =
   plain): the arrays are read on the host, during the call (never kept), for CPU and CUDA caches alike.
   A member row must have shared_blocks * block_size
   <= seq_lens[row] and, over the shared columns, the very block ids of the group's first member, every
   one in [0, num_blocks); a row in two groups is an error. Soft cap, window + sinks (each member's own
   window masks its part of the shared keys) and every dtype are as in the plain kernels; the work
   areas are allocated per call, like the CPU kernels' other scratch. CUDA caches: kvb_paged_attention
   (fp16 / bf16 / fp32) and kvb_prefill_attention (fp16 / bf16; fp32 runs the plain kernel); fp16 / bf16
   compute the shared part on tensor cores. The description's values travel in the launch parameters (a
   captured CUDA graph keeps those of capture time); its states need workspace, which
   kvb_paged_attention_workspace_size / kvb_prefill_attention_workspace_size count when
   args.prefix_groups is set; a description beyond the kernels' limits (more than 32 groups or 512
   members; fp32 decode: 32 query heads per kv head), or a workspace sized without it, runs the plain
   kernel (same results). On the device a member whose seq_len is below the
   shared tokens, or whose shared columns differ from the first member's, is a fault (NaN outputs,
   kvb_cuda_take_fault). FP8 caches (for now): the description is ignored and the plain kernel runs (same
   results, no speed-up yet).

   Worked example (block_size 16). Rows 0 and 2 forked from one 70-token prompt: their tables begin with
   the blocks 7 8 9 4 (64 computed tokens), then each has its own copy of the partial block (11, 12);
   row 1 is unrelated:
     block_tables  row 0: 7 8 9 4 11      seq_lens 71 (70 computed, then the decode token)
                   row 1: 5 6             seq_lens 20
                   row 2: 7 8 9 4 12      seq_lens 71
   kvb_batch_export with prefix_groups (min_shared_blocks 2) writes num_groups 1, num_members 2,
   group_start {0, 2}, members {0, 2}, shared_blocks {4}. kvb_paged_attention with the same struct then
   reads blocks 7 8 9 4 once for the 2 x num_q_heads queries of rows 0 and 2 (64 keys), reads 11 and 12
   for their own query heads (7 keys each) and row 1 as usual (20 keys), and merges row 0's two parts:
   with m_s, l_s, o_s (max logit, sum of exponentials, normalised output) of the shared part and m_o,
   l_o, o_o of the own part, out = (l_s e^(m_s - M) o_s + l_o e^(m_o - M) o_o) / (l_s e^(m_s - M) +
   l_o e^(m_o - M)), M = max(m_s, m_o).

   When grouping pays (policy KVB_PREFIX_GROUPS_AUTO, the default): reading the shared keys once saves
   their reads for every member but the first; it costs the product over all members' rows, a merge per
   row, and on the CPU a slower walk of the own keys than the plain kernel's. The export describes every
   candidate (min_shared_blocks is the least sharing a candidate needs); the kernel launch, which knows
   the device, runs each group only where its cost model expects it to be faster and the group's rows as
   ordinary rows otherwise (same results either way). Per group of R query rows (members' q_len summed),
   S shared tokens and own tokens o_i after them (member i has q_i rows), a group is kept when
     (1 - c) * S * R >= a * sum_i(q_i * o_i) + m * R,
   c the cost of one row and one shared key in the grouped product, a the extra cost of one own key, m
   the merge of one row (in keys), all relative to one key of one row in the plain kernel; c, a and m
   are the device's: measured per CPU vector path (AMX tiles, AVX-512, AVX2, portable), see
   docs/perf/kernels_cpu.md. CUDA (unmeasured: the constants are estimates on the same
   model) cannot read seq_lens on the host, so it takes each member's own part as
   max_blocks_per_seq * block_size - S, an upper bound that keeps fewer groups, never more.
   KVB_PREFIX_GROUPS_ALWAYS runs every group described (for tests and callers that measured their case). */
typedef enum kvb_prefix_groups_policy {
  KVB_PREFIX_GROUPS_AUTO = 0,   /* the kernels keep the groups their cost model expects to be faster */
  KVB_PREFIX_GROUPS_ALWAYS = 1  /* the kernels run every group described */
} kvb_prefix_groups_policy;

typedef struct kvb_prefix_groups {
  uint32_t struct_size;
  uint32_t min_shared_blocks;  /* export: least shared blocks that make a group (default 2; 0 counts as 1) */
  uint32_t group_capacity;     /* export: entries of shared_blocks (group_start holds group_capacity + 1) */
  uint32_t member_capacity;    /* export: entries of members */
  int32_t* group_start;        /* [num_groups + 1]: group g's members are members[group_start[g] ..
                                  group_start[g + 1]); group_start[0] = 0 */
  int32_t* members;            /* [num_members] batch rows (indexes into seq_ids / the kernels' rows) */
  int32_t* shared_blocks;      /* [num_groups] leading blocks every member of group g holds */
  uint32_t num_groups;         /* export: out; kernels: in */
  uint32_t num_members;        /* export: out (= group_start[num_groups]); kernels: not read */
  /* --- fields below were added after the first version; older callers' struct_size omits them (AUTO) --- */
  uint32_t policy;             /* kernels: kvb_prefix_groups_policy (default KVB_PREFIX_GROUPS_AUTO);
                                  export: not read, not written */
} kvb_prefix_groups;           /* may grow at the end */

/* Fill defaults (no buffers, min_shared_blocks 2, no groups, policy AUTO) and struct_size. */
KVB_API void kvb_prefix_groups_init(kvb_prefix_groups* groups);

typedef struct kvb_batch {
  uint32_t struct_size;
  uint32_t max_blocks_per_seq; /* columns of block_tables */
  int32_t* block_tables;       /* [num_seqs][max_blocks_per_seq], padded with -1; NULL = not wanted */
  int32_t* seq_lens;           /* [num_seqs] tokens per sequence; NULL = not wanted */
  int32_t* query_start;        /* [num_seqs + 1] prefix sums of uncomputed tokens; NULL = not wanted */
  int64_t* slot_mapping;       /* [slot_capacity]: block*block_size+offset of every uncomputed token, */
  size_t slot_capacity;        /*   sequence after sequence, then -1 up to slot_capacity; NULL = not wanted */
  size_t num_slots;            /* out: uncomputed tokens in the batch */
  uint32_t max_blocks_needed;  /* out: longest block table in the batch */
  /* --- fields below were added with KV cache groups; older callers' struct_size omits them --- */
  uint32_t group;              /* KV cache group whose block tables and slots are written (default 0);
                                  one call per group fills the inputs of that group's layers */
  /* --- fields below were added with prefix groups; older callers' struct_size omits them --- */
  kvb_prefix_groups* prefix_groups; /* NULL = not wanted; else filled as above (kvb_prefix_groups) */
  /* --- fields below were added with token trees; older callers' struct_size omits them --- */
  uint64_t* tree_mask;         /* [slot_capacity] one word per uncomputed row, in slot_mapping's order,
                                  then 0 up to slot_capacity; NULL = not wanted. A sequence with a pending
                                  tree: row i has bit j set iff node j is node i or one of its ancestors
                                  (see "Token trees"); any other sequence with q <= 64 rows: row i has
                                  bits 0..i (causal); more than 64 rows: 0 (the kernels treat such a
                                  sequence as causal and do not read its words) */
} kvb_batch;

/* Fill defaults (NULL outputs = not wanted, no columns, group 0) and struct_size. */
KVB_API void kvb_batch_init(kvb_batch* batch);
/* Fill the kernel inputs of one step for num_seqs distinct sequences (all on device) in one call; an id
   listed twice is refused (KVB_ERR_INVALID_ARGUMENT), as its tokens would be written twice.
   KVB_ERR_BUFFER_TOO_SMALL (with num_slots / max_blocks_needed set) when a buffer is too small. */
KVB_API kvb_status kvb_batch_export(kvb_manager* m, const int64_t* seq_ids, size_t num_seqs, kvb_batch* batch);

/* Decode step for many sequences in one call: append tokens[i] to sequence seq_ids[i], i < num_seqs.
   All-or-nothing: every id must exist, be on device and appear once, and the free queue must cover the
   whole batch (new blocks and copy-on-write copies) before anything changes; else nothing changes.
   Equivalent to kvb_seq_append(m, seq_ids[i], &tokens[i], 1) in order, refusals included: forked
   siblings that share a partial last block copy it in turn (k of them among h holders make
   min(k, h - 1) copies, the last writes in place), no watermark applies (as for kvb_seq_append), and
   a sliding window releases nothing here (only commits release, so kvb_batch_commit is where a
   windowed sequence gives blocks back; appending never counts on such releases). */
KVB_API kvb_status kvb_batch_append(kvb_manager* m, const int64_t* seq_ids, const int64_t* tokens, size_t num_seqs);
/* Commit num_tokens[i] tokens of sequence seq_ids[i] (NULL num_tokens = every uncomputed token of each).
   All-or-nothing like kvb_batch_append; equivalent to kvb_seq_commit for each in order. */
KVB_API kvb_status kvb_batch_commit(kvb_manager* m, const int64_t* seq_ids, const size_t* num_tokens, size_t num_seqs);

/* ------------------------------------------------------------------------------------------------ */
/* Statistics, events, prefix-cache control                                                          */
/* ------------------------------------------------------------------------------------------------ */

typedef struct kvb_stats {
  uint32_t struct_size;
  uint32_t block_size;
  uint64_t num_blocks;
  uint64_t free_blocks;        /* in the free queue (cached_free_blocks included) */
  uint64_t used_blocks;        /* ref count > 0 */
  uint64_t cached_free_blocks; /* free, but still findable by prefix */
  uint64_t num_seqs;           /* live sequences (swapped out included) */
  uint64_t query_tokens;       /* prompt tokens looked up by allocate */
  uint64_t hit_tokens;         /* of which were cache hits */
  uint64_t computed_tokens;    /* tokens committed (K/V written by the caller) */
  uint64_t evictions;          /* cached blocks reused for new data */
  uint64_t cow_copies;         /* copy-on-write pairs recorded */
  uint64_t swapped_out_blocks; /* blocks moved device -> host, cumulative */
  uint64_t swapped_in_blocks;  /* blocks moved host -> device, cumulative */
  uint64_t num_host_blocks;
  uint64_t free_host_blocks;
  uint64_t events_dropped;     /* events lost to a full event queue (or one that could not grow: out of
                                  host memory), cumulative */
  /* --- fields below were added with the host cache; older callers' struct_size omits them --- */
  uint64_t device_hit_tokens;  /* of hit_tokens, found on the device */
  uint64_t host_hit_tokens;    /* of hit_tokens, found on the host level (loaded back); with KV cache
                                  groups, the hit tokens whose block at least one group loaded */
  uint64_t offloaded_blocks;   /* device -> host copies handed out (kvb_drain_host_transfers), cumulative */
  uint64_t loaded_blocks;      /* host -> device copies handed out, cumulative */
  uint64_t host_evictions;     /* cached host blocks dropped for new content */
  uint64_t cached_host_blocks; /* host blocks holding cached content now (read by pending loads too) */
  /* --- fields below were added with the store tier; older callers' struct_size omits them --- */
  uint64_t store_hit_tokens;   /* of hit_tokens, found in the store at allocation (before any failure) */
  uint64_t store_put_blocks;   /* puts the store accepted, cumulative */
  uint64_t store_put_bytes;    /* ... times the namespace's block bytes */
  uint64_t store_put_failures; /* puts refused (the block was dropped), cumulative */
  uint64_t store_get_blocks;   /* gets completed good, cumulative */
  uint64_t store_get_bytes;    /* ... times the namespace's block bytes */
  uint64_t store_get_failures; /* gets failed (missing, corrupted, refused), cumulative */
  uint64_t store_recomputed_tokens; /* cached tokens that failed gets cut (recomputed), cumulative */
  uint64_t store_filling_blocks;    /* gets in flight now */
  uint64_t store_abandoned_gets;    /* gets in flight when their store was removed or replaced (failed,
                                       host blocks released), cumulative */
} kvb_stats;

/* Fill struct_size (everything else 0): the output struct that kvb_get_stats writes into. */
KVB_API void kvb_stats_init(kvb_stats* stats);
/* Snapshot of the counters (fields beyond the caller's struct_size are not written). */
KVB_API kvb_status kvb_get_stats(kvb_manager* m, kvb_stats* stats);

/* Events describe, per medium, the set of public hashes that the prefix index holds. Blocks with different histories
   can share a public xxh64 hash (the index keeps them apart by key): STORED is emitted when the first
   indexed block with a hash enters the index (its parent, tokens and extra key are reported), REMOVED
   when the last indexed block with that hash leaves it. So each hash alternates STORED, REMOVED. */
typedef enum kvb_event_type {
  KVB_EVENT_BLOCK_STORED = 1,  /* a public hash entered the index */
  KVB_EVENT_BLOCK_REMOVED = 2, /* a public hash left the index (no indexed block carries it any more) */
  KVB_EVENT_ALL_CLEARED = 3    /* the index was emptied (kvb_reset_prefix_cache) */
} kvb_event_type;

typedef enum kvb_parent_kind {
  KVB_PARENT_NONE = 0,  /* first block, no salt */
  KVB_PARENT_BLOCK = 1, /* parent_hash is the previous block's hash */
  KVB_PARENT_SALT = 2   /* first block; parent_hash holds the cache salt */
} kvb_parent_kind;

typedef struct kvb_event {
  uint32_t type;          /* kvb_event_type */
  uint32_t parent_kind;   /* kvb_parent_kind (STORED) */
  uint64_t block_hash;    /* public xxh64 chain hash (STORED, REMOVED) */
  uint64_t parent_hash;   /* see parent_kind (STORED) */
  uint64_t extra_key;     /* valid when has_extra_key (STORED) */
  uint32_t has_extra_key;
  uint32_t num_tokens;    /* = block size (STORED), else 0 */
  size_t   token_offset;  /* the block's tokens are tokens[token_offset .. +num_tokens) (STORED) */
  int32_t  block_id;      /* block (STORED, REMOVED), on the medium below */
  uint32_t medium;        /* kvb_medium: where the block lives (vLLM's "GPU" / "CPU") */
} kvb_event;

/* KVB_MEDIUM_STORE: a STORED event for each put the store accepted (block_id = the host block it was
   read from); the store's contents outlive the manager, so no REMOVED follows. */
typedef enum kvb_medium { KVB_MEDIUM_DEVICE = 0, KVB_MEDIUM_HOST = 1, KVB_MEDIUM_STORE = 2 } kvb_medium;

/* Drain events in order: as many as fit in events[capacity] and tokens[token_capacity].
   *num_events = drained (0 = queue empty); *dropped (may be NULL) = events lost since the last drain. */
KVB_API kvb_status kvb_drain_events(kvb_manager* m, kvb_event* events, size_t capacity, int64_t* tokens,
                                    size_t token_capacity, size_t* num_events, uint64_t* dropped);
/* kvb_drain_events with the KV cache group of each event: groups[i] (uint32_t[capacity], may be NULL)
   is the group of events[i] (0 for ALL_CLEARED and without groups). kvb_event itself does not grow (it
   is an array element of the caller's size), so a manager with several groups refuses the plain
   kvb_drain_events (KVB_ERR_BAD_STATE): an event without its group would be ambiguous there. */
KVB_API kvb_status kvb_drain_events_group(kvb_manager* m, kvb_event* events, uint32_t* groups, size_t capacity,
                                          int64_t* tokens, size_t token_capacity, size_t* num_events,
                                          uint64_t* dropped);
/* Empty the prefix index (every block forgets its hash). Refused with KVB_ERR_BAD_STATE while any block
   is in use, so no running sequence can lose its cached prefix mid-flight (vLLM's contract). */
KVB_API kvb_status kvb_reset_prefix_cache(kvb_manager* m);

/* ------------------------------------------------------------------------------------------------ */
/* Kernels: write K/V, paged decode and prefill attention, copy and swap blocks (CPU / CUDA)     */
/* ------------------------------------------------------------------------------------------------ */


/* 12.1 Caches ---------------------------------------------------------------------------------- */
/* Strides everywhere below are in elements, never negative (refused: no kernel walks backwards), and 0
   selects the dense default. Every call checks, with overflow-checked arithmetic, that the largest
   element offset any (block, token, head, dim) or (sequence, head, dim) reaches in each tensor it touches
   (cache k/v, q, out, key, value) is below 2^60 elements and that the tensor does not wrap the address
   space; otherwise KVB_ERR_INVALID_ARGUMENT names the stride. */
typedef enum kvb_device_type { KVB_DEVICE_CPU = 0, KVB_DEVICE_CUDA = 1 } kvb_device_type;
/* FP8 caches (E4M3 = OCP "e4m3fn": bias 7, no inf, NaN 0x7f/0xff, max 448; E5M2: bias 15, max 57344)
   store one byte per element: stored = RNE_fp8(fl32(x / scale)) with the cache's k_scale / v_scale (or
   its per-kv-head scales), i.e. one fp32 division rounded to nearest even, then rounded to nearest even
   (ties to the even code) to fp8 and SATURATED to the finite range: |x / scale| beyond the largest finite
   value, +-inf included, stores +-448 (e4m3) / +-57344 (e5m2). The e5m2 inf codes are never written (the
   same choice as vLLM's scaled conversion and the hardware cvt with .satfinite; torch's plain
   .to(float8_e5m2) keeps inf, and .to(float8_e4m3fn) turns overflow into NaN, unlike this rule). NaN
   stores NaN (sign | 0x7f in both formats); -0 stores 0x80; magnitudes at or below half the smallest
   subnormal (e4m3 2^-10, e5m2 2^-17) store +-0. CPU and CUDA write the same bytes. Reading dequantizes
   exactly: value = fp8 * scale in fp32, accumulation in fp32. An fp8 cache has its own query dtype
   (kvb_attention_args.q_dtype, kvb_prefill_args.q_dtype) and input dtype (kvb_write_kv_args.input_dtype). */
typedef enum kvb_dtype {
  KVB_DTYPE_FP16 = 0,
  KVB_DTYPE_BF16 = 1,
  KVB_DTYPE_FP32 = 2,
  KVB_DTYPE_FP8_E4M3 = 3,
  KVB_DTYPE_FP8_E5M2 = 4
} kvb_dtype;

/* One layer's K and V caches: [num_blocks, block_size, num_kv_heads, head_dim] by default (NHD). Strides
   are in elements (0 = dense NHD); head_dim elements are contiguous. K and V share shape and strides. */
typedef struct kvb_cache_desc {
  uint32_t struct_size;
  uint32_t device_type;   /* kvb_device_type, default CPU */
  int32_t  device_index;  /* CUDA device ordinal (0 for CPU) */
  uint32_t dtype;         /* kvb_dtype, default FP16 */
  void*    k;             /* K cache base */
  void*    v;             /* V cache base */
  uint32_t num_blocks;
  uint32_t block_size;    /* tokens per block: a power of two, 1..1024 */
  uint32_t num_kv_heads;
  uint32_t head_dim;
  int64_t  block_stride;  /* elements between blocks; 0 = block_size * token_stride */
  int64_t  token_stride;  /* elements between tokens of a block; 0 = num_kv_heads * head_stride */
  int64_t  head_stride;   /* elements between heads of a token; 0 = head_dim */
  uint32_t alloc_kind;    /* set by kvb_cache_alloc (kvb_cache_alloc_kind); 0 = memory owned by the caller */
  uint32_t reserved;
  /* --- fields below were added with FP8 caches (KVB_0.2); older callers' struct_size omits them (then
     the defaults hold). Read only for an FP8 dtype, where each scale must be finite and > 0. --- */
  float    k_scale;       /* stored K = x / k_scale (see kvb_dtype); default 1.0 */
  float    v_scale;       /* stored V = x / v_scale; default 1.0 */
  const float* k_head_scales;  /* NULL (default) or num_kv_heads floats in HOST memory, even for a CUDA
                                  cache: the scale of each kv head, replacing k_scale. Read during each
                                  call that is handed the descriptor, never kept (CUDA kernels get the
                                  values by value in their launch parameters, so a captured CUDA graph
                                  keeps the values of capture time); on CUDA at most 128 kv heads */
  const float* v_head_scales;  /* the same for V */
} kvb_cache_desc;

typedef enum kvb_cache_alloc_kind {
  KVB_ALLOC_NONE = 0,        /* caller-owned memory */
  KVB_ALLOC_CUDA = 1,        /* cudaMalloc */
  KVB_ALLOC_HOST_PINNED = 2, /* cudaHostAlloc (page-locked, mapped): the fast path of kvb_swap_blocks */
  KVB_ALLOC_HOST = 3         /* plain aligned host memory (no CUDA driver or not built with CUDA) */
} kvb_cache_alloc_kind;

/* Fill defaults (CPU, FP16, NULL pointers, zero shape, dense strides, scales 1.0) and struct_size. */
KVB_API void kvb_cache_desc_init(kvb_cache_desc* desc);
/* Allocate K and V for the shape, device and dtype in *desc (strides must be 0: dense NHD); fills k, v,
   strides and alloc_kind. CUDA: device memory; CPU: page-locked when a CUDA device is usable. */
KVB_API kvb_status kvb_cache_alloc(kvb_cache_desc* desc);
/* Free memory from kvb_cache_alloc and clear k and v. Caller-owned memory (alloc_kind 0) is refused. */
KVB_API kvb_status kvb_cache_free(kvb_cache_desc* desc);
/* Usable CUDA devices (0 when there is no driver or device). KVB_ERR_UNSUPPORTED (count 0) if built
   without CUDA. */
KVB_API kvb_status kvb_cuda_device_count(int32_t* count);


/* 12.2 Write K/V ------------------------------------------------------------------------------- */
/* New K and V of num_tokens tokens into the cache, token i at slot slot_mapping[i] (block*block_size +
   offset; -1 = skip). key/value in the cache's dtype (an FP8 cache: in input_dtype, quantized as kvb_dtype
   states) and on its device; strides in elements, 0 = dense. */
typedef struct kvb_write_kv_args {
  uint32_t struct_size;
  uint32_t input_dtype;         /* FP8 cache only: kvb_dtype of key/value, FP16 (default 0), BF16 or FP32;
                                   ignored for other caches (was `reserved`, zeroed by every _init) */
  size_t   num_tokens;
  const void* key;              /* [num_tokens, num_kv_heads, head_dim] */
  const void* value;            /* [num_tokens, num_kv_heads, head_dim] */
  int64_t  key_token_stride;    /* 0 = num_kv_heads * head_dim */
  int64_t  key_head_stride;     /* 0 = head_dim */
  int64_t  value_token_stride;  /* 0 = num_kv_heads * head_dim */
  int64_t  value_head_stride;   /* 0 = head_dim */
  const int64_t* slot_mapping;  /* [num_tokens]; other slots outside [0, num_blocks * block_size) are an
                                   error (CPU: the call fails, nothing written; CUDA: that token is not
                                   written and the fault is recorded, see kvb_cuda_take_fault) */
} kvb_write_kv_args;

/* Fill defaults (everything 0: NULL pointers, no tokens, dense strides) and struct_size. */
KVB_API void kvb_write_kv_args_init(kvb_write_kv_args* args);
/* reshape_and_cache: scatter new K/V into the cache on stream (CUDA; ignored on CPU). */
KVB_API kvb_status kvb_write_kv(const kvb_cache_desc* cache, const kvb_write_kv_args* args, void* stream);


/* 12.3 Decode attention ------------------------------------------------------------------------ */
/* Paged decode attention: one query token per sequence over its cached tokens. q and out in the cache's
   dtype (an FP8 cache: in q_dtype), everything on the cache's device; strides in elements (0 = dense).
   FP8 caches on CUDA: q_dtype FP16 or BF16 (FP32: KVB_ERR_UNSUPPORTED); K/V are read as bytes (half the
   bytes of fp16) and converted exactly (the cvt instruction on sm_89+, integer operations on sm_80). */
typedef struct kvb_attention_args {
  uint32_t struct_size;
  uint32_t num_seqs;
  uint32_t num_q_heads;         /* a multiple of num_kv_heads (GQA / MQA) */
  uint32_t max_blocks_per_seq;  /* columns of block_tables */
  const void* q;                /* [num_seqs, num_q_heads, head_dim] */
  int64_t  q_seq_stride;        /* 0 = num_q_heads * head_dim */
  int64_t  q_head_stride;       /* 0 = head_dim */
  void*    out;                 /* [num_seqs, num_q_heads, head_dim], every element written */
  int64_t  out_seq_stride;      /* 0 = num_q_heads * head_dim */
  int64_t  out_head_stride;     /* 0 = head_dim */
  const int32_t* block_tables;  /* [num_seqs, max_blocks_per_seq] */
  const int32_t* seq_lens;      /* [num_seqs] tokens in the cache per sequence (0 = output zeros) */
  float    scale;               /* logits = scale * q.k, default 1/sqrt(head_dim) if left 0 */
  float    logits_soft_cap;     /* > 0: logits = cap * tanh(logits / cap); 0 = off */
  uint32_t window_tokens;       /* > 0: attend only the last window_tokens tokens (plus sinks); 0 = all */
  uint32_t sink_tokens;         /* with a window: the first sink_tokens tokens are attended too */
  void*    workspace;           /* kvb_paged_attention_workspace_size() bytes on the device (may be NULL if 0) */
  size_t   workspace_size;
  /* --- fields below were added with FP8 caches (KVB_0.2); older callers' struct_size omits them --- */
  uint32_t q_dtype;             /* FP8 cache only: kvb_dtype of q and out, FP16 (default 0), BF16 or FP32
                                   (FP32: CPU only); ignored for other caches (q, out in the cache dtype) */
  uint32_t reserved2;
  const kvb_prefix_groups* prefix_groups; /* NULL = plain; else shared-prefix attention (see kvb_prefix_groups);
                                             also KVB_0.2 */
} kvb_attention_args;

/* Fill defaults (everything 0: dense strides, default scale, no window, no soft cap, no workspace) and
   struct_size. */
KVB_API void kvb_attention_args_init(kvb_attention_args* args);
/* Bytes of workspace kvb_paged_attention needs for these shapes (depends on num_seqs, num_q_heads,
   max_blocks_per_seq and the cache shape only; pointers are not read, except the host arrays of
   args.prefix_groups for a CUDA cache, whose shared-prefix path needs more). A size that does not fit size_t
   is KVB_ERR_INVALID_ARGUMENT. */
KVB_API kvb_status kvb_paged_attention_workspace_size(const kvb_cache_desc* cache, const kvb_attention_args* args,
                                                      size_t* bytes);
/* Decode attention on stream: no allocation, no host synchronisation (CUDA-graph capturable). On the CPU
   the vector code path (AVX-512 with AVX512-BF16, AVX-512, AVX2+FMA+F16C, or portable) is chosen once at
   run time; the environment variable KVB_CPU_ISA=avx512bf16|avx512|avx2|baseline narrows it (for testing
   and comparisons). With prefix_groups, the shared-prefix product of fp16 / bf16 caches also runs on
   AMX-BF16 tiles where the CPU and OS allow it (KVB_CPU_ISA unset or amx; any of the four names above
   turns the tiles off).
   seq_lens[s] must be in [0, max_blocks_per_seq * block_size], and every block_tables entry of a block
   that holds an attended token (inside the window, or a sink) in [0, num_blocks) (-1 there is an error
   too: only blocks wholly outside the window may read -1, and those entries are never read). CPU checks
   this before anything is written and fails the call; CUDA checks the same on the device (see
   kvb_cuda_take_fault): the outputs of a faulty sequence are NaN. */
KVB_API kvb_status kvb_paged_attention(const kvb_cache_desc* cache, const kvb_attention_args* args, void* stream);
/* The CPU kernels' vector code path now (see kvb_paged_attention and KVB_CPU_ISA): "avx512bf16" (AVX-512
   with AVX512-BF16; decode on a bf16 cache takes its q.k products as bf16 pair dot products there),
   "avx512", "avx2" (AVX2 + FMA + F16C) or "baseline" (portable), with "+amx" appended while AMX-BF16 tiles
   serve the shared-prefix product and the prefill rows. A static string, never NULL. */
KVB_API const char* kvb_cpu_isa(void);


/* 12.4 Prefill attention ----------------------------------------------------------------------- */
/* Paged prefill / extend attention over a ragged batch: every sequence brings q_len_i >= 0 new query
   tokens (a prompt, a chunk of one, speculative draft tokens or a single decode token: one call serves
   a batch that mixes them), whose K/V are already in the cache (kvb_write_kv). Positions: with
   q_len_i = query_start[i+1] - query_start[i], query row query_start[i] + j (0 <= j < q_len_i) is the
   token at absolute position pos = seq_lens[i] - q_len_i + j of sequence i; it attends causally to the
   cached positions t <= pos, limited (window_tokens > 0) to t > pos - window_tokens plus the sinks
   t < sink_tokens.

   Worked example (block_size 16): a 100-token prompt whose first 32 tokens hit the prefix cache
   (kvb_seq_allocate reports 32 cached). In one step, kvb_batch_export writes seq_lens {100} and
   query_start {0, 68}: query row j (0..67) is position 32 + j and sees positions 0 .. 32 + j.
   Chunked into 40 + 28 new tokens instead, the engine passes
     chunk 1: query_start {0, 40}, seq_lens {72} (32 cached + 40 new, their K/V written first):
              row j is position 32 + j and sees 0 .. 32 + j; then kvb_seq_commit(40);
     chunk 2: query_start {0, 28}, seq_lens {100}: row j is position 72 + j and sees 0 .. 72 + j.
   With window_tokens 64 and sink_tokens 4, the last row (position 99) sees 0..3 and 36..99.
   Decode is the case q_len_i = 1: the row is position seq_lens[i] - 1 and sees the whole sequence,
   exactly what kvb_paged_attention computes.
   A token tree (tree_mask below): 3 draft nodes after 20 committed tokens, nodes 1 and 2 both children
   of node 0, written at positions 20, 21, 22: seq_lens {23}, query_start {0, 3}, tree_mask {0b001,
   0b011, 0b101} (ancestor-or-self bits). Row 0 sees 0..20, row 1 sees 0..21, row 2 sees 0..20 and 22
   but not its sibling at 21.

   Work layout on CUDA (no host read of query_start, seq_lens or block_tables, so a captured CUDA graph
   replays correctly after their contents change, as long as num_seqs, total_q_tokens and
   max_blocks_per_seq are those captured; pad with sequences of 0 new and 0 cached tokens): query rows
   are packed (token, query head of the GQA group) per kv head and cut into tiles of 128 packed rows.
   Sequence i owns the tiles [b_i, b_i+1) with b_i = floor(query_start[i] * group / 128) + i, which is
   computable from query_start alone and leaves every sequence enough tiles; the grid has
   b_num_seqs = floor(total_q_tokens * group / 128) + num_seqs tiles per kv head (and per key split) and
   each CTA finds its sequence by binary search over query_start; surplus tiles exit at once. When that grid is too small to fill a GPU and the cache is
   long, the key range is split into partitions written to the workspace and merged by a second
   kernel (flash-decoding style), so the workspace size depends on the shapes below and the device.
   fp16 / bf16 use tensor cores (mma.sync m16n8k16, fp32 accumulation); fp32 uses CUDA cores.
   Hopper kernel (opt-in, not yet run on a GPU): with the environment variable KVB_CUDA_PREFILL=hopper
   (read once per process), on a compute capability 9.0 device, calls with head_dim 128, an fp16 / bf16
   cache and one key split (the workspace size says none: plan 0 bytes) run an sm_90a kernel (wgmma
   from shared memory, a producer warpgroup loading K/V pages with cp.async into an mbarrier ring, two
   consumer warpgroups; same contract, faults and outputs); every other call, and every call without
   the variable, runs the portable kernel. The first call that asks notes on stderr whether it runs.
   On the CPU the work items are (sequence, kv head, query tile), threaded for large calls; rows of
   q_len 1 (decode rows, alone or in a mixed batch) run the decode kernel's items instead, so their
   outputs are kvb_paged_attention's on the same rows, bit for bit. */
typedef struct kvb_prefill_args {
  uint32_t struct_size;
  uint32_t num_seqs;
  uint32_t num_q_heads;         /* a multiple of num_kv_heads (GQA / MQA) */
  uint32_t max_blocks_per_seq;  /* columns of block_tables */
  uint32_t total_q_tokens;      /* rows of q and out; must equal query_start[num_seqs] (given because
                                   the host cannot read a device query_start; checked as below) */
  uint32_t q_dtype;             /* FP8 cache only: kvb_dtype of q and out, FP16 (default 0), BF16 or FP32
                                   (FP32: CPU only; CUDA: KVB_ERR_UNSUPPORTED); ignored for other caches
                                   (was `reserved`, zeroed by every _init). CUDA FP8 caches: K/V read as
                                   bytes, converted exactly to q's type in shared memory (cvt on sm_89+,
                                   integer operations on sm_80) for the fp16 / bf16 tensor-core kernel */
  const void* q;                /* [total_q_tokens, num_q_heads, head_dim] */
  int64_t  q_token_stride;      /* 0 = num_q_heads * head_dim */
  int64_t  q_head_stride;       /* 0 = head_dim */
  void*    out;                 /* [total_q_tokens, num_q_heads, head_dim], every row written */
  int64_t  out_token_stride;    /* 0 = num_q_heads * head_dim */
  int64_t  out_head_stride;     /* 0 = head_dim */
  const int32_t* query_start;   /* [num_seqs + 1], query_start[0] = 0, non-decreasing (kvb_batch_export) */
  const int32_t* seq_lens;      /* [num_seqs] tokens in the cache INCLUDING the new ones (>= q_len_i) */
  const int32_t* block_tables;  /* [num_seqs, max_blocks_per_seq] */
  float    scale;               /* logits = scale * q.k, default 1/sqrt(head_dim) if left 0 */
  float    logits_soft_cap;     /* > 0: logits = cap * tanh(logits / cap); 0 = off */
  uint32_t window_tokens;       /* > 0: a row at pos attends only t > pos - window_tokens (plus sinks) */
  uint32_t sink_tokens;         /* with a window: the first sink_tokens tokens are attended too */
  void*    workspace;           /* kvb_prefill_attention_workspace_size() bytes on the device, 16-byte
                                   aligned (may be NULL if 0) */
  size_t   workspace_size;
  /* --- fields below were added after KVB_0.1 (kvb_prefill_args_init@KVB_0.2); older callers' struct_size
     (128 bytes) omits them, and they take their default --- */
  uint32_t allow_tf32;          /* nonzero: an fp32 cache on CUDA may use TF32 tensor cores (sm_80+): q, k, v
                                   and the softmax weights are rounded to TF32 (8-bit exponent, 10-bit
                                   mantissa: ~1e-3 relative error per element; results typically within
                                   ~1e-3 relative of fp32) with fp32 accumulation, several times faster.
                                   0 (default): exact fp32 arithmetic. Ignored for fp16 / bf16 caches and on
                                   the CPU (always fp32). */
  uint32_t reserved2;           /* 0 */
  const kvb_prefix_groups* prefix_groups; /* NULL = plain; else shared-prefix attention (see kvb_prefix_groups);
                                             also KVB_0.2 */
  /* --- fields below were added with token trees; older callers' struct_size omits them (then NULL) --- */
  const uint64_t* tree_mask;    /* NULL = no trees (causal rows, as above); else [total_q_tokens] words, host
                                   memory for a CPU cache, device memory for a CUDA one (read during the
                                   call / the launch, never kept): for a sequence with q_len_i <= 64, row j
                                   (position p = seq_lens[i] - q_len_i + j) attends every key before
                                   seq_lens[i] - q_len_i (the committed prefix), itself, and the new key at
                                   position seq_lens[i] - q_len_i + b, b < j, iff bit b of
                                   tree_mask[query_start[i] + j] is set; bit j and the bits above it are
                                   not read (a node sees itself; its ancestors come before it, so a
                                   q_len_i = 1 row is a plain decode row). Window and sinks, when set, further limit every key by the row's
                                   position p as for causal rows. Causal words (row j: bits 0..j) give
                                   exactly the causal result, so one call mixes trees, chains, decode rows
                                   and prefills; a sequence with q_len_i > 64 is causal and its words are
                                   not read. A tree mask with prefix_groups (num_groups > 0) is refused
                                   (KVB_ERR_UNSUPPORTED); on CUDA it always runs the portable kernel. */
} kvb_prefill_args;

/* Fill defaults (everything 0: dense strides, default scale, no window, no soft cap) and struct_size. */
KVB_API void kvb_prefill_args_init(kvb_prefill_args* args);
/* Bytes of workspace kvb_prefill_attention needs: a function of the cache (device, dtype, shape), num_seqs,
   num_q_heads, max_blocks_per_seq and total_q_tokens only; pointers are not read. 0 on the CPU. */
KVB_API kvb_status kvb_prefill_attention_workspace_size(const kvb_cache_desc* cache, const kvb_prefill_args* args,
                                                        size_t* bytes);
/* Prefill / extend attention on stream: no allocation, no host synchronisation (CUDA-graph capturable).
   query_start (0 at 0, non-decreasing, total_q_tokens at num_seqs), seq_lens (q_len_i <= seq_lens[i] <=
   max_blocks_per_seq * block_size) and the block ids of every block holding a token some row attends
   (in [0, num_blocks); blocks wholly outside every row's window may read -1) must be valid. CPU checks
   them before anything is written and fails the call; CUDA checks the same on the device (see
   kvb_cuda_take_fault): the rows of a faulty sequence (for a block id: of the query tile that met it)
   are NaN. CUDA also needs q and out 16-byte aligned with strides a multiple of 16 bytes.
   CPU: rows of q_len 1 run the decode kernel (the same outputs as kvb_paged_attention on those rows);
   the others run on the vector code path of kvb_paged_attention (KVB_CPU_ISA), their products for fp16 /
   bf16 / fp8 caches on AMX-BF16 tiles where the CPU and OS allow it (operands split into bf16 high and
   low parts where they are not exact in bf16: fp16-level accuracy or better; the softmax in fp32). */
KVB_API kvb_status kvb_prefill_attention(const kvb_cache_desc* cache, const kvb_prefill_args* args, void* stream);


/* 12.5 Copy and swap blocks -------------------------------------------------------------------- */
/* Copy blocks pairs[2*i] -> pairs[2*i+1] (host int32 array, as from kvb_drain_copies) in every one of
   num_layers caches (same shape, dtype, strides and device), in one launch where it fits. */
KVB_API kvb_status kvb_copy_blocks(const kvb_cache_desc* layers, size_t num_layers, const int32_t* pairs,
                                   size_t num_pairs, void* stream);

/* Copy token slots (block * block_size + offset) within each of num_layers caches: the K and V rows (every
   kv head, the cache's own bytes, any dtype) of slot pairs[2*i] go to slot pairs[2*i+1], in every layer
   (same shape, dtype, strides and device), on stream: token-tree compaction moves the accepted nodes
   to consecutive positions this way. pairs is a host array, read during the call and never kept (on
   CUDA the pairs travel in the launch parameters, so a captured CUDA graph replays the pairs of capture
   time; no device buffer, no allocation, no host synchronisation).
   Semantics: every pair reads its source as it was before the call (all reads happen before any write),
   so a slot may be the destination of one pair and the source of others (a compaction moves node 5 onto
   slot 2 while node 2 moves onto slot 1). Refused (KVB_ERR_INVALID_ARGUMENT, nothing copied): a slot
   outside [0, num_blocks * block_size), a pair with source == destination, a destination written twice,
   and a group of more than 64 pairs linked through their slots (pair a links to pair b when a reads the
   slot b writes; a tree's compaction is one group of at most 63 pairs). */
KVB_API kvb_status kvb_copy_slots(const kvb_cache_desc* layers, size_t num_layers, const int64_t* pairs,
                                  size_t num_pairs, void* stream);

typedef enum kvb_swap_flags {
  KVB_SWAP_AUTO = 0,        /* pick the faster method */
  KVB_SWAP_USE_MEMCPY = 1,  /* batched cudaMemcpy(2D)Async, consecutive blocks merged */
  KVB_SWAP_USE_KERNEL = 2   /* one copy kernel over page-locked mapped host memory */
} kvb_swap_flags;

/* Copy block pairs[2*i] of src_layers[l] to block pairs[2*i+1] of dst_layers[l] for every layer
   (device <-> host, any direction; same shape and dtype) on stream. Host memory should be page-locked. */
KVB_API kvb_status kvb_swap_blocks(const kvb_cache_desc* src_layers, const kvb_cache_desc* dst_layers,
                                   size_t num_layers, const int32_t* pairs, size_t num_pairs, uint32_t flags,
                                   void* stream);

/* 12.6 CUDA input faults ----------------------------------------------------------------------- */
/* CUDA input faults. A CUDA kernel reads seq_lens, block_tables and slot_mapping on the device after the
   launching call has returned, so it cannot fail that call. It checks exactly what the CPU kernel checks
   before running (see kvb_paged_attention and kvb_write_kv_args.slot_mapping), never reads or writes
   through a bad value, makes the result visibly wrong (NaN outputs for every head of a faulty sequence;
   a faulty slot's token is not written), and records the first fault per device (plus a count) in a
   device-side record that stays until kvb_cuda_take_fault reads it. */
typedef enum kvb_fault_kind {
  KVB_FAULT_NONE = 0,
  KVB_FAULT_SEQ_LEN = 1,   /* seq_lens[index] = value is negative or longer than the block table (prefill:
                              or shorter than the sequence's query rows) */
  KVB_FAULT_BLOCK_ID = 2,  /* block_tables[index][column] = value is not in [0, num_blocks) where attended */
  KVB_FAULT_SLOT = 3,      /* slot_mapping[index] = value is neither -1 nor in [0, num_blocks * block_size) */
  KVB_FAULT_QUERY_START = 4 /* query_start[index] = value breaks 0 = query_start[0] <= query_start[1] <= ...
                               <= query_start[num_seqs] = total_q_tokens (kvb_prefill_attention) */
} kvb_fault_kind;

typedef enum kvb_kernel_id {
  KVB_KERNEL_NONE = 0,
  KVB_KERNEL_WRITE_KV = 1,
  KVB_KERNEL_PAGED_ATTENTION = 2,
  KVB_KERNEL_PREFILL_ATTENTION = 3
} kvb_kernel_id;

typedef struct kvb_kernel_fault {
  uint32_t struct_size;
  uint32_t kind;    /* kvb_fault_kind of the first fault since the last take; KVB_FAULT_NONE if none */
  uint32_t kernel;  /* kvb_kernel_id that found it */
  uint32_t reserved;
  int64_t  index;   /* SEQ_LEN, BLOCK_ID: the sequence (row of block_tables); SLOT: the token */
  int64_t  column;  /* BLOCK_ID: the block-table column; -1 otherwise */
  int64_t  value;   /* the faulty seq_len, block id or slot */
  uint64_t count;   /* faulty work items since the last take (a CTA per sequence part or token; >= 1) */
} kvb_kernel_fault;

/* Fill defaults (no fault) and struct_size. */
KVB_API void kvb_kernel_fault_init(kvb_kernel_fault* fault);
/* Waits for the work queued on stream (a cudaStream_t, NULL = default stream) of CUDA device
   device_index, then reads and clears that device's fault record into *fault (only the fields its
   struct_size covers). KVB_OK with kind KVB_FAULT_NONE when no kernel met bad input;
   KVB_ERR_INVALID_ARGUMENT with *fault filled and kvb_last_error() naming the first fault otherwise.
   Like cudaGetLastError it consumes what it reports, the one exception to "a failed call changes
   nothing". It synchronises the stream, so call it outside graph capture (e.g. once per engine step, or
   in debug runs). A fault of work still running on another stream may be reported by a later call.
   KVB_ERR_UNSUPPORTED when built without CUDA, KVB_ERR_DEVICE when no usable device or driver. */
KVB_API kvb_status kvb_cuda_take_fault(int32_t device_index, void* stream, kvb_kernel_fault* fault);

#ifndef KVB_CDEF
#ifdef __cplusplus
}
#endif
#endif

#endif /* KVBLOCK_H */
