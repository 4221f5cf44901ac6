/* bench_manager.c - the manager cases of `kvblock bench`: ns per block of the prefix-cache miss and hit
   paths (and of host-level hits) and ns per decode token, against a bare XXH64 over the same bytes
   (block_size * 8 token bytes + 8 parent bytes: the system xxHash, inlined as the library's hash.cpp
   inlines it, and checked equal to kvb_hash_tokens); fork, copy-on-write, swap planning and batch
   export. Each case on its own manager; warm-up, then the repetitions, cases interleaved. */
#include "bench_manager.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

const char* const bench_case_keys[NUM_CASES] = {"hash", "kvb_hash_tokens", "miss", "hit", "decode",
                                                "fork", "cow", "swap", "batch", "hosthit", "tree", "spec"};

static void summarize(bench_case* c) {
  double sorted[MAX_REPS];
  if (c->n == 0) return;
  memcpy(sorted, c->samples, c->n * sizeof(double));
  qsort(sorted, c->n, sizeof(double), cmp_double);
  c->median = quantile_sorted(sorted, c->n, 0.5);
  c->min = sorted[0];
  c->max = sorted[c->n - 1];
  c->spread = c->median > 0 ? (c->max - c->min) / c->median : 0.0;
}


static volatile uint64_t g_sink;

/* One repetition of each case; returns ns per unit, or < 0 on a library failure. The bare hash reads
   stripes: per block [parent u64][block_size tokens i64], so that only the parent word is stored
   before each XXH64 and nothing but the hash is timed. */
static double run_hash(const bench_opts* o, const int64_t* tokens, uint64_t* stripes, int library) {
  uint64_t it, b, nb = o->prompt_tokens / o->block_size, h = 0, words = o->block_size + 1u;
  double t0 = now_s();
  for (it = 0; it < o->iters; it++) {
    h = it;
    if (library)
      for (b = 0; b < nb; b++) h = kvb_hash_tokens(&h, tokens + b * o->block_size, o->block_size);
    else
      for (b = 0; b < nb; b++) {
        uint64_t* stripe = stripes + b * words;
        stripe[0] = h;
        h = XXH64(stripe, (size_t)words * 8, 0);
      }
  }
  g_sink += h;
  return (now_s() - t0) * 1e9 / (double)(o->iters * nb);
}

static double run_miss(const bench_opts* o, kvb_manager* m, int64_t* tokens, int64_t* fresh) {
  uint64_t it, nb = (o->prompt_tokens + o->block_size - 1) / o->block_size;
  size_t cached;
  double t0 = now_s();
  for (it = 0; it < o->iters; it++) {
    tokens[0] = ++*fresh; /* a new first token: the whole hash chain is new */
    CHECK(kvb_seq_allocate(m, 1, tokens, o->prompt_tokens, &cached));
    CHECK(kvb_seq_commit(m, 1, o->prompt_tokens - cached));
    CHECK(kvb_seq_free(m, 1));
  }
  return (now_s() - t0) * 1e9 / (double)(o->iters * nb);
}

static double run_hit(const bench_opts* o, kvb_manager* m, const int64_t* tokens) {
  uint64_t it, nb = (o->prompt_tokens + o->block_size - 1) / o->block_size;
  size_t cached = 0;
  double t0;
  /* Make sure the prompt is cached (not timed). */
  CHECK(kvb_seq_allocate(m, 2, tokens, o->prompt_tokens, &cached));
  CHECK(kvb_seq_commit(m, 2, o->prompt_tokens - cached));
  CHECK(kvb_seq_free(m, 2));
  t0 = now_s();
  for (it = 0; it < o->iters; it++) {
    CHECK(kvb_seq_allocate(m, 2, tokens, o->prompt_tokens, &cached));
    CHECK(kvb_seq_free(m, 2));
  }
  if (cached + o->block_size < o->prompt_tokens) {
    tool_error("bench: hit case found only %zu of %llu tokens cached", cached,
               (unsigned long long)o->prompt_tokens);
    return -1.0;
  }
  return (now_s() - t0) * 1e9 / (double)(o->iters * nb);
}

/* Host-cache hits: the prompt's blocks are pushed off the device (not timed: a filler prompt takes
   every device block, so they go to, or stay on, the host level), then allocate (every block but the
   last a host hit, each taking a device block and a load) + kvb_drain_host_transfers + free, timed. */
