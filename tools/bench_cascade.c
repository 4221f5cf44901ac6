/* bench_cascade.c - the shared-prefix cases of `kvblock bench`: kvb_paged_attention on the same batch
   without and with its kvb_prefix_groups, the two calls interleaved sample by sample (so that load from
   other processes hits both alike), medians reported. Shapes (fp16, Hq 32, Hkv 8, D 128, block 16).
   CPU: 64 sequences sharing 4,096 tokens with 128 own tokens each (one group of 64), and 64 sequences of
   4,224 tokens sharing nothing (a description with no groups). CUDA (kernels/cascade/cascade.cu, decode):
   256 sequences sharing 16,384 tokens with 256 own tokens each, and 64 sequences of 8,192 tokens sharing
   2,048 (the H100 targets of PERFORMANCE.md), and an extend row: kvb_prefill_attention for 64 sequences
   sharing 4,096 tokens, each adding 16 new tokens after 112 own cached ones (speculative decoding / chunked
   extends of n > 1 samples). The ceiling is the plain call of the same run (its K+V bytes against the
   read ceiling). GPU calls are fenced on both sides (fence()): a sample is the kernels' time, not the
   launch's.
   The sweep (CPU and GPU): 64 sequences of 4,224 tokens, the shared part from 32 to 4,096 tokens; each
   row times plain, the description as given (policy AUTO: the kernels keep a group where their cost
   model expects a gain) and with KVB_PREFIX_GROUPS_ALWAYS (every group run), and prints grouped / plain
   for both (the AUTO figure is the one that must not fall below plain).
   Decode rows in a prefill call (CPU): kvb_prefill_attention with q_len 1 for each of 64 sequences of
   4,224 tokens against kvb_paged_attention on the same batch. */
#include <stdlib.h>
#include <string.h>

#include "bench_kernels_env.h"
#include "util.h"

/* What one timed call runs. */
enum { V_PLAIN, V_GROUPED, V_ALWAYS, V_PREFILL_Q1, NUM_VARIANTS };

typedef struct cascade_ctx {
  kcache cache, q, out, tables, lens, ws, qstart;
  uint32_t q_len; /* 0: decode (kvb_paged_attention); else new tokens per sequence (kvb_prefill_attention) */
  int both;       /* q_len 1: a and p both set up (decode rows as a decode and as a prefill call) */
  kvb_attention_args a;
  kvb_prefill_args p;
  kvb_prefix_groups g;
  int32_t group_start[2], members[256], shared_blocks[1];
} cascade_ctx;

static int cmp_dbl(const void* x, const void* y) {
  double a = *(const double*)x, b = *(const double*)y;
  return a < b ? -1 : a > b;
}

