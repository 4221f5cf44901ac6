/* replay.h - `kvblock replay`: feed a request trace through the block manager. */
#ifndef KVBLOCK_TOOL_REPLAY_H
#define KVBLOCK_TOOL_REPLAY_H

#include <stdint.h>
#include <stdio.h>

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

int replay_main(int argc, char** argv);
void replay_help(FILE* f);

/* Blocks used by the default --num-blocks: every block the trace could fill (so nothing is evicted),
   at most REPLAY_MAX_DEFAULT_BLOCKS, at least one request's worth. */
uint64_t replay_default_blocks(const trace* t, uint32_t block_size);

/* Create the manager of a run (prints the error). */
kvb_manager* replay_create_manager(const replay_opts* o, uint64_t num_blocks);

int replay_sequential(const replay_opts* o, const trace* t, uint64_t num_blocks, double load_s);
int replay_timed(const replay_opts* o, const trace* t, uint64_t num_blocks, double load_s);

/* Note on stderr about a request that does not fit; prints only the first few (counted by *shown). */
void replay_note_skipped(const replay_opts* o, const trace* t, size_t r, const char* why, uint64_t* shown);

#endif
