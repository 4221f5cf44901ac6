/* bench.c - `kvblock bench`: ns per block of the manager's prefix-cache miss and hit paths and ns per
   decode token, against a bare XXH64 over the same bytes (block_size * 8 token bytes + 8 parent bytes,
   computed with kvb_hash_tokens, which is exactly that XXH64). */
#include "bench.h"

#include <stdlib.h>
#include <string.h>

#include "report.h"
#include "util.h"
#include "xxh64.h"

#define MAX_REPS 1000

typedef struct bench_opts {
  uint32_t block_size;
  uint64_t prompt_tokens;
  uint64_t iters;          /* prompts per repetition (hash, miss, hit) */
  uint64_t reps;
  uint64_t decode_seqs;
  uint64_t decode_tokens;  /* tokens per sequence per repetition */
  uint64_t num_blocks;     /* pool of the miss / hit cases; 0 = 16 prompts' worth */
  int json;
  const char* only;        /* run just this case (profiling); NULL = all */
} bench_opts;

typedef struct bench_case {
  const char* key;
  const char* label;
  const char* unit;
  double samples[MAX_REPS];
  size_t n;
  double median, min, max, spread;
} bench_case;

void bench_help(FILE* f) {
  fputs(
      "NAME\n"
      "    kvblock bench - time the block manager's hot paths against a bare XXH64\n"
      "\n"
      "SYNOPSIS\n"
      "    kvblock bench [--quick] [--reps N] [--iters N] [--block-size N] [--prompt-tokens N]\n"
      "                  [--decode-seqs N] [--decode-tokens N] [--num-blocks N] [--json]\n"
      "\n"
      "DESCRIPTION\n"
      "    Five cases, each run once as a warm-up and then --reps times; the median, the minimum, the\n"
      "    maximum and the spread ((max - min) / median) of the repetitions are printed.\n"
      "      hash    bare XXH64 of one block's bytes (block_size * 8 token bytes + 8 parent-hash bytes),\n"
      "              chained over the prompt's blocks: the floor any prefix cache pays per block. The tool\n"
      "              computes it with its own one-shot XXH64 (xxh64.c, checked equal to kvb_hash_tokens).\n"
      "      kvb_hash_tokens   the same hash through the library call (informative).\n"
      "      miss    kvb_seq_allocate + kvb_seq_commit + kvb_seq_free of a fresh prompt (every block is\n"
      "              a cache miss, hashed and indexed at commit; once the pool has wrapped, every block\n"
      "              taken also evicts a cached one), per prompt block.\n"
      "      hit     kvb_seq_allocate + kvb_seq_free of a fully cached prompt (all blocks but the last\n"
      "              are hits: hash, index lookup, token comparison), per prompt block.\n"
      "      decode  kvb_seq_append + kvb_seq_commit of one token, round-robin over --decode-seqs\n"
      "              sequences (one block in block_size is filled, hashed and indexed), per token.\n"
      "    The ratios of each case to the bare hash (\"vs hash\") and to kvb_hash_tokens (\"vs lib\") are\n"
      "    printed, and the targets, judged against the bare hash: hit <= 3x, miss <= 4x, decode <= 100\n"
      "    ns/token (and, for information, hit and miss against kvb_hash_tokens).\n"
      "\n"
      "OPTIONS\n"
      "    --quick              small run for tests: 3 repetitions, 16 prompts, 64 decode tokens\n"
      "    --only CASE          run one case (hash, kvb_hash_tokens, miss, hit, decode), e.g. under a\n"
      "                         profiler; the warm-up still runs every case\n"
      "    --reps N             timed repetitions (default 9, at most 1000)\n"
      "    --iters N            prompts per repetition in the hash, miss and hit cases (default 200)\n"
      "    --block-size N       tokens per block (default 16)\n"
      "    --prompt-tokens N    prompt length (default 4096)\n"
      "    --decode-seqs N      sequences decoding together (default 64)\n"
      "    --decode-tokens N    tokens per sequence per repetition (default 1024)\n"
      "    --num-blocks N       pool of the miss and hit cases (default 16 prompts' worth of blocks)\n"
      "    --json               one JSON object: {\"config\": {...}, \"hash\": {...}, \"miss\": {...}, \"hit\": {...},\n"
      "                         \"decode\": {...}, \"targets\": {...}}; times in ns, spread and ratios as fractions\n"
      "    -h, --help           this text\n"
      "\n"
      "EXIT STATUS\n"
      "    0 done (targets missed are reported, not an error), 1 library failure, 2 usage error.\n",
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

/* One repetition of each case; returns ns per unit, or < 0 on a library failure. */
static double run_hash(const bench_opts* o, const int64_t* tokens, int library) {
  uint64_t it, b, nb = o->prompt_tokens / o->block_size, h = 0;
  double t0 = now_s();
  for (it = 0; it < o->iters; it++) {
    h = it;
    if (library)
      for (b = 0; b < nb; b++) h = kvb_hash_tokens(&h, tokens + b * o->block_size, o->block_size);
    else
      for (b = 0; b < nb; b++) h = xxh64_chain(h, tokens + b * o->block_size, o->block_size);
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

static kvb_manager* make_manager(uint32_t block_size, uint64_t num_blocks) {
  kvb_config cfg;
  kvb_manager* m = NULL;
  kvb_status s;
  kvb_config_init(&cfg);
  cfg.block_size = block_size;
  cfg.num_blocks = (uint32_t)num_blocks;
  if ((s = kvb_manager_create(&cfg, &m)) != KVB_OK) {
    lib_error("kvb_manager_create", s);
    return NULL;
  }
  return m;
}

static void print_case(report* r, const bench_case* c, double hash_median, double lib_median) {
  if (r->json) {
    report_group_begin(r, c->key, c->label);
    report_str(r, "unit", "unit", c->unit);
    report_f64(r, "median", "median", c->median, 2, NULL);
    report_f64(r, "min", "min", c->min, 2, NULL);
    report_f64(r, "max", "max", c->max, 2, NULL);
    report_f64(r, "spread", "spread", c->spread, 4, NULL);
    report_f64(r, "ratio_to_hash", "ratio", hash_median > 0 ? c->median / hash_median : 0.0, 3, NULL);
    report_f64(r, "ratio_to_kvb_hash_tokens", "ratio", lib_median > 0 ? c->median / lib_median : 0.0, 3, NULL);
    report_group_end(r);
  } else {
    fprintf(r->f, "  %-32s %8.1f %8.1f %8.1f %7.1f%% %7.2fx %7.2fx  %s\n", c->label, c->median, c->min, c->max,
            100.0 * c->spread, hash_median > 0 ? c->median / hash_median : 0.0,
            lib_median > 0 ? c->median / lib_median : 0.0, c->unit);
  }
}

int bench_main(int argc, char** argv) {
  bench_opts o;
  bench_case cases[5];
  bench_case *hash = &cases[0], *libhash = &cases[1], *miss = &cases[2], *hit = &cases[3], *dec = &cases[4];
  kvb_manager *m = NULL, *md = NULL;
  int64_t *tokens = NULL, fresh = (int64_t)1 << 50, next_token = (int64_t)1 << 52;
  uint64_t rep, i, decode_blocks;
  int quick = 0, rc = EXIT_OK, k;
  report r;
  char title[256];
  memset(&o, 0, sizeof o);
  memset(cases, 0, sizeof cases);
  o.block_size = 16;
  o.prompt_tokens = 4096;
  o.iters = 200;
  o.reps = 9;
  o.decode_seqs = 64;
  o.decode_tokens = 1024;
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
      o.json = 1;
    } else if (!strcmp(a, "--quick")) {
      quick = 1;
    } else if (OPT("--only")) {
      if (got < 0) return EXIT_USAGE;
      if (strcmp(val, "hash") && strcmp(val, "kvb_hash_tokens") && strcmp(val, "miss") && strcmp(val, "hit") &&
          strcmp(val, "decode")) {
        tool_error("bench: --only takes hash, kvb_hash_tokens, miss, hit or decode");
        return EXIT_USAGE;
      }
      o.only = val;
    } else if (OPT("--reps")) {
      if NUM("--reps", 1, MAX_REPS, &o.reps);
    } else if (OPT("--iters")) {
      if NUM("--iters", 1, 1000000, &o.iters);
    } else if (OPT("--block-size")) {
      uint64_t v;
      if NUM("--block-size", 1, 65536, &v);
      o.block_size = (uint32_t)v;
    } else if (OPT("--prompt-tokens")) {
      if NUM("--prompt-tokens", 2, 1u << 24, &o.prompt_tokens);
    } else if (OPT("--decode-seqs")) {
      if NUM("--decode-seqs", 1, 100000, &o.decode_seqs);
    } else if (OPT("--decode-tokens")) {
      if NUM("--decode-tokens", 1, 1u << 20, &o.decode_tokens);
    } else if (OPT("--num-blocks")) {
      if NUM("--num-blocks", 1, 1u << 30, &o.num_blocks);
    } else {
      tool_error("bench: unknown argument '%s' (kvblock bench --help)", a);
      return EXIT_USAGE;
    }
#undef NUM
#undef OPT
  }
  if (quick) {
    o.reps = 3;
    o.iters = 16;
    o.decode_tokens = 64;
  }
  if (o.prompt_tokens < o.block_size) {
    tool_error("bench: --prompt-tokens must be at least one block (%u)", o.block_size);
    return EXIT_USAGE;
  }
  if (!o.num_blocks) o.num_blocks = 16 * ((o.prompt_tokens + o.block_size - 1) / o.block_size);
  if (o.num_blocks < 2 * ((o.prompt_tokens + o.block_size - 1) / o.block_size)) {
    tool_error("bench: --num-blocks must hold two prompts");
    return EXIT_USAGE;
  }
  if (o.num_blocks > (1u << 30)) o.num_blocks = 1u << 30;
  decode_blocks = o.decode_seqs * ((64 + o.decode_tokens) / o.block_size + 2);
  if (decode_blocks > (1u << 30)) {
    tool_error("bench: the decode case needs too many blocks");
    return EXIT_USAGE;
  }
  hash->key = "hash", hash->label = "bare XXH64 of one block", hash->unit = "ns/block";
  libhash->key = "kvb_hash_tokens", libhash->label = "kvb_hash_tokens of one block", libhash->unit = "ns/block";
  miss->key = "miss", miss->label = "miss: allocate+commit+free", miss->unit = "ns/block";
  hit->key = "hit", hit->label = "hit: allocate+free (cached)", hit->unit = "ns/block";
  dec->key = "decode", dec->label = "decode: append+commit 1 token", dec->unit = "ns/token";

  tokens = (int64_t*)xmalloc(o.prompt_tokens * sizeof *tokens);
  for (i = 0; i < o.prompt_tokens; i++) tokens[i] = (int64_t)(i * 2654435761u % 151936u);
  {
    /* The baseline must be the very hash the library computes. */
    uint64_t parent = 0x0123456789abcdefULL, n = o.block_size;
    if (xxh64_chain(parent, tokens, (size_t)n) != kvb_hash_tokens(&parent, tokens, (size_t)n)) {
      tool_error("bench: the tool's XXH64 differs from kvb_hash_tokens (big-endian host?)");
      rc = EXIT_FAIL;
      goto done;
    }
  }
  if (!(m = make_manager(o.block_size, o.num_blocks)) || !(md = make_manager(o.block_size, decode_blocks))) {
    rc = EXIT_FAIL;
    goto done;
  }
  /* Warm-up: enough miss iterations to wrap the pool once, so that the timed runs see evictions. */
  {
    bench_opts w = o;
    uint64_t wrap = o.num_blocks / ((o.prompt_tokens + o.block_size - 1) / o.block_size) + 1;
    w.iters = o.iters > wrap ? o.iters : wrap;
    if (run_hash(&o, tokens, 0) < 0 || run_hash(&o, tokens, 1) < 0 || run_miss(&w, m, tokens, &fresh) < 0 || run_hit(&o, m, tokens) < 0 ||
        run_decode(&o, md, &next_token) < 0) {
      rc = EXIT_FAIL;
      goto done;
    }
  }
  for (rep = 0; rep < o.reps; rep++) {
    double v;
    /* Interleave the cases so that a slow moment of the machine touches all of them alike. */
#define WANT(c) (!o.only || !strcmp(o.only, (c)->key))
    if (WANT(hash)) hash->samples[hash->n++] = run_hash(&o, tokens, 0);
    if (WANT(libhash)) libhash->samples[libhash->n++] = run_hash(&o, tokens, 1);
    if (WANT(miss)) {
      if ((v = run_miss(&o, m, tokens, &fresh)) < 0) goto lib_failed;
      miss->samples[miss->n++] = v;
    }
    if (WANT(hit)) {
      if ((v = run_hit(&o, m, tokens)) < 0) goto lib_failed;
      hit->samples[hit->n++] = v;
    }
    if (WANT(dec)) {
      if ((v = run_decode(&o, md, &next_token)) < 0) goto lib_failed;
      dec->samples[dec->n++] = v;
    }
#undef WANT
  }
  for (k = 0; k < 5; k++) summarize(&cases[k]);

  snprintf(title, sizeof title,
           "kvblock bench: block size %u, prompt %llu tokens, %llu prompts x %llu repetitions (after a warm-up), "
           "decode %llu seqs x %llu tokens\n"
           "  %-32s %8s %8s %8s %8s %8s %8s",
           o.block_size, (unsigned long long)o.prompt_tokens, (unsigned long long)o.iters,
           (unsigned long long)o.reps, (unsigned long long)o.decode_seqs, (unsigned long long)o.decode_tokens,
           "case", "median", "min", "max", "spread", "vs hash", "vs lib");
  report_begin(&r, stdout, o.json, title);
  if (o.json) {
    report_group_begin(&r, "config", "config");
    report_u64(&r, "block_size", "block size", o.block_size, NULL);
    report_u64(&r, "prompt_tokens", "prompt tokens", o.prompt_tokens, NULL);
    report_u64(&r, "iters", "iters", o.iters, NULL);
    report_u64(&r, "reps", "reps", o.reps, NULL);
    report_u64(&r, "decode_seqs", "decode seqs", o.decode_seqs, NULL);
    report_u64(&r, "decode_tokens", "decode tokens", o.decode_tokens, NULL);
    report_u64(&r, "num_blocks", "num blocks", o.num_blocks, NULL);
    report_u64(&r, "hash_bytes_per_block", "hash bytes", (uint64_t)o.block_size * 8 + 8, NULL);
    report_group_end(&r);
  }
  for (k = 0; k < 5; k++)
    if (cases[k].n) print_case(&r, &cases[k], hash->median, libhash->median);
  if (!o.only) {
    double hr = hit->median / hash->median, mr = miss->median / hash->median;
    double hl = hit->median / libhash->median, ml = miss->median / libhash->median;
    int hit_ok = hr <= 3.0, miss_ok = mr <= 4.0, dec_ok = dec->median <= 100.0;
    if (o.json) {
      report_group_begin(&r, "targets", "targets");
      report_bool(&r, "hit_le_3x_hash", "hit", hit_ok);
      report_bool(&r, "miss_le_4x_hash", "miss", miss_ok);
      report_bool(&r, "decode_le_100ns", "decode", dec_ok);
      report_bool(&r, "hit_le_3x_kvb_hash_tokens", "hit (lib hash)", hl <= 3.0);
      report_bool(&r, "miss_le_4x_kvb_hash_tokens", "miss (lib hash)", ml <= 4.0);
      report_group_end(&r);
    } else {
      printf("  targets: hit <= 3x hash: %s (%.2fx), miss <= 4x hash: %s (%.2fx), decode <= 100 ns/token: %s (%.1f)\n",
             hit_ok ? "met" : "MISSED", hr, miss_ok ? "met" : "MISSED", mr, dec_ok ? "met" : "MISSED",
             dec->median);
      printf("  against kvb_hash_tokens instead: hit %.2fx (%s), miss %.2fx (%s)\n", hl, hl <= 3.0 ? "met" : "MISSED",
             ml, ml <= 4.0 ? "met" : "MISSED");
    }
  }
  report_end(&r);
  goto done;
lib_failed:
  rc = EXIT_FAIL;
done:
  kvb_manager_destroy(m);
  kvb_manager_destroy(md);
  free(tokens);
  return rc;
}