static double median(double* v, size_t n) {
  qsort(v, n, sizeof *v, cmp_dbl);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void cascade_free(cascade_ctx* c) {
  kc_free_all(&c->cache, &c->q, &c->out, &c->tables, &c->lens, &c->ws, &c->qstart, (kcache*)NULL);
}

/* batch sequences of shared + own tokens; shared > 0: the first shared / BS columns of every row are
   the same blocks (one group), the rest each row's own. q_len > 0: an extend of the last q_len of the own
   tokens (kvb_prefill_attention); 0: a decode. */
static int cascade_setup(kenv* e, cascade_ctx* c, uint32_t batch, uint32_t shared, uint32_t own, uint32_t q_len) {
  uint32_t i, b, sb = shared / BS, ob = own / BS, maxb = sb + ob, nblocks = sb + batch * ob;
  uint32_t rows = batch * (q_len ? q_len : 1);
  size_t qbytes = (size_t)rows * HQ * HD * 2;
  int32_t *t, *perm;
  kvb_status st;
  memset(c, 0, sizeof *c);
  c->q_len = q_len;
  if (!kc_alloc(e, &c->cache, nblocks, BS, HKV, HD, 2048) || !kc_fill_random(e, &c->cache) ||
      !kc_buffer(e, &c->q, qbytes) || !kc_buffer(e, &c->out, qbytes) ||
      !kc_buffer(e, &c->tables, (size_t)batch * maxb * 4) || !kc_buffer(e, &c->lens, (size_t)batch * 4) ||
      !kc_buffer(e, &c->qstart, ((size_t)batch + 1) * 4))
    return 0;
  for (i = 0; i <= batch; i++) ((int32_t*)c->qstart.host.k)[i] = (int32_t)(i * q_len);
  fill16((uint16_t*)c->q.host.k, qbytes / 2, &e->seed);
  perm = (int32_t*)xcalloc(nblocks, sizeof *perm);
  random_tables(perm, nblocks, &e->seed);
  t = (int32_t*)c->tables.host.k;
  for (i = 0; i < batch; i++) {
    for (b = 0; b < sb; b++) t[i * maxb + b] = perm[b];
    for (b = 0; b < ob; b++) t[i * maxb + sb + b] = perm[sb + i * ob + b];
    ((int32_t*)c->lens.host.k)[i] = (int32_t)(shared + own);
    if (i < 256) c->members[i] = (int32_t)i;
  }
  free(perm);
  /* GPU: q, tables, lengths and query_start to the device (the staging side is what was filled). */
  if (!kc_upload(e, &c->q) || !kc_upload(e, &c->tables) || !kc_upload(e, &c->lens) || !kc_upload(e, &c->qstart))
    return 0;
  kvb_prefix_groups_init(&c->g);
  c->group_start[0] = 0;
  c->group_start[1] = (int32_t)(batch < 256 ? batch : 256);
  c->shared_blocks[0] = (int32_t)sb;
  c->g.group_start = c->group_start;
  c->g.members = c->members;
  c->g.shared_blocks = c->shared_blocks;
  c->g.num_groups = sb > 0 ? 1 : 0;
  c->g.num_members = sb > 0 ? (uint32_t)c->group_start[1] : 0;
  if (q_len == 1) c->both = 1;
  if (q_len) {
    kvb_prefill_args_init(&c->p);
    c->p.num_seqs = batch;
    c->p.num_q_heads = HQ;
    c->p.max_blocks_per_seq = maxb;
    c->p.total_q_tokens = rows;
    c->p.prefix_groups = &c->g;
    if ((st = kvb_prefill_attention_workspace_size(&c->cache.dev, &c->p, &c->p.workspace_size)) != KVB_OK) {
      lib_error("kvb_prefill_attention_workspace_size", st);
      return 0;
    }
    if (c->p.workspace_size && !c->both && !kc_buffer(e, &c->ws, c->p.workspace_size)) return 0;
    KC_POINT_CALL(c->p, c->q, c->out, c->tables, c->lens, c->ws);
    c->p.query_start = (const int32_t*)c->qstart.dev.k;
    if (!c->both) return 1;
  }
  kvb_attention_args_init(&c->a);
  c->a.num_seqs = batch;
  c->a.num_q_heads = HQ;
  c->a.max_blocks_per_seq = maxb;
  c->a.prefix_groups = &c->g; /* the workspace of both paths (a CUDA cache's shared-prefix path needs more) */
  if ((st = kvb_paged_attention_workspace_size(&c->cache.dev, &c->a, &c->a.workspace_size)) != KVB_OK) {
    lib_error("kvb_paged_attention_workspace_size", st);
    return 0;
  }
  if (c->both && c->p.workspace_size > c->a.workspace_size) c->a.workspace_size = c->p.workspace_size;
  if (c->a.workspace_size && !kc_buffer(e, &c->ws, c->a.workspace_size)) return 0;
  if (c->both) c->p.workspace = c->p.workspace_size ? c->ws.dev.k : NULL;
  KC_POINT_CALL(c->a, c->q, c->out, c->tables, c->lens, c->ws);
  return 1;
}

/* Wall and process CPU seconds of one call (CPU time: every thread of the call, less sensitive to other
   processes on a loaded machine than the wall time). */
static int call(kenv* e, cascade_ctx* c, int variant, double* seconds, double* cpu_seconds) {
  kvb_status st;
  double c0, t0;
  int prefill = c->both ? variant == V_PREFILL_Q1 : c->q_len > 0;
  const kvb_prefix_groups* pg = variant == V_GROUPED || variant == V_ALWAYS ? &c->g : NULL;
  c->g.policy = variant == V_ALWAYS ? KVB_PREFIX_GROUPS_ALWAYS : KVB_PREFIX_GROUPS_AUTO;
  if (!fence(e)) return 0; /* GPU: nothing of the previous call runs into this sample */
  c0 = cpu_s();
  t0 = now_s();
  if (prefill) {
    c->p.prefix_groups = pg;
    st = kvb_prefill_attention(&c->cache.dev, &c->p, NULL);
  } else {
    c->a.prefix_groups = pg;
    st = kvb_paged_attention(&c->cache.dev, &c->a, NULL);
  }
  if (st != KVB_OK) {
    lib_error(prefill ? "kvb_prefill_attention" : "kvb_paged_attention", st);
    return 0;
  }
  if (!fence(e)) return 0; /* GPU: the kernels are done */
  *seconds = now_s() - t0;
  *cpu_seconds = cpu_s() - c0;
  return 1;
}

/* The variants of a row, their calls interleaved sample by sample (the order rotates from sample to
   sample, so that load from other processes hits every variant alike); medians reported, and each
   variant's speed-up over the first (plain or decode) as the median of the per-sample ratios (each
   sample's calls run back to back, so a change of load between samples cancels). */
static int run_variants(kenv* e, const char* key, const char* label, uint32_t batch, uint32_t shared, uint32_t own,
                        uint32_t q_len, const int* variants, int nv) {
  static const char* names[NUM_VARIANTS] = {"plain", "grouped", "always", "prefill"};
  static double wall[NUM_VARIANTS][KMAX_REPS], cpu[NUM_VARIANTS][KMAX_REPS];
  static double ratio[NUM_VARIANTS][KMAX_REPS], cratio[NUM_VARIANTS][KMAX_REPS];
  double med[NUM_VARIANTS], cmed[NUM_VARIANTS], up[NUM_VARIANTS], cup[NUM_VARIANTS], t, tc, bytes;
  cascade_ctx c;
  uint64_t rep;
  int k, ok = cascade_setup(e, &c, batch, shared, own, q_len);
  size_t n = (size_t)(e->reps < KMAX_REPS ? e->reps : KMAX_REPS);
  report* r = e->r;
  for (k = 0; ok && k < nv; k++) ok = call(e, &c, variants[k], &t, &tc); /* warm-up */
  for (rep = 0; ok && rep < n; rep++)
    for (k = 0; ok && k < nv; k++) {
      int v = (int)((rep + (uint64_t)k) % (uint64_t)nv);
      ok = call(e, &c, variants[v], &wall[v][rep], &cpu[v][rep]);
    }
  if (ok) {
    for (k = 0; k < nv; k++)
      for (rep = 0; rep < n; rep++) {
        ratio[k][rep] = wall[k][rep] > 0 ? wall[0][rep] / wall[k][rep] : 0.0;
        cratio[k][rep] = cpu[k][rep] > 0 ? cpu[0][rep] / cpu[k][rep] : 0.0;
      }
    for (k = 0; k < nv; k++) {
      up[k] = median(ratio[k], n);
      cup[k] = median(cratio[k], n);
      med[k] = median(wall[k], n);
      cmed[k] = median(cpu[k], n);
    }
    bytes = (double)batch * (shared + own) * HKV * HD * 2 * 2;
    if (r->json) {
      report_group_begin(r, key, label);
      for (k = 0; k < nv; k++) {
        char name[64], desc[64];
        snprintf(name, sizeof name, "%s_median_us", names[variants[k]]);
        snprintf(desc, sizeof desc, "%s median", names[variants[k]]);
        report_f64(r, name, desc, med[k] * 1e6, 2, NULL);
        if (k > 0) {
          snprintf(name, sizeof name, "%s_speedup", names[variants[k]]);
          snprintf(desc, sizeof desc, "%s speed-up over %s", names[variants[k]], names[variants[0]]);
          report_f64(r, name, desc, up[k], 3, NULL);
        }
        if (!e->cuda) {
          snprintf(name, sizeof name, "%s_cpu_median_us", names[variants[k]]);
          snprintf(desc, sizeof desc, "%s process CPU time median", names[variants[k]]);
          report_f64(r, name, desc, cmed[k] * 1e6, 2, NULL);
        }
      }
      report_f64(r, "plain_gbps", "first variant GB/s", bytes / med[0] / 1e9, 3, NULL);
      if (e->ceil[CEIL_READ] > 0)
        report_f64(r, "plain_of_ceiling", "first variant of read ceiling", bytes / med[0] / 1e9 / e->ceil[CEIL_READ], 4, NULL);
      report_group_end(r);
    } else {
      fprintf(r->f, "  %-38s %10.1f", label, med[0] * 1e6);
      for (k = 1; k < nv; k++) fprintf(r->f, " %10.1f x%.2f", med[k] * 1e6, up[k]);
      fprintf(r->f, "  (%s GB/s %.2f, %.1f%% of %s; medians, interleaved)\n", names[variants[0]], bytes / med[0] / 1e9,
              e->ceil[CEIL_READ] > 0 ? 100.0 * bytes / med[0] / 1e9 / e->ceil[CEIL_READ] : 0.0, e->ceil_name[CEIL_READ]);
      if (!e->cuda) {
        fprintf(r->f, "  %-38s %10.1f", "  process CPU time, all threads", cmed[0] * 1e6);
        for (k = 1; k < nv; k++) fprintf(r->f, " %10.1f x%.2f", cmed[k] * 1e6, cup[k]);
        fputc('\n', r->f);
      }
      fflush(r->f);
    }
  }
  cascade_free(&c);
  return ok;
}

/* Plain against the description as given. */
static int run_case(kenv* e, const char* key, const char* label, uint32_t batch, uint32_t shared, uint32_t own,
                    uint32_t q_len) {
  static const int v[] = {V_PLAIN, V_GROUPED};
  return run_variants(e, key, label, batch, shared, own, q_len, v, 2);
}

/* The sweep of shared / own splits of 4,224 tokens (--quick: 16 sequences of 576). */
static int run_sweep(kenv* e) {
  static const int v[] = {V_PLAIN, V_GROUPED, V_ALWAYS};
  static const uint32_t full[] = {32, 256, 1024, 2048, 3072, 4096}, quick[] = {32, 256, 512};
  const uint32_t* sh = e->quick ? quick : full;
  uint32_t i, n = e->quick ? 3 : 6, batch = e->quick ? 16 : 64, total = e->quick ? 576 : 4224;
  int ok = 1;
  if (!e->r->json)
    fprintf(e->r->f, "  %-38s %10s %10s %5s %10s %5s\n", "sweep: shared + own tokens", "plain us", "grouped", "", "always", "");
  for (i = 0; ok && i < n; i++) {
    char key[64], label[80];
    snprintf(key, sizeof key, "cascade_sweep_%ux%u+%u", batch, sh[i], total - sh[i]);
    snprintf(label, sizeof label, "%u seqs share %u + %u own", batch, sh[i], total - sh[i]);
    ok = run_variants(e, key, label, batch, sh[i], total - sh[i], 0, v, 3);
  }
  return ok;
}

/* Decode rows in a prefill call: q_len 1 for every sequence, against the decode call (CPU). */
static int run_decode_rows(kenv* e) {
  static const int v[] = {V_PLAIN, V_PREFILL_Q1};
  if (!e->r->json) fprintf(e->r->f, "  %-38s %10s %10s\n", "decode rows, extend call of q_len 1", "decode us", "q_len 1 us");
  return e->quick ? run_variants(e, "prefill_q1_16x576", "16 seqs x 576 tokens, q_len 1", 16, 0, 576, 1, v, 2)
                  : run_variants(e, "prefill_q1_64x4224", "64 seqs x 4224 tokens, q_len 1", 64, 0, 4224, 1, v, 2) &&
                        run_variants(e, "prefill_q1_8x4096", "8 seqs x 4096 tokens, q_len 1", 8, 0, 4096, 1, v, 2);
}

int bench_cascade(kenv* e) {
  print_cpu_path(e, "shared-prefix decode", "cascade_cpu_path");
  if (!e->r->json)
    fprintf(e->r->f, "  %-38s %10s %10s  %s\n", "shared prefix", "plain us", "cascade us", "speed-up");
  if (e->cuda && e->quick)
    return run_case(e, "cascade_64x2048+256", "64 seqs share 2048 + 256 own tokens", 64, 2048, 256, 0) &&
           run_case(e, "cascade_extend_16x1024+64q16", "extend: 16 seqs share 1024, +16 new (64 own)", 16, 1024, 64,
                    16);
  if (e->cuda)
    return run_case(e, "cascade_256x16384+256", "256 seqs share 16384 + 256 own tokens", 256, 16384, 256, 0) &&
           run_case(e, "cascade_64x2048+6144", "64 seqs share 2048 of 8192 tokens", 64, 2048, 6144, 0) &&
           run_case(e, "cascade_extend_64x4096+128q16", "extend: 64 seqs share 4096, +16 new (128 own)", 64, 4096,
                    128, 16) &&
           run_sweep(e);
  if (e->quick)
    return run_case(e, "cascade_16x512+64", "16 seqs share 512 + 64 own tokens", 16, 512, 64, 0) &&
           run_case(e, "cascade_none_16x576", "16 seqs x 576 tokens, none shared", 16, 0, 576, 0) && run_sweep(e) &&
           run_decode_rows(e);
  return run_case(e, "cascade_64x4096+128", "64 seqs share 4096 + 128 own tokens", 64, 4096, 128, 0) &&
         run_case(e, "cascade_none_64x4224", "64 seqs x 4224 tokens, none shared", 64, 0, 4224, 0) && run_sweep(e) &&
         run_decode_rows(e);
}