static double run_hosthit(const bench_opts* o, kvb_manager* m, const int64_t* tokens, int64_t* fresh) {
  uint64_t it, i, nb = (o->prompt_tokens + o->block_size - 1) / o->block_size, filler_n = (nb + 2) * o->block_size;
  static int64_t* filler;
  static int32_t *off, *load;
  size_t cached = 0, no = 0, nl = 0;
  double total = 0, t0;
  if (!filler) {
    filler = (int64_t*)xmalloc(filler_n * sizeof *filler);
    off = (int32_t*)xmalloc(4 * (nb + 2) * sizeof *off);
    load = (int32_t*)xmalloc(4 * (nb + 2) * sizeof *load);
  }
  CHECK(kvb_seq_allocate(m, 2, tokens, o->prompt_tokens, &cached)); /* cached once (not timed) */
  CHECK(kvb_seq_commit(m, 2, o->prompt_tokens - cached));
  CHECK(kvb_seq_free(m, 2));
  for (it = 0; it < o->iters; it++) {
    for (i = 0; i < filler_n; i++) filler[i] = ++*fresh; /* never a token already used (run_miss sets tokens[0] = ++*fresh) */
    CHECK(kvb_seq_allocate(m, 3, filler, filler_n, &cached));
    CHECK(kvb_seq_free(m, 3));
    CHECK(kvb_drain_host_transfers(m, off, 2 * (nb + 2), &no, load, 2 * (nb + 2), &nl));
    t0 = now_s();
    CHECK(kvb_seq_allocate(m, 2, tokens, o->prompt_tokens, &cached));
    CHECK(kvb_drain_host_transfers(m, off, 2 * (nb + 2), &no, load, 2 * (nb + 2), &nl));
    CHECK(kvb_seq_free(m, 2));
    total += now_s() - t0;
    if (nl + 1 < nb) {
      tool_error("bench: host-hit case loaded only %zu of %llu blocks", nl, (unsigned long long)nb);
      return -1.0;
    }
  }
  return total * 1e9 / (double)(o->iters * nb);
}

static double run_decode(const bench_opts* o, kvb_manager* m, int64_t* next_token) {
  uint64_t s, k, n = o->decode_seqs;
  int64_t prompt[64];
  double t0, elapsed;
  size_t i;
  for (s = 0; s < n; s++) { /* short distinct prompts, committed (not timed) */
    for (i = 0; i < 64; i++) prompt[i] = ++*next_token;
    CHECK(kvb_seq_allocate(m, (int64_t)(100 + s), prompt, 64, NULL));
    CHECK(kvb_seq_commit(m, (int64_t)(100 + s), 64));
  }
  t0 = now_s();
  for (k = 0; k < o->decode_tokens; k++) {
    for (s = 0; s < n; s++) {
      int64_t tok = ++*next_token;
      CHECK(kvb_seq_append(m, (int64_t)(100 + s), &tok, 1));
      CHECK(kvb_seq_commit(m, (int64_t)(100 + s), 1));
    }
  }
  elapsed = now_s() - t0;
  for (s = 0; s < n; s++) CHECK(kvb_seq_free(m, (int64_t)(100 + s)));
  return elapsed * 1e9 / (double)(o->decode_tokens * n);
}

/* Sequence ids of the fork, swap and batch cases (their own managers). */
#define FORK_PARENT 10
#define FORK_CHILD 11
#define SWAP_SEQ 20
#define BATCH_SEQ0 1000

uint64_t prompt_blocks(const bench_opts* o) { return (o->prompt_tokens + o->block_size - 1) / o->block_size; }

/* Allocates and commits seq_id with the prompt, its first token replaced by first (distinct chains). */
static int committed_seq(kvb_manager* m, int64_t seq_id, int64_t* tokens, size_t n, int64_t first) {
  int64_t saved = tokens[0];
  kvb_status st;
  tokens[0] = first;
  st = kvb_seq_allocate(m, seq_id, tokens, n, NULL);
  tokens[0] = saved;
  if (st != KVB_OK) {
    lib_error("kvb_seq_allocate", st);
    return 0;
  }
  if ((st = kvb_seq_commit(m, seq_id, n)) != KVB_OK) {
    lib_error("kvb_seq_commit", st);
    return 0;
  }
  return 1;
}

/* fork: kvb_seq_fork of the committed prompt + kvb_seq_free of the child, per shared block. */
static double run_fork(const bench_opts* o, kvb_manager* m) {
  uint64_t it;
  double t0 = now_s();
  for (it = 0; it < o->iters; it++) {
    CHECK(kvb_seq_fork(m, FORK_PARENT, FORK_CHILD));
    CHECK(kvb_seq_free(m, FORK_CHILD));
  }
  return (now_s() - t0) * 1e9 / (double)(o->iters * prompt_blocks(o));
}

