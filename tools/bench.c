/* bench.c - `kvblock bench`: ns per block of the manager's prefix-cache miss and hit paths and ns per
   decode token, against a bare XXH64 over the same bytes (block_size * 8 token bytes + 8 parent bytes:
   the system xxHash, inlined as the library's hash.cpp inlines it, and checked equal to
   kvb_hash_tokens); fork, copy-on-write, swap planning and batch export; then the kernels
   (bench_kernels.c). */
#include "bench.h"

#include <stdlib.h>
#include <string.h>

#include "bench_kernels.h"
#include "report.h"
#include "util.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#define MAX_REPS 1000

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
} bench_case;

enum { C_HASH, C_LIBHASH, C_MISS, C_HIT, C_DECODE, C_FORK, C_COW, C_SWAP, C_BATCH, C_HOSTHIT, NUM_CASES };
static const char* const case_keys[NUM_CASES] = {"hash", "kvb_hash_tokens", "miss", "hit", "decode",
                                                  "fork", "cow", "swap", "batch", "hosthit"};

void bench_help(FILE* f) {
  fputs(
      "NAME\n"
      "    kvblock bench - time the block manager's hot paths against a bare XXH64, and the kernels\n"
      "\n"
      "SYNOPSIS\n"
      "    kvblock bench [--quick] [--only CASE] [--device cpu|auto|cuda] [--reps N] [--iters N]\n"
      "                  [--block-size N] [--prompt-tokens N] [--decode-seqs N] [--decode-tokens N]\n"
      "                  [--num-blocks N] [--json]\n"
      "\n"
      "DESCRIPTION\n"
      "    Nine manager cases, each run once as a warm-up and then --reps times, interleaved; the median,\n"
      "    the minimum, the maximum and the spread ((max - min) / median) of the repetitions are printed.\n"
      "      hash    bare XXH64 of one block's bytes (block_size * 8 token bytes + 8 parent-hash bytes),\n"
      "              chained over the prompt's blocks: the floor any prefix cache pays per block. The tool\n"
      "              calls the system xxHash's XXH64 (inlined) on each block's bytes, laid out in advance\n"
      "              (parent, then tokens), and checks it equals kvb_hash_tokens.\n"
      "      kvb_hash_tokens   the same hash through the library call (informative).\n"
      "      miss    kvb_seq_allocate + kvb_seq_commit + kvb_seq_free of a fresh prompt (every block is\n"
      "              a cache miss, hashed and indexed at commit; once the pool has wrapped, every block\n"
      "              taken also evicts a cached one), per prompt block.\n"
      "      hit     kvb_seq_allocate + kvb_seq_free of a fully cached prompt (all blocks but the last\n"
      "              are hits: hash, index lookup, token comparison), per prompt block.\n"
      "      hosthit kvb_seq_allocate + kvb_drain_host_transfers + kvb_seq_free of a prompt whose blocks\n"
      "              are on the host level (KVB_CONFIG_HOST_CACHE; pushed off the device untimed before\n"
      "              each prompt): device miss, host hit, a device block and a load pair, per block.\n"
      "      decode  kvb_seq_append + kvb_seq_commit of one token, round-robin over --decode-seqs\n"
      "              sequences (one block in block_size is filled, hashed and indexed), per token.\n"
      "      fork    kvb_seq_fork of a committed prompt-long sequence + kvb_seq_free of the child, per\n"
      "              shared block.\n"
      "      cow     copy-on-write: kvb_seq_fork_at half a block before the end of the prompt's last full\n"
      "              block, kvb_seq_append of 1 token to the child (its partly shared block gets one\n"
      "              pending copy), kvb_drain_copies, kvb_seq_free; per operation (all four calls; the fork\n"
      "              shares the whole prompt, so this grows with its length). Not run at block size 1.\n"
      "      swap    kvb_seq_swap_out + kvb_seq_swap_in of a committed prompt-long sequence, enough host\n"
      "              blocks: the planning only (no data is copied), per block moved (2 per prompt block).\n"
      "      batch   kvb_batch_export of one decode step of --decode-seqs sequences of prompt/2 committed\n"
      "              tokens plus one new token each, into preallocated buffers (block tables, lengths,\n"
      "              query starts, slot mapping), per sequence; the time per call is printed too.\n"
      "    The ratios of the first five cases to the bare hash (\"vs hash\") and to kvb_hash_tokens (\"vs\n"
      "    lib\") are printed, then the design goals of PERFORMANCE.md with what each means: a cached\n"
      "    prompt block costs at most 3x its bare hash, a new one (hashed, indexed, evicting) at most 4x,\n"
      "    a decode token at most 100 ns. They are marked met or missed on a full run only (not with\n"
      "    --quick); a missed goal is a finding to look into, not an error.\n"
      "\n"
      ,
      f);
  fputs(
      "KERNELS\n"
      "    Then the kernels, fp16, Hq=32, Hkv=8, D=128, block 16, every buffer holding random data, one\n"
      "    warm-up call and --reps timed samples, each printed as time per call (median, min, max, spread),\n"
      "    GB/s and the fraction of a copy ceiling measured in the same run:\n"
      "      kvb_paged_attention  decode attention, block tables randomly permuted, every sequence at the\n"
      "                     full context; GB/s = K+V bytes read / time. CPU: (1 seq, 4096 tokens),\n"
      "                     (8, 4096), (32, 1024) and fp32 (8, 4096), against the streaming-read\n"
      "                     ceiling; GPU: (1, 4096), (32, 4096), (128, 2048), (64, 8192)\n"
      "                     and (16, 32768); --quick: smaller.\n"
      "      kvb_prefill_attention  prefill / extend attention, fp16 and bf16, random block tables, in\n"
      "                     TFLOP/s of the causal work (4 x attended keys x D per query row and head).\n"
      "                     GPU: (1 prompt x 4096 new), (8 x 1024 new over 3072 cached), 4 x 512 new + 60\n"
      "                     decodes over 2048; CPU: a quarter of the sequences and tokens (--quick: a\n"
      "                     sixteenth), against an fp32 FMA peak measured in the same run on every CPU.\n"
      "      kvb_write_kv   new K/V of 32768 tokens (GPU 65536) to random distinct slots; input bytes read\n"
      "                     + cache bytes written.\n"
      "      kvb_copy_blocks    8 layers x 512 random pairs of 32 KiB blocks (K and V); read + write;\n"
      "                     again with adjacent ids (blocks 0..511 onto 512..1023).\n"
      "      kvb_swap_blocks    the random pairs to (out) and from (in) a second, host cache (page-locked\n"
      "                     when a CUDA device is usable). CPU: read + write, against memcpy; GPU: the\n"
      "                     bytes once, against the one-way transfer ceiling, with KVB_SWAP_AUTO and\n"
      "                     then each method it chooses between forced (memcpy, kernel).\n"
      "    Ceilings. CPU: memcpy of a 512 MiB buffer of random data into a touched destination that is\n"
      "    read after every copy and compared with the source at the end, counted as read + write\n"
      "    (2 x bytes / time); and a streaming read of that buffer by one thread per online CPU (each\n"
      "    sums its contiguous share; started per call, as the CPU attention's threads are), the ceiling\n"
      "    of CPU attention. GPU: kvb_copy_blocks of 64 dense 2 MiB blocks (K and V) onto 64 others,\n"
      "    read + write (the on-device figure: the library's own copy kernel, so a slow copy kernel lowers\n"
      "    the ceiling too), and kvb_swap_blocks of those blocks with KVB_SWAP_USE_MEMCPY to and from\n"
      "    page-locked host blocks, one direction at a time (the PCIe transfer ceiling for swap out / in).\n"
      "    GPU timing: the C API has no stream synchronisation, so the calls go to the legacy default\n"
      "    stream and each sample of 10 calls ends with a fence: a one-block kvb_swap_blocks device ->\n"
      "    page-locked host that the tool waits for by polling host memory (stream order: it lands after\n"
      "    every call before it). The fence's cost (microseconds) is spread over the 10 calls.\n"
      "    `make bench-kernels` runs this section alone (kvblock bench --only kernels --device auto).\n"
      "    With --quick the working sets fit in the CPU caches: the fractions can exceed 100%.\n"
      "\n"
      ,
      f);
  fputs(
      "OPTIONS\n"
      "    --quick              small run for tests: 3 repetitions, 16 prompts, 64 decode tokens, small\n"
      "                         kernel shapes (under 3 s)\n"
      "    --only CASE          run one case (hash, kvb_hash_tokens, miss, hit, decode, fork, cow, swap,\n"
      "                         batch, hosthit) or only the kernels (kernels), e.g. under a profiler; the warm-up\n"
      "                         still runs the first five manager cases; a manager case skips the kernels\n"
      "    --device DEV         where the kernels run: cpu (default), auto (the CPU, then the GPU when a\n"
      "                         CUDA device is usable, else a note that it was skipped) or cuda (the GPU\n"
      "                         only; exit status 1 if no CUDA device is usable or the library was built\n"
      "                         without CUDA)\n"
      "    --reps N             timed repetitions (default 9, at most 1000)\n"
      "    --iters N            prompts (operations, export calls) per repetition of the hash, miss, hit,\n"
      "                         fork, cow, swap and batch cases (default 200)\n"
      "    --block-size N       tokens per block of the manager cases (default 16)\n"
      "    --prompt-tokens N    prompt length (default 4096; the batch case uses half of it)\n"
      "    --decode-seqs N      sequences decoding together, and of the batch case (default 64)\n"
      "    --decode-tokens N    tokens per sequence per repetition (default 1024)\n"
      "    --num-blocks N       pool of the miss and hit cases (default 16 prompts' worth of blocks)\n"
      "    --json               one JSON object: {\"config\": {...}, \"hash\": {...}, \"kvb_hash_tokens\": {...},\n"
      "                         \"miss\", \"hit\", \"decode\", \"fork\", \"cow\", \"swap\", \"batch\" (each {\"unit\",\n"
      "                         \"median\", \"min\", \"max\", \"spread\", ...; batch adds \"median_per_call\"},\n"
      "                         \"targets\": {...}, \"kernels\": {\"cpu\": {...}, \"cuda\": {...} or\n"
      "                         \"cuda_skipped\": why}}; a kernel figure is {\"median_us\", \"min_us\", \"max_us\",\n"
      "                         \"spread\", \"bytes\", \"gbps\", \"of_ceiling\", \"ceiling\"}; manager times in ns,\n"
      "                         spread and ratios as fractions\n"
      "    -h, --help           this text\n"
      "\n"
      "EXIT STATUS\n"
      "    0 done (goals missed are reported, not an error), 1 library failure or no GPU for --device\n"
      "    cuda, 2 usage error.\n"
      "\n"
      "EXAMPLES\n"
      "    kvblock bench\n"
      "    kvblock bench --quick --json\n"
      "    kvblock bench --only kernels --device auto\n"
      "    perf record kvblock bench --only miss\n",
      f);
}

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

