/* bench_prefill.c - the prefill cases of `kvblock bench`: kvb_prefill_attention over a paged cache in
   TFLOP/s (causal flops actually needed: 4 * attended keys * head_dim per query row and head), fp16,
   bf16 and fp8 e4m3 caches (fp16 queries; the goal: fp8 no slower than fp16), Hq=32 Hkv=8 D=128,
   block 16, random data and random block tables. On the GPU each row is
   also given as a fraction of an fp16 cuBLAS GEMM measured in the same run (bench_gpu_peaks.c).

   Shapes (prompts x new tokens over cached tokens): the GPU runs the goal's three, (1 x 4096),
   (8 x 1024 over 3072) and a mixed batch (4 prefills of 512 + 60 decodes over 2048), and (8 x 4096)
   (the fp8 comparison); the CPU runs the first three
   with a quarter of the sequences and tokens (a sixteenth with --quick) to stay short. On the CPU the
   ceilings are those of the path the kernels run (kvb_cpu_isa), measured in the same run on every online
   CPU (bench_cpu_peaks.c): the fp32 FMA peak of its vector width, and where AMX tiles serve, the
   AMX-BF16 peak too (each row is given against both). */
#include <stdlib.h>
#include <string.h>

#include "bench_kernels_env.h"
#include "util.h"

/* ---------------------------------------------------------------------------------------------- */
/* Prefill cases                                                                                   */
/* ---------------------------------------------------------------------------------------------- */

int call_prefill(void* p) {
  prefill_ctx* c = (prefill_ctx*)p;
  return lib_ok("kvb_prefill_attention", kvb_prefill_attention(&c->cache.dev, &c->a, NULL));
}

void prefill_free(prefill_ctx* c) {
  kc_free_all(&c->cache, &c->q, &c->out, &c->qs, &c->lens, &c->tables, &c->ws, (kcache*)NULL);
}

static void set_dtype(kcache* c, uint32_t dtype) {
  c->dev.dtype = dtype; /* fp16 and bf16 have the same size: the fp16 allocation serves both, and fp8 */
  c->host.dtype = dtype; /* (strides are in elements: its bytes are the first half) */
}

/* e4m3 codes of magnitude 1/8..1.875 (no NaN codes) in the fp8 cache's bytes, uploaded; scales 1. */
static int fill_fp8(kenv* e, kcache* c) {
  size_t i, n = (size_t)c->host.num_blocks * (size_t)c->host.block_stride;
  for (i = 0; i < n; i++) {
    uint64_t x = next_rand(&e->seed);
    ((unsigned char*)c->host.k)[i] = (unsigned char)((x & 0x80u) | ((4u + (x >> 8) % 4u) << 3) | ((x >> 16) & 7u));
    ((unsigned char*)c->host.v)[i] = (unsigned char)(((x >> 24) & 0x80u) | ((4u + (x >> 32) % 4u) << 3) | ((x >> 40) & 7u));
  }
  return kc_upload(e, c);
}