/* Mid-block fork position of the copy-on-write case: half a block before the end of the last full
   block (0 when the block size is 1 and no block can be shared partly). */
size_t cow_position(const bench_opts* o) {
  uint64_t full = o->prompt_tokens / o->block_size;
  return o->block_size < 2 ? 0 : (size_t)(full * o->block_size - o->block_size / 2);
}

/* cow: kvb_seq_fork_at a mid-block position, append 1 token to the child (its shared partial block is
   copied: one pending pair), kvb_drain_copies, kvb_seq_free; per operation (the four calls). */
static double run_cow(const bench_opts* o, kvb_manager* m, int64_t* next_token) {
  uint64_t it;
  int32_t pairs[8];
  size_t np = 0, pos = cow_position(o);
  double t0 = now_s();
  for (it = 0; it < o->iters; it++) {
    int64_t tok = ++*next_token;
    CHECK(kvb_seq_fork_at(m, FORK_PARENT, FORK_CHILD, pos));
    CHECK(kvb_seq_append(m, FORK_CHILD, &tok, 1));
    CHECK(kvb_drain_copies(m, pairs, 4, &np));
    CHECK(kvb_seq_free(m, FORK_CHILD));
    if (np != 1) {
      tool_error("bench: the copy-on-write case drained %zu copies, expected 1", np);
      return -1.0;
    }
  }
  return (now_s() - t0) * 1e9 / (double)o->iters;
}

/* swap: kvb_seq_swap_out + kvb_seq_swap_in of the committed prompt (bookkeeping only, no data is
   copied), per block moved (2 per prompt block). */
static double run_swap(const bench_opts* o, kvb_manager* m, int32_t* pairs) {
  uint64_t it, nb = prompt_blocks(o);
  size_t np = 0;
  double t0 = now_s();
  for (it = 0; it < o->iters; it++) {
    CHECK(kvb_seq_swap_out(m, SWAP_SEQ, pairs, nb, &np));
    CHECK(kvb_seq_swap_in(m, SWAP_SEQ, pairs, nb, &np));
  }
  if (np != nb) {
    tool_error("bench: the swap case moved %zu blocks, expected %llu", np, (unsigned long long)nb);
    return -1.0;
  }
  return (now_s() - t0) * 1e9 / (double)(o->iters * 2 * nb);
}

/* Buffers and sequence ids of the batch-export case. */
typedef struct batch_ctx {
  int64_t* ids;
  kvb_batch b;
} batch_ctx;

static void batch_release(batch_ctx* c) {
  free(c->ids);
  free(c->b.block_tables);
  free(c->b.seq_lens);
  free(c->b.query_start);
  free(c->b.slot_mapping);
  memset(c, 0, sizeof *c);
}

/* batch_seqs committed sequences of batch_tokens tokens, one new token each, and the export buffers. */
static int batch_setup(const bench_opts* o, kvb_manager* m, int64_t* tokens, int64_t* next_token, batch_ctx* c) {
  uint64_t s, cols = o->batch_tokens / o->block_size + 2;
  kvb_batch_init(&c->b);
  c->ids = (int64_t*)xmalloc(o->batch_seqs * sizeof *c->ids);
  c->b.max_blocks_per_seq = (uint32_t)cols;
  c->b.block_tables = (int32_t*)xmalloc(o->batch_seqs * cols * sizeof(int32_t));
  c->b.seq_lens = (int32_t*)xmalloc(o->batch_seqs * sizeof(int32_t));
  c->b.query_start = (int32_t*)xmalloc((o->batch_seqs + 1) * sizeof(int32_t));
  c->b.slot_mapping = (int64_t*)xmalloc(o->batch_seqs * sizeof(int64_t));
  c->b.slot_capacity = o->batch_seqs;
  for (s = 0; s < o->batch_seqs; s++) {
    int64_t tok = ++*next_token;
    kvb_status st;
    c->ids[s] = BATCH_SEQ0 + (int64_t)s;
    if (!committed_seq(m, c->ids[s], tokens, o->batch_tokens, ++*next_token)) return 0;
    if ((st = kvb_seq_append(m, c->ids[s], &tok, 1)) != KVB_OK) {
      lib_error("kvb_seq_append", st);
      return 0;
    }
  }
  return 1;
}

/* batch: kvb_batch_export of the decode step into the preallocated buffers, per sequence. */
static double run_batch(const bench_opts* o, kvb_manager* m, batch_ctx* c) {
  uint64_t it;
  double t0 = now_s();
  for (it = 0; it < o->iters; it++) CHECK(kvb_batch_export(m, c->ids, o->batch_seqs, &c->b));
  if (c->b.num_slots != o->batch_seqs) {
    tool_error("bench: batch export found %zu new tokens, expected %llu", c->b.num_slots,
               (unsigned long long)o->batch_seqs);
    return -1.0;
  }
  return (now_s() - t0) * 1e9 / (double)(o->iters * o->batch_seqs);
}

