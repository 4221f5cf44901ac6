/* replay_common.h - what the sequential (sequential.c) and the timed (timed.c) replays share: the
   options, the default pool size, the manager, and the stderr notes about requests that do not fit. */
#ifndef KVBLOCK_TOOL_REPLAY_COMMON_H
#define KVBLOCK_TOOL_REPLAY_COMMON_H

#include <stdint.h>
#include <stdio.h>

#include "kvblock.h"
#include "trace.h"

#define REPLAY_MAX_DEFAULT_BLOCKS 4194304u /* cap of the default --num-blocks */

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
  double watermark;
  double step_base_us;   /* step-time model: base + per prefill token + per decode seq + per KV block read */
  double step_prefill_us;
  double step_decode_us;
  double step_kv_us;
  const char* svg;
  uint64_t svg_points;
} replay_opts;

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

/* "what (request on line N)": KVB error on stderr. */
void replay_call_error(const char* what, kvb_status s, const trace* t, size_t r);

#endif