int prefill_setup(kenv* e, prefill_ctx* c, const pshape* s, uint32_t dtype) {
  uint32_t n = s->prompts + s->decodes, i, b, maxb = 0, nblocks = 0, total_q = 0, next = 0;
  int32_t *qs, *lens, *tab, *perm;
  size_t qbytes;
  kvb_status st;
  memset(c, 0, sizeof *c);
  for (i = 0; i < n; i++) {
    uint32_t len = i < s->prompts ? s->cached + s->new_tokens : s->decode_ctx + 1;
    uint32_t q = i < s->prompts ? s->new_tokens : 1, cached = len - q;
    nblocks += (len + BS - 1) / BS;
    if ((len + BS - 1) / BS > maxb) maxb = (len + BS - 1) / BS;
    total_q += q;
    c->flops += ((double)q * cached + (double)q * (q + 1) / 2) * HQ * HD * 4;
  }
  qbytes = (size_t)total_q * HQ * HD * 2;
  if (!kc_alloc(e, &c->cache, nblocks, BS, HKV, HD, 2048) || !kc_fill_random(e, &c->cache) ||
      !kc_buffer(e, &c->q, qbytes) || !kc_buffer(e, &c->out, qbytes) || !kc_buffer(e, &c->qs, (size_t)(n + 1) * 4) ||
      !kc_buffer(e, &c->lens, (size_t)n * 4) || !kc_buffer(e, &c->tables, (size_t)n * maxb * 4))
    return 0;
  set_dtype(&c->cache, dtype);
  if (dtype == KVB_DTYPE_FP8_E4M3 && !fill_fp8(e, &c->cache)) return 0;
  fill16((uint16_t*)c->q.host.k, qbytes / 2, &e->seed);
  qs = (int32_t*)c->qs.host.k;
  lens = (int32_t*)c->lens.host.k;
  tab = (int32_t*)c->tables.host.k;
  perm = (int32_t*)xmalloc((size_t)nblocks * sizeof *perm);
  random_tables(perm, nblocks, &e->seed);
  qs[0] = 0;
  for (i = 0; i < n; i++) {
    uint32_t len = i < s->prompts ? s->cached + s->new_tokens : s->decode_ctx + 1;
    qs[i + 1] = qs[i] + (int32_t)(i < s->prompts ? s->new_tokens : 1);
    lens[i] = (int32_t)len;
    for (b = 0; b < maxb; b++) tab[(size_t)i * maxb + b] = b * BS < len ? perm[next++] : -1;
  }
  free(perm);
  kvb_prefill_args_init(&c->a);
  c->a.num_seqs = n;
  c->a.num_q_heads = HQ;
  c->a.max_blocks_per_seq = maxb;
  c->a.total_q_tokens = total_q;
  c->a.q_dtype = KVB_DTYPE_FP16; /* read for fp8 caches only */
  if ((st = kvb_prefill_attention_workspace_size(&c->cache.dev, &c->a, &c->a.workspace_size)) != KVB_OK) {
    lib_error("kvb_prefill_attention_workspace_size", st);
    return 0;
  }
  if (c->a.workspace_size && !kc_buffer(e, &c->ws, c->a.workspace_size)) return 0;
  if (!kc_upload(e, &c->q) || !kc_upload(e, &c->qs) || !kc_upload(e, &c->lens) || !kc_upload(e, &c->tables)) return 0;
  KC_POINT_CALL(c->a, c->q, c->out, c->tables, c->lens, c->ws);
  c->a.query_start = (const int32_t*)c->qs.dev.k;
  return 1;
}

/* The CPU ceilings of this run: fma always, amx where its gflops is set. */
typedef struct prefill_peaks {
  cpu_peak fma, amx;
} prefill_peaks;

static void print_prefill(kenv* e, const kresult* res, double flops, const prefill_peaks* pk) {
  report* r = e->r;
  double tf = res->med > 0 ? flops / res->med / 1e12 : 0.0;
  double of_fma = pk->fma.gflops > 0 ? tf * 1e3 / pk->fma.gflops : 0.0, of_amx = pk->amx.gflops > 0 ? tf * 1e3 / pk->amx.gflops : 0.0;
  report_times(r, res);
  if (r->json) {
    report_f64(r, "flops", "flops", flops, 0, NULL);
    report_f64(r, "tflops", "TFLOP/s", tf, 4, NULL);
    if (!e->cuda) {
      report_f64(r, "of_fma_peak", "of the path's fp32 FMA peak", of_fma, 4, NULL);
      if (pk->amx.gflops > 0) report_f64(r, "of_amx_peak", "of the AMX-BF16 peak", of_amx, 4, NULL);
    } else if (e->tc_tflops > 0)
      report_f64(r, "of_tensor_core_ceiling", "of fp16 GEMM ceiling", tf / e->tc_tflops, 4, NULL);
    report_group_end(r);
  } else {
    fprintf(r->f, " %9.4f TFLOP/s", tf);
    if (!e->cuda) {
      fprintf(r->f, " %6.1f%% of %s peak", 100.0 * of_fma, pk->fma.name);
      if (pk->amx.gflops > 0) fprintf(r->f, ", %.1f%% of %s peak", 100.0 * of_amx, pk->amx.name);
    } else if (e->tc_tflops > 0)
      fprintf(r->f, " %6.1f%% of %s", 100.0 * tf / e->tc_tflops, e->tc_name);
    else
      fprintf(r->f, "    n/a  (tensor-core ceiling not measured)");
    fputc('\n', r->f);
    fflush(r->f);
  }
}