static kvb_manager* make_manager(uint32_t block_size, uint64_t num_blocks, uint64_t num_host_blocks) {
  kvb_config cfg;
  kvb_manager* m = NULL;
  kvb_status s;
  kvb_config_init(&cfg);
  cfg.block_size = block_size;
  cfg.num_blocks = (uint32_t)num_blocks;
  cfg.num_host_blocks = (uint32_t)num_host_blocks;
  if ((s = kvb_manager_create(&cfg, &m)) != KVB_OK) {
    lib_error("kvb_manager_create", s);
    return NULL;
  }
  return m;
}

static void label_cases(bench_case* c) {
  static const char* const labels[NUM_CASES] = {
      "bare XXH64 of one block",       "kvb_hash_tokens of one block",   "miss: allocate+commit+free",
      "hit: allocate+free (cached)",   "decode: append+commit 1 token",  "fork: fork+free (shared)",
      "cow: fork_at+append+drain+free", "swap: swap_out+swap_in",        "batch: export decode step",
      "hosthit: allocate+drain+free",  "tree: append_tree+commit_tree", "spec: append+commit+rollback"};
  static const char* const units[NUM_CASES] = {"ns/block", "ns/block", "ns/block", "ns/block", "ns/token",
                                               "ns/block", "ns/op",    "ns/block", "ns/seq",   "ns/block",
                                               "ns/node",  "ns/token"};
  int k;
  for (k = 0; k < NUM_CASES; k++) {
    c[k].key = bench_case_keys[k];
    c[k].label = labels[k];
    c[k].unit = units[k];
    c[k].vs_hash = k <= C_DECODE;
  }
  c[C_MISS].target = 4.0; /* PERFORMANCE.md's design goals (print_targets judges them too) */
  c[C_HIT].target = 3.0;
}

/* The managers and buffers of every case. */
typedef struct bench_state {
  kvb_manager *m, *md, *mf, *ms, *mb, *mh, *mt; /* miss/hit, decode, fork/cow, swap, batch, host hits, trees */
  int64_t* tokens;
  uint64_t* stripes; /* the bare hash's input: per block [parent][tokens] */
  int32_t* swap_pairs;
  batch_ctx batch;
  int64_t fresh, next_token;
} bench_state;

static void state_release(bench_state* st) {
  kvb_manager_destroy(st->m);
  kvb_manager_destroy(st->md);
  kvb_manager_destroy(st->mf);
  kvb_manager_destroy(st->ms);
  kvb_manager_destroy(st->mb);
  kvb_manager_destroy(st->mh);
  kvb_manager_destroy(st->mt);
  free(st->tokens);
  free(st->stripes);
  free(st->swap_pairs);
  batch_release(&st->batch);
}

