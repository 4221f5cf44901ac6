/* bench_tree.c - the token-tree cases of `kvblock bench`: kvb_prefill_attention of a batch of draft
   trees (random parents, 64 nodes per sequence, fp16) with their tree mask against the same call without
   it (plain causal extend of the same tokens; target: the mask costs at most 1.2x), the two calls
   interleaved sample by sample (so that load from other processes hits both alike), and kvb_copy_slots
   of tree compactions (the accepted path of every tree moved to its first slots, 8 layers) in GB/s (read
   + write) against the copy ceiling measured in the same run. */
#include <stdlib.h>
#include <string.h>

#include "bench_kernels_env.h"
#include "util.h"

#define TREE_NODES 64

/* Words of a random tree of n nodes: node i's parent is -1 or an earlier node; bit i and the parent's word. */
static void random_tree(uint64_t* w, uint32_t n, uint64_t* seed) {
  uint32_t i;
  for (i = 0; i < n; i++) {
    const int64_t parent = (int64_t)(next_rand(seed) % (i + 1)) - 1;
    w[i] = ((uint64_t)1 << i) | (parent >= 0 ? w[parent] : 0);
  }
}

static void print_extend(kenv* e, const kresult* res, double base_med) {
  report* r = e->r;
  const double ratio = base_med > 0 ? res->med / base_med : 0.0;
  report_times(r, res);
  if (r->json) {
    if (base_med > 0) report_f64(r, "of_plain_extend", "time of the plain extend", ratio, 4, NULL);
    report_group_end(r);
  } else {
    if (base_med > 0) fprintf(r->f, "  %.3fx the plain extend's time (medians, interleaved; target <= 1.2x)", ratio);
    fputc('\n', r->f);
    fflush(r->f);
  }
}

static int bench_tree_extend(kenv* e) {
  const pshape s = {"tree", e->cuda ? 64u : (e->quick ? 2u : 8u), TREE_NODES, e->cuda ? 2048u : (e->quick ? 192u : 960u), 0, 0};
  prefill_ctx c;
  kcache words;
  kresult* res = (kresult*)xcalloc(2, sizeof *res);
  uint32_t i;
  uint64_t reps = e->reps, rep;
  int ok;
  memset(&words, 0, sizeof words);
  ok = prefill_setup(e, &c, &s, KVB_DTYPE_FP16) && kc_buffer(e, &words, (size_t)s.prompts * TREE_NODES * 8);
  if (ok) {
    for (i = 0; i < s.prompts; i++) random_tree((uint64_t*)words.host.k + (size_t)i * TREE_NODES, TREE_NODES, &e->seed);
    ok = kc_upload(e, &words);
  }
  if (!e->cuda && e->reps > 7) e->reps = 7;
  snprintf(res[0].key, sizeof res[0].key, "extend_plain_%ux%u", s.prompts, TREE_NODES);
  snprintf(res[0].label, sizeof res[0].label, "extend fp16 %ux%u over %u, causal", s.prompts, TREE_NODES, s.cached);
  snprintf(res[1].key, sizeof res[1].key, "extend_tree_%ux%u", s.prompts, TREE_NODES);
  snprintf(res[1].label, sizeof res[1].label, "extend fp16 %ux%u over %u, tree mask", s.prompts, TREE_NODES, s.cached);
  /* One warm-up call of each, then samples alternating plain / tree (tree first on odd samples). */
  for (rep = 0; ok && rep <= e->reps; rep++) {
    int k, j;
    for (k = 0; ok && k < 2; k++) {
      const int which = k ^ (int)(rep & 1);
      double t0;
      c.a.tree_mask = which ? (const uint64_t*)words.dev.k : NULL;
      t0 = now_s();
      for (j = 0; ok && j < e->inner; j++) ok = call_prefill(&c);
      ok = ok && fence(e);
      if (rep > 0) res[which].samples[res[which].n++] = (now_s() - t0) / e->inner;
    }
  }
  c.a.tree_mask = NULL;
  for (i = 0; ok && i < 2; i++) {
    double sorted[KMAX_REPS];
    memcpy(sorted, res[i].samples, res[i].n * sizeof(double));
    qsort(sorted, res[i].n, sizeof(double), cmp_double);
    res[i].med = quantile_sorted(sorted, res[i].n, 0.5);
    res[i].min = sorted[0];
    res[i].max = sorted[res[i].n - 1];
  }
  if (ok) {
    print_extend(e, &res[0], 0);
    print_extend(e, &res[1], res[0].med);
  }
  e->reps = reps;
  prefill_free(&c);
  kc_free(&words);
  free(res);
  return ok;
}

typedef struct slots_ctx {
  kcache dev[KMAX_LAYERS];
  kvb_cache_desc devs[KMAX_LAYERS];
  uint32_t layers;
  int64_t* pairs;
  size_t n;
} slots_ctx;

static int call_slots(void* p) {
  slots_ctx* c = (slots_ctx*)p;
  return lib_ok("kvb_copy_slots", kvb_copy_slots(c->devs, c->layers, c->pairs, c->n, NULL));
}

/* trees trees of 64 slots each; each keeps a random accepted path of 8..40 nodes (increasing node
   indices), moved to the tree's first slots (nodes already in place make no pair). */
static int bench_copy_slots(kenv* e) {
  slots_ctx c;
  const uint32_t trees = e->quick ? 16 : 256, nblocks = trees * TREE_NODES / BS;
  uint32_t t, l;
  char label[64];
  int ok = 1;
  memset(&c, 0, sizeof c);
  c.layers = e->quick ? 2 : 8;
  c.pairs = (int64_t*)xmalloc((size_t)trees * TREE_NODES * 2 * sizeof *c.pairs);
  for (t = 0; t < trees; t++) {
    /* node 0, then len - 1 of nodes 1..63 chosen uniformly (selection sampling), in order */
    uint32_t needed = 7 + (uint32_t)(next_rand(&e->seed) % 33), node, k = 1;
    for (node = 1; node < TREE_NODES && needed; node++) {
      if (next_rand(&e->seed) % (TREE_NODES - node) >= needed) continue;
      needed--;
      if (node != k) {
        c.pairs[2 * c.n] = (int64_t)t * TREE_NODES + node;
        c.pairs[2 * c.n + 1] = (int64_t)t * TREE_NODES + k;
        c.n++;
      }
      k++;
    }
  }
  for (l = 0; l < c.layers && ok; l++) {
    ok = kc_alloc(e, &c.dev[l], nblocks, BS, HKV, HD, 64) && kc_fill_random(e, &c.dev[l]);
    c.devs[l] = c.dev[l].dev;
  }
  snprintf(label, sizeof label, "copy_slots %u layers x %zu pairs", c.layers, c.n);
  /* K and V token rows, each read once and written once. */
  ok = ok && bench_one(e, call_slots, &c, "copy_slots", label, 2.0 * 2 * (double)c.layers * (double)c.n * HKV * HD * 2,
                       CEIL_COPY, 0);
  for (l = 0; l < c.layers; l++) kc_free(&c.dev[l]);
  free(c.pairs);
  return ok;
}

int bench_tree(kenv* e) { return bench_tree_extend(e) && bench_copy_slots(e); }
