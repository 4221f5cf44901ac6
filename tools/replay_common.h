/* replay_common.h - what the sequential (sequential.c) and the timed (timed.c) replays share: the
   options, the default pool size, the manager, and the stderr notes about requests that do not fit. */
#ifndef KVBLOCK_TOOL_REPLAY_COMMON_H
#define KVBLOCK_TOOL_REPLAY_COMMON_H

#include <stdint.h>
#include <stdio.h>

#include "kvblock.h"
#include "trace.h"

#define REPLAY_MAX_DEFAULT_BLOCKS 4194304u /* cap of the default --num-blocks */
#define REPLAY_MAX_GROUPS 8

typedef struct replay_opts {
  const char* path;
  int format;            /* trace_format */
  uint32_t block_size;
  uint64_t num_blocks;   /* 0 = default (see replay_default_blocks) */
  int json;
  int quiet;             /* no progress line, no per-request notes */
  int progress;          /* -1 auto (tty), 0 off, 2 forced (--progress) */
  int check;             /* kvb_check_invariants at the end (and every step in timed mode with 2) */
  int timed;             /* --mode timed */
  /* timed mode (see timed.c) */
  double speed;          /* trace time is divided by this */
  uint32_t max_seqs;     /* running sequences at most */
  uint64_t max_batch_tokens; /* tokens per step (prefill chunks + decode tokens) */
  int preempt_swap;      /* 0 recompute, 1 swap */
  uint64_t num_host_blocks;
  int host_cache;        /* --host-cache: host blocks are a second prefix-cache level */
  uint64_t host_twin_percent; /* --host-twin-percent: kvb_config.host_cache_twin_percent */
  uint64_t store_blocks;      /* --store-blocks: the model store's size (0 = no store) */
  int store_exclusive;        /* --store-exclusive: a get takes the block out of the model store */
  uint64_t kv_bytes_per_block; /* bytes moved per block by offloads and loads (report, timed cost) */
  double pcie_gbps;      /* timed mode: host <-> device rate charged for the moves, GB/s */
  double watermark;
  double step_base_us;   /* step-time model: base + per prefill token + per decode seq + per KV block read */
  double step_prefill_us;
  double step_decode_us;
  double step_kv_us;
  const char* svg;
  uint64_t svg_points;
  kvb_group_spec groups[REPLAY_MAX_GROUPS]; /* --groups: KV cache groups (sequential mode) */
  size_t num_groups;                        /* 0 = no groups */
} replay_opts;

/* Parses --groups "full,window:W[:SINKS],..." into o->groups (prints the error). 1 on success. */
int replay_parse_groups(const char* val, replay_opts* o);

/* Blocks used by the default --num-blocks: every block the trace could fill (so nothing is evicted),
   at most REPLAY_MAX_DEFAULT_BLOCKS, at least one request's worth. */
uint64_t replay_default_blocks(const trace* t, uint32_t block_size);

/* Create the manager of a run (prints the error). */
kvb_manager* replay_create_manager(const replay_opts* o, uint64_t num_blocks);

/* Notes on stderr about requests that are skipped or cut short: the first REPLAY_NOTES_SHOWN are
   listed, the rest counted and summarised in one line by replay_notes_finish. */
#define REPLAY_NOTES_SHOWN 5
typedef struct replay_notes {
  uint64_t count;
} replay_notes;
void replay_note(const replay_opts* o, const trace* t, size_t r, const char* why, replay_notes* n);
void replay_notes_finish(const replay_opts* o, const replay_notes* n);

/* Host-cache transfers (--host-cache): the replay moves no data, it drains the pairs and counts them. */
typedef struct replay_host {
  int32_t *off, *load;
  size_t off_cap, load_cap;
  uint64_t moved;        /* blocks moved (offloads + loads) since the caller last cleared it */
  int store;             /* a store is registered: poll it first */
} replay_host;
void replay_host_init(replay_host* h, const replay_opts* o, uint64_t num_blocks);
void replay_host_free(replay_host* h);
/* Learns the store's completed gets (--store-blocks), then drains the pending transfers (nothing to do
   without --host-cache). KVB_OK or the error. */
kvb_status replay_host_drain(kvb_manager* m, replay_host* h);
/* Report lines of the host cache: hits by tier, blocks and bytes moved each way, host evictions. */
struct report;
void replay_host_report(struct report* rep, const replay_opts* o, const kvb_stats* st);

/* "what (request on line N)": KVB error on stderr. */
void replay_call_error(const char* what, kvb_status s, const trace* t, size_t r);

#endif
