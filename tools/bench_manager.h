/* bench_manager.h - what the manager half of `kvblock bench` shares (internal to the tool): the options,
   the cases and their keys; the options and the manual in bench_options.c, the timed cases in
   bench_manager.c, their report in bench_manager_report.c, the command itself in bench.c. */
#ifndef KVBLOCK_TOOL_BENCH_MANAGER_H
#define KVBLOCK_TOOL_BENCH_MANAGER_H

#include <stddef.h>
#include <stdint.h>

#include "kvblock.h"
#include "report.h"

#define MAX_REPS 1000

/* In a timed case (a function returning its ns per unit): a failed library call prints its error and makes
   the case return -1. (lib_error: util.h.) */
#define CHECK(call)                    \
  do {                                 \
    kvb_status st_ = (call);           \
    if (st_ != KVB_OK) {               \
      lib_error(#call, st_);           \
      return -1.0;                     \
    }                                  \
  } while (0)

typedef struct bench_opts {
  uint32_t block_size;
  uint64_t prompt_tokens;
  uint64_t iters;          /* prompts per repetition (hash, miss, hit) */
  uint64_t reps;
  uint64_t decode_seqs;
  uint64_t decode_tokens;  /* tokens per sequence per repetition */
  uint64_t num_blocks;     /* pool of the miss / hit cases; 0 = 16 prompts' worth */
  uint64_t batch_seqs;     /* sequences of the batch-export case (= decode_seqs) */
  uint64_t batch_tokens;   /* tokens per sequence of the batch-export case (prompt_tokens / 2) */
  int json;
  int quick;
  const char* only;        /* run just this case (profiling); NULL = all */
  const char* device;      /* kernels: cpu, auto or cuda */
  const char* kernel_rows;  /* --only cascade, tree-kernels, attention or prefill: only = "kernels", and of
                              those these rows (kbench_opts.rows); NULL: every kernel row */
} bench_opts;

typedef struct bench_case {
  const char* key;
  const char* label;
  const char* unit;
  double samples[MAX_REPS];
  size_t n;
  double median, min, max, spread;
  int vs_hash;             /* print the ratios to the bare hash and to kvb_hash_tokens */
  double per_call;         /* batch: sequences per call (median per call = median * per_call); 0 = none */
  double target;           /* the design goal as a ratio to the bare hash (miss 4, hit 3); 0 = none */
} bench_case;

enum { C_HASH, C_LIBHASH, C_MISS, C_HIT, C_DECODE, C_FORK, C_COW, C_SWAP, C_BATCH, C_HOSTHIT, C_TREE, C_SPEC, NUM_CASES };
/* The cases' --only and JSON keys, in C_* order. */
extern const char* const bench_case_keys[NUM_CASES];

/* Parses the options into *o; returns -1 to go on, else the exit status (help, usage error). */
int bench_parse_args(int argc, char** argv, bench_opts* o);
/* Derived sizes and their limits (--quick applied); 0 on a usage error (message printed). */
int bench_check_sizes(bench_opts* o, uint64_t* decode_blocks);

/* Blocks of one prompt (the last one may be partial). */
uint64_t prompt_blocks(const bench_opts* o);
/* Mid-block fork position of the copy-on-write case: half a block before the end of the last full
   block (0 when the block size is 1 and no block can be shared partly). */
size_t cow_position(const bench_opts* o);
/* Labels the cases, sets up their managers, runs the warm-up and the repetitions into cases (each
   summarized) and releases the managers; 0 on a failure (message printed). */
int bench_run_manager(const bench_opts* o, uint64_t decode_blocks, bench_case* cases);
/* Token trees (bench_tree_step.c): blocks the cases' manager needs, and one repetition (ns per node of a
   16-node tree step, or, chain != 0, per token of the same step drafted as a chain); < 0 on a failure. */
uint64_t bench_tree_blocks(const bench_opts* o);
double bench_run_tree(const bench_opts* o, kvb_manager* m, int64_t* next_token, int chain);
/* The config and the manager's table (or JSON groups) and, on a full run, the design goals. */
void bench_print_manager(report* r, const bench_opts* o, const bench_case* cases);

#endif