#define CHECK(call)                    \
  do {                                 \
    kvb_status st_ = (call);           \
    if (st_ != KVB_OK) {               \
      lib_error(#call, st_);           \
      return -1.0;                     \
    }                                  \
  } while (0)

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
    for (i = 0; i < filler_n; i++) filler[i] = (*fresh)++;
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

static uint64_t prompt_blocks(const bench_opts* o) { return (o->prompt_tokens + o->block_size - 1) / o->block_size; }

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
static size_t cow_position(const bench_opts* o) {
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

static void print_case(report* r, const bench_case* c, double hash_median, double lib_median) {
  double rh = hash_median > 0 ? c->median / hash_median : 0.0, rl = lib_median > 0 ? c->median / lib_median : 0.0;
  if (r->json) {
    report_group_begin(r, c->key, c->label);
    report_str(r, "unit", "unit", c->unit);
    report_f64(r, "median", "median", c->median, 2, NULL);
    report_f64(r, "min", "min", c->min, 2, NULL);
    report_f64(r, "max", "max", c->max, 2, NULL);
    report_f64(r, "spread", "spread", c->spread, 4, NULL);
    if (c->per_call > 0) report_f64(r, "median_per_call", "per call", c->median * c->per_call, 1, NULL);
    if (c->vs_hash) {
      report_f64(r, "ratio_to_hash", "ratio", rh, 3, NULL);
      report_f64(r, "ratio_to_kvb_hash_tokens", "ratio", rl, 3, NULL);
    }
    report_group_end(r);
  } else if (c->vs_hash) {
    fprintf(r->f, "  %-32s %8.1f %8.1f %8.1f %7.1f%% %7.2fx %7.2fx  %s\n", c->label, c->median, c->min, c->max,
            100.0 * c->spread, rh, rl, c->unit);
  } else {
    fprintf(r->f, "  %-32s %8.1f %8.1f %8.1f %7.1f%% %8s %8s  %s", c->label, c->median, c->min, c->max,
            100.0 * c->spread, "", "", c->unit);
    if (c->per_call > 0) fprintf(r->f, " (%.0f ns/call)", c->median * c->per_call);
    fputc('\n', r->f);
  }
}

static int known_case(const char* name) {
  int k;
  for (k = 0; k < NUM_CASES; k++)
    if (!strcmp(name, case_keys[k])) return 1;
  return !strcmp(name, "kernels");
}

/* Parses the options into *o; returns -1 to go on, else the exit status (help, usage error). */
static int parse_args(int argc, char** argv, bench_opts* o) {
  int k;
  for (k = 1; k < argc; k++) {
    const char* val = NULL;
    const char* a = argv[k];
    int got;
#define OPT(name) ((got = opt_value(argc, argv, &k, name, &val)) != 0)
#define NUM(name, lo, hi, dst) \
  (got < 0 || !parse_u64(name, val, lo, hi, dst)) return EXIT_USAGE
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      bench_help(stdout);
      return EXIT_OK;
    } else if (!strcmp(a, "--json")) {
      o->json = 1;
    } else if (!strcmp(a, "--quick")) {
      o->quick = 1;
    } else if (OPT("--only")) {
      if (got < 0) return EXIT_USAGE;
      if (!known_case(val)) {
        tool_error("bench: --only takes hash, kvb_hash_tokens, miss, hit, decode, fork, cow, swap, batch or kernels");
        return EXIT_USAGE;
      }
      o->only = val;
    } else if (OPT("--device")) {
      if (got < 0) return EXIT_USAGE;
      if (strcmp(val, "cpu") && strcmp(val, "auto") && strcmp(val, "cuda")) {
        tool_error("bench: --device takes cpu, auto or cuda");
        return EXIT_USAGE;
      }
      o->device = val;
    } else if (OPT("--reps")) {
      if NUM("--reps", 1, MAX_REPS, &o->reps);
    } else if (OPT("--iters")) {
      if NUM("--iters", 1, 1000000, &o->iters);
    } else if (OPT("--block-size")) {
      uint64_t v;
      if NUM("--block-size", 1, 65536, &v);
      o->block_size = (uint32_t)v;
    } else if (OPT("--prompt-tokens")) {
      if NUM("--prompt-tokens", 2, 1u << 24, &o->prompt_tokens);
    } else if (OPT("--decode-seqs")) {
      if NUM("--decode-seqs", 1, 100000, &o->decode_seqs);
    } else if (OPT("--decode-tokens")) {
      if NUM("--decode-tokens", 1, 1u << 20, &o->decode_tokens);
    } else if (OPT("--num-blocks")) {
      if NUM("--num-blocks", 1, 1u << 30, &o->num_blocks);
    } else {
      tool_error("bench: unknown argument '%s' (kvblock bench --help)", a);
      return EXIT_USAGE;
    }
#undef NUM
#undef OPT
  }
  return -1;
}

/* Derived sizes and their limits; 0 on a usage error (message printed). */
static int check_sizes(bench_opts* o, uint64_t* decode_blocks) {
  if (o->quick) {
    o->reps = 3;
    o->iters = 16;
    o->decode_tokens = 64;
  }
  if (o->prompt_tokens < o->block_size) {
    tool_error("bench: --prompt-tokens must be at least one block (%u)", o->block_size);
    return 0;
  }
  if (o->only && !strcmp(o->only, "cow") && o->block_size < 2) {
    tool_error("bench: the cow case needs a block size of at least 2");
    return 0;
  }
  if (!o->num_blocks) o->num_blocks = 16 * prompt_blocks(o);
  if (o->num_blocks < 2 * prompt_blocks(o)) {
    tool_error("bench: --num-blocks must hold two prompts");
    return 0;
  }
  if (o->num_blocks > (1u << 30)) o->num_blocks = 1u << 30;
  *decode_blocks = o->decode_seqs * ((64 + o->decode_tokens) / o->block_size + 2);
  o->batch_seqs = o->decode_seqs;
  o->batch_tokens = o->prompt_tokens / 2 ? o->prompt_tokens / 2 : 1;
  if (*decode_blocks > (1u << 30) || o->batch_seqs * (o->batch_tokens / o->block_size + 2) > (1u << 30)) {
    tool_error("bench: the decode and batch cases need too many blocks");
    return 0;
  }
  return 1;
}

static void label_cases(bench_case* c) {
  static const char* const labels[NUM_CASES] = {
      "bare XXH64 of one block",       "kvb_hash_tokens of one block",   "miss: allocate+commit+free",
      "hit: allocate+free (cached)",   "decode: append+commit 1 token",  "fork: fork+free (shared)",
      "cow: fork_at+append+drain+free", "swap: swap_out+swap_in",        "batch: export decode step",
      "hosthit: allocate+drain+free"};
  static const char* const units[NUM_CASES] = {"ns/block", "ns/block", "ns/block", "ns/block", "ns/token",
                                               "ns/block", "ns/op",    "ns/block", "ns/seq",   "ns/block"};
  int k;
  for (k = 0; k < NUM_CASES; k++) {
    c[k].key = case_keys[k];
    c[k].label = labels[k];
    c[k].unit = units[k];
    c[k].vs_hash = k <= C_DECODE;
  }
}

/* The managers and buffers of every case. */
typedef struct bench_state {
  kvb_manager *m, *md, *mf, *ms, *mb, *mh; /* miss/hit, decode, fork/cow, swap, batch, host hits */
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
      !(st->mb = make_manager(o->block_size, batch_blocks, 0)))
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
    default: return run_batch(o, st->mb, &st->batch);
  }
}