/* CPU: the path's header line, then its ceilings measured now. */
static void measure_peaks(kenv* e, prefill_peaks* pk) {
  const char* isa = kvb_cpu_isa();
  report* r = e->r;
  print_cpu_path(e, "prefill attention", "prefill_cpu_path");
  cpu_fma_peak(isa, e->quick, &pk->fma);
  cpu_amx_peak(isa, e->quick, &pk->amx);
  if (r->json) {
    report_f64(r, "fma_peak_gflops", "fp32 FMA peak GFLOP/s", pk->fma.gflops, 2, NULL);
    report_str(r, "fma_peak_kind", "fp32 FMA peak kind", pk->fma.name);
    if (pk->amx.gflops > 0) report_f64(r, "amx_peak_gflops", "AMX-BF16 peak GFLOP/s", pk->amx.gflops, 2, NULL);
    else report_str(r, "amx_peak_skipped", "AMX-BF16 peak not measured", pk->amx.why);
    return;
  }
  fprintf(r->f, "  %-38s %.1f GFLOP/s (%s, %d thread%s)\n", "ceiling: fp32 FMA peak", pk->fma.gflops, pk->fma.name,
          pk->fma.threads, pk->fma.threads > 1 ? "s" : "");
  if (pk->amx.gflops > 0)
    fprintf(r->f, "  %-38s %.1f GFLOP/s (%d thread%s)\n", "ceiling: AMX-BF16 peak", pk->amx.gflops,
            pk->amx.threads, pk->amx.threads > 1 ? "s" : "");
  else
    fprintf(r->f, "  %-38s not measured: %s\n", "ceiling: AMX-BF16 peak", pk->amx.why);
}

int bench_prefill(kenv* e) {
  static const pshape gpu[4] = {{"prefill_1x4096", 1, 4096, 0, 0, 0},
                                {"prefill_8x1024_over_3072", 8, 1024, 3072, 0, 0},
                                {"mixed_4x512_60_decodes", 4, 512, 0, 60, 2048},
                                {"prefill_8x4096", 8, 4096, 0, 0, 0}};
  static const pshape cpu[3] = {{"prefill_1x1024", 1, 1024, 0, 0, 0},
                                {"prefill_2x256_over_768", 2, 256, 768, 0, 0},
                                {"mixed_1x128_15_decodes", 1, 128, 0, 15, 512}};
  static const pshape cpu_quick[3] = {{"prefill_1x256", 1, 256, 0, 0, 0},
                                      {"prefill_1x64_over_192", 1, 64, 192, 0, 0},
                                      {"mixed_1x32_4_decodes", 1, 32, 0, 4, 128}};
  const pshape* shapes = e->cuda ? gpu : (e->quick ? cpu_quick : cpu);
  const int num_shapes = e->cuda ? 4 : 3;
  const uint32_t dtypes[3] = {KVB_DTYPE_FP16, KVB_DTYPE_BF16, KVB_DTYPE_FP8_E4M3};
  static const char* const dname[3] = {"fp16", "bf16", "fp8_e4m3"};
  prefill_peaks pk;
  uint64_t reps = e->reps;
  int s, d, ok = 1;
  memset(&pk, 0, sizeof pk);
  if (!e->cuda) {
    measure_peaks(e, &pk);
    if (e->reps > 3) e->reps = 3; /* CPU prefill calls take tenths of a second each */
  }
  for (s = 0; s < num_shapes && ok; s++)
    for (d = 0; d < 3 && ok; d++) {
      prefill_ctx c;
      kresult* res = (kresult*)xcalloc(1, sizeof *res);
      const pshape* p = &shapes[s];
      snprintf(res->key, sizeof res->key, "%s_%s", p->key, dname[d]);
      if (p->decodes)
        snprintf(res->label, sizeof res->label, "prefill %s %ux%u + %u decodes@%u", dname[d], p->prompts,
                 p->new_tokens, p->decodes, p->decode_ctx);
      else
        snprintf(res->label, sizeof res->label, "prefill %s %ux%u over %u", dname[d], p->prompts, p->new_tokens,
                 p->cached);
      ok = prefill_setup(e, &c, p, dtypes[d]) && time_calls(e, call_prefill, &c, res);
      if (ok) print_prefill(e, res, c.flops, &pk);
      prefill_free(&c);
      free(res);
    }
  e->reps = reps;
  return ok;
}