/* Managers and committed sequences of every case; 0 on a failure (message printed). */
static int state_setup(const bench_opts* o, uint64_t decode_blocks, bench_state* st) {
  uint64_t i, nb = prompt_blocks(o);
  uint64_t batch_blocks = o->batch_seqs * (o->batch_tokens / o->block_size + 2);
  st->fresh = (int64_t)1 << 50;
  st->next_token = (int64_t)1 << 52;
  st->tokens = (int64_t*)xmalloc(o->prompt_tokens * sizeof *st->tokens);
  st->swap_pairs = (int32_t*)xmalloc(2 * nb * sizeof *st->swap_pairs);
  st->stripes = (uint64_t*)xmalloc(nb * (o->block_size + 1u) * sizeof *st->stripes);
  for (i = 0; i < o->prompt_tokens; i++) st->tokens[i] = (int64_t)(i * 2654435761u % 151936u);
  for (i = 0; i < o->prompt_tokens / o->block_size * o->block_size; i++)
    st->stripes[i / o->block_size * (o->block_size + 1u) + 1 + i % o->block_size] = (uint64_t)st->tokens[i];
  {
    /* The baseline must be the very hash the library computes. */
    uint64_t parent = 0x0123456789abcdefULL, n = o->block_size;
    st->stripes[0] = parent;
    if (o->prompt_tokens >= n &&
        XXH64(st->stripes, (size_t)(n + 1) * 8, 0) != kvb_hash_tokens(&parent, st->tokens, (size_t)n)) {
      tool_error("bench: XXH64 of [parent][tokens] differs from kvb_hash_tokens (big-endian host?)");
      return 0;
    }
  }
  if (!(st->m = make_manager(o->block_size, o->num_blocks, 0)) ||
      !(st->md = make_manager(o->block_size, decode_blocks, 0)) ||
      !(st->mf = make_manager(o->block_size, nb + 16, 0)) || !(st->ms = make_manager(o->block_size, nb + 16, nb + 16)) ||
      !(st->mb = make_manager(o->block_size, batch_blocks, 0)) ||
      !(st->mt = make_manager(o->block_size, bench_tree_blocks(o), 0)))
    return 0;
  {
    /* Host hits: a device pool of one prompt (+2, all taken by the filler), a host level of four prompts. */
    kvb_config cfg;
    kvb_status s;
    kvb_config_init(&cfg);
    cfg.block_size = o->block_size;
    cfg.num_blocks = (uint32_t)(nb + 2);
    cfg.num_host_blocks = (uint32_t)(4 * nb + 4);
    cfg.flags = KVB_CONFIG_HOST_CACHE;
    if ((s = kvb_manager_create(&cfg, &st->mh)) != KVB_OK) {
      lib_error("kvb_manager_create", s);
      return 0;
    }
  }
  return committed_seq(st->mf, FORK_PARENT, st->tokens, o->prompt_tokens, ++st->next_token) &&
         committed_seq(st->ms, SWAP_SEQ, st->tokens, o->prompt_tokens, ++st->next_token) &&
         batch_setup(o, st->mb, st->tokens, &st->next_token, &st->batch);
}

/* One repetition of case k; < 0 on a library failure. */
static double run_case(int k, const bench_opts* o, bench_state* st) {
  switch (k) {
    case C_HASH: return run_hash(o, st->tokens, st->stripes, 0);
    case C_LIBHASH: return run_hash(o, st->tokens, st->stripes, 1);
    case C_MISS: return run_miss(o, st->m, st->tokens, &st->fresh);
    case C_HIT: return run_hit(o, st->m, st->tokens);
    case C_DECODE: return run_decode(o, st->md, &st->next_token);
    case C_FORK: return run_fork(o, st->mf);
    case C_COW: return run_cow(o, st->mf, &st->next_token);
    case C_SWAP: return run_swap(o, st->ms, st->swap_pairs);
    case C_HOSTHIT: return run_hosthit(o, st->mh, st->tokens, &st->fresh);
    case C_TREE: return bench_run_tree(o, st->mt, &st->next_token, 0);
    case C_SPEC: return bench_run_tree(o, st->mt, &st->next_token, 1);
    default: return run_batch(o, st->mb, &st->batch);
  }
}

static int wanted(const bench_opts* o, int k) {
  if (k == C_COW && cow_position(o) == 0) return 0; /* block size 1: no partly shared block */
  return !o->only || !strcmp(o->only, bench_case_keys[k]);
}

/* Warm-up, then the repetitions, cases interleaved; 0 on a library failure. */
static int run_cases(const bench_opts* o, bench_state* st, bench_case* cases) {
  uint64_t rep;
  int k;
  if (o->only && !strcmp(o->only, "kernels")) return 1;
  {
    /* Warm-up: every manager case (the new ones when wanted); enough miss iterations to wrap the pool
       once, so that the timed runs see evictions. */
    bench_opts w = o[0];
    uint64_t wrap = o->num_blocks / prompt_blocks(o) + 1;
    w.iters = o->iters > wrap ? o->iters : wrap;
    for (k = 0; k < NUM_CASES; k++)
      if ((k <= C_DECODE || wanted(o, k)) && run_case(k, k == C_MISS ? &w : o, st) < 0) return 0;
  }
  for (rep = 0; rep < o->reps; rep++) {
    /* Interleave the cases so that a slow moment of the machine touches all of them alike. */
    for (k = 0; k < NUM_CASES; k++) {
      double v;
      if (!wanted(o, k)) continue;
      if ((v = run_case(k, o, st)) < 0) return 0;
      cases[k].samples[cases[k].n++] = v;
    }
  }
  for (k = 0; k < NUM_CASES; k++) summarize(&cases[k]);
  cases[C_BATCH].per_call = (double)o->batch_seqs;
  return 1;
}

int bench_run_manager(const bench_opts* o, uint64_t decode_blocks, bench_case* cases) {
  bench_state st;
  int ok;
  memset(&st, 0, sizeof st);
  label_cases(cases);
  ok = state_setup(o, decode_blocks, &st) && run_cases(o, &st, cases);
  state_release(&st);
  return ok;
}