static int wanted(const bench_opts* o, int k) {
  if (k == C_COW && cow_position(o) == 0) return 0; /* block size 1: no partly shared block */
  return !o->only || !strcmp(o->only, case_keys[k]);
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

static void print_config(report* r, const bench_opts* o) {
  report_group_begin(r, "config", "config");
  report_u64(r, "block_size", "block size", o->block_size, NULL);
  report_u64(r, "prompt_tokens", "prompt tokens", o->prompt_tokens, NULL);
  report_u64(r, "iters", "iters", o->iters, NULL);
  report_u64(r, "reps", "reps", o->reps, NULL);
  report_u64(r, "decode_seqs", "decode seqs", o->decode_seqs, NULL);
  report_u64(r, "decode_tokens", "decode tokens", o->decode_tokens, NULL);
  report_u64(r, "num_blocks", "num blocks", o->num_blocks, NULL);
  report_u64(r, "hash_bytes_per_block", "hash bytes", (uint64_t)o->block_size * 8 + 8, NULL);
  report_u64(r, "cow_fork_position", "cow position", cow_position(o), NULL);
  report_u64(r, "batch_seqs", "batch seqs", o->batch_seqs, NULL);
  report_u64(r, "batch_tokens", "batch tokens", o->batch_tokens, NULL);
  report_str(r, "device", "device", o->device);
  report_group_end(r);
}

/* The design goals of PERFORMANCE.md, as ratios to the bare hash so that they carry across machines.
   Printed with what each means; judged only on a full run (a --quick run is too short to judge). */
static void print_targets(report* r, const bench_opts* o, const bench_case* cases) {
  const bench_case *hash = &cases[C_HASH], *libhash = &cases[C_LIBHASH], *miss = &cases[C_MISS];
  const bench_case *hit = &cases[C_HIT], *dec = &cases[C_DECODE], *hh = &cases[C_HOSTHIT];
  double hhr = hh->median / hit->median;
  double hr = hit->median / hash->median, mr = miss->median / hash->median;
  double hl = hit->median / libhash->median, ml = miss->median / libhash->median;
  int hit_ok = hr <= 3.0, miss_ok = mr <= 4.0, dec_ok = dec->median <= 100.0;
  if (r->json) {
    report_group_begin(r, "targets", "targets");
    report_bool(r, "hit_le_3x_hash", "hit", hit_ok);
    report_bool(r, "miss_le_4x_hash", "miss", miss_ok);
    report_bool(r, "decode_le_100ns", "decode", dec_ok);
    report_bool(r, "hit_le_3x_kvb_hash_tokens", "hit (lib hash)", hl <= 3.0);
    report_bool(r, "miss_le_4x_kvb_hash_tokens", "miss (lib hash)", ml <= 4.0);
    report_bool(r, "hosthit_le_1_5x_hit", "host hit", hhr <= 1.5);
    report_group_end(r);
  } else {
    const char* met = o->quick ? "not judged" : NULL;
    fprintf(r->f,
            "  design goals (PERFORMANCE.md; the manager's cost as a multiple of hashing the block, which any\n"
            "  prefix cache must do, so the ratios carry across machines):\n"
            "    hit:    a prompt block found in the cache costs <= 3x its hash     %5.2fx  %s\n"
            "    miss:   a new prompt block (hash, index, evict) costs <= 4x        %5.2fx  %s\n"
            "    decode: one generated token (append + commit) costs <= 100 ns   %6.1f ns  %s\n"
            "    (against kvb_hash_tokens instead of the bare hash: hit %.2fx, miss %.2fx)\n",
            hr, met ? met : hit_ok ? "met" : "missed", mr, met ? met : miss_ok ? "met" : "missed", dec->median,
            met ? met : dec_ok ? "met" : "missed", hl, ml);
    fprintf(r->f, "    host hit: a block loaded from the host level costs <= 1.5x a hit    %5.2fx  %s\n", hhr,
            met ? met : hhr <= 1.5 ? "met" : "missed");
    if (o->quick) fputs("    (--quick: too few, too short repetitions to judge the goals; run kvblock bench)\n", r->f);
  }
}

static void print_manager(report* r, const bench_opts* o, const bench_case* cases) {
  int k;
  if (o->json) print_config(r, o);
  else if (!(o->only && !strcmp(o->only, "kernels")))
    fprintf(r->f,
            "kvblock bench: block size %u, prompt %llu tokens, %llu prompts x %llu repetitions (after a warm-up), "
            "decode %llu seqs x %llu tokens, batch export %llu seqs x %llu tokens\n"
            "  %-32s %8s %8s %8s %8s %8s %8s\n",
            o->block_size, (unsigned long long)o->prompt_tokens, (unsigned long long)o->iters,
            (unsigned long long)o->reps, (unsigned long long)o->decode_seqs, (unsigned long long)o->decode_tokens,
            (unsigned long long)o->batch_seqs, (unsigned long long)o->batch_tokens, "case", "median", "min", "max",
            "spread", "vs hash", "vs lib");
  for (k = 0; k < NUM_CASES; k++)
    if (cases[k].n) print_case(r, &cases[k], cases[C_HASH].median, cases[C_LIBHASH].median);
  if (!o->json && !o->only && cow_position(o) == 0) fputs("  cow: not run (block size 1: no block is shared in part)\n", r->f);
  if (!o->only) print_targets(r, o, cases);
}

static int run_kernels(const bench_opts* o, report* r) {
  kbench_opts ko;
  if (o->only && strcmp(o->only, "kernels")) return EXIT_OK;
  memset(&ko, 0, sizeof ko);
  ko.device = o->device;
  ko.reps = o->reps;
  ko.quick = o->quick;
  return bench_kernels(&ko, r);
}

int bench_main(int argc, char** argv) {
  bench_opts o;
  bench_case cases[NUM_CASES];
  bench_state st;
  uint64_t decode_blocks;
  int rc;
  report r;
  memset(&o, 0, sizeof o);
  memset(cases, 0, sizeof cases);
  memset(&st, 0, sizeof st);
  o.block_size = 16;
  o.prompt_tokens = 4096;
  o.iters = 200;
  o.reps = 9;
  o.decode_seqs = 64;
  o.decode_tokens = 1024;
  o.device = "cpu";
  if ((rc = parse_args(argc, argv, &o)) >= 0) return rc;
  if (!check_sizes(&o, &decode_blocks)) return EXIT_USAGE;
  /* An explicit --device cuda without a usable GPU fails before anything runs. */
  if ((!o.only || !strcmp(o.only, "kernels")) && !kbench_device_ok(o.device)) return EXIT_FAIL;
  label_cases(cases);
  if (!state_setup(&o, decode_blocks, &st) || !run_cases(&o, &st, cases)) {
    state_release(&st);
    return EXIT_FAIL;
  }
  state_release(&st);
  report_begin(&r, stdout, o.json, NULL);
  print_manager(&r, &o, cases);
  fflush(stdout);
  rc = run_kernels(&o, &r);
  report_end(&r);
  return rc;
}
