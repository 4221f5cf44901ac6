/* Concurrency stress: several threads hammer one manager (allocate, commit, append, fork, free, stats,
 * batch export, batched append + commit, drain copies and events, swap out/in, invariant checks). Each
 * thread uses its own range of sequence ids, so its own sequences follow a local model exactly; only the
 * shared pool makes some calls return OUT_OF_BLOCKS (or BAD_STATE for a swap-out racing a copy-on-write
 * drain). Run under ThreadSanitizer by `make check-tsan`. KVB_STRESS_ITERS overrides the per-thread
 * iteration count (KVB_TEST_QUICK=1: a short run, for valgrind). At the end the invariants hold and the
 * block accounting balances: every device and host block is free again. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvbt_common.h"

#define NUM_THREADS 4
#define SEQS_PER_THREAD 6
#define BS 8

static kvb_manager* g_m;
static long g_iters = 50000;

typedef struct {
  int64_t id;
  int live, swapped;
  size_t tokens, computed;
} tseq;

typedef struct {
  int index;
  unsigned rng;
  int errors;
  long ops, oob;
  tseq seqs[SEQS_PER_THREAD];
} worker;

static unsigned next_rand(unsigned* s) {
  *s = *s * 1103515245u + 12345u;
  return (*s >> 8) & 0xffffff;
}

#define WCHECK(w, cond, what, st)                                                                   \
  do {                                                                                              \
    if (!(cond)) {                                                                                  \
      fprintf(stderr, "thread %d: %s: %s (%s)\n", (w)->index, (what), kvb_status_string(st),        \
              kvb_last_error());                                                                    \
      (w)->errors++;                                                                                \
    }                                                                                               \
  } while (0)

static void* run_worker(void* arg) {
  worker* w = (worker*)arg;
  int64_t prompt[64], tok;
  int32_t pairs[2 * 64];
  int64_t ids[SEQS_PER_THREAD];
  long it;
  int i;
  for (i = 0; i < SEQS_PER_THREAD; ++i) {
    memset(&w->seqs[i], 0, sizeof w->seqs[i]);
    w->seqs[i].id = (int64_t)(w->index + 1) * 1000000 + i;
  }
  for (it = 0; it < g_iters; ++it) {
    unsigned r = next_rand(&w->rng);
    tseq* q = &w->seqs[r % SEQS_PER_THREAD];
    unsigned op = (r >> 4) % 16;
    kvb_status s;
    size_t n;
    ++w->ops;
    if (!q->live) {
      /* Prompts share prefixes across threads: a common stream, then a thread-specific tail. */
      size_t len = 1 + (r >> 9) % 40, k;
      for (k = 0; k < len; ++k) prompt[k] = k < 24 && (r & 0x10000) ? (int64_t)(k % 7) : (int64_t)(w->index * 100 + k);
      s = kvb_seq_allocate(g_m, q->id, prompt, len, &n);
      WCHECK(w, s == KVB_OK || s == KVB_ERR_OUT_OF_BLOCKS, "allocate", s);
      if (s == KVB_OK) {
        q->live = 1;
        q->swapped = 0;
        q->tokens = len;
        q->computed = n;
      } else {
        ++w->oob;
      }
      continue;
    }
    if (q->swapped) {
      s = kvb_seq_swap_in(g_m, q->id, pairs, 64, &n);
      WCHECK(w, s == KVB_OK || s == KVB_ERR_OUT_OF_BLOCKS, "swap_in", s);
      if (s == KVB_OK) q->swapped = 0;
      else if (op & 1) {
        s = kvb_seq_free(g_m, q->id);
        WCHECK(w, s == KVB_OK, "free swapped", s);
        q->live = 0;
      }
      continue;
    }
    switch (op) {
      case 0: case 1: case 2:
        s = kvb_seq_commit(g_m, q->id, q->tokens - q->computed);
        WCHECK(w, s == KVB_OK, "commit", s);
        q->computed = q->tokens;
        break;
      case 3: case 4: case 5:
        tok = (int64_t)(r & 0xff);
        s = kvb_seq_append(g_m, q->id, &tok, 1);
        WCHECK(w, s == KVB_OK || s == KVB_ERR_OUT_OF_BLOCKS, "append", s);
        if (s == KVB_OK) q->tokens++;
        else ++w->oob;
        break;
      case 6: { /* fork into a free slot of this thread */
        tseq* c = &w->seqs[(r >> 12) % SEQS_PER_THREAD];
        if (c->live || q->computed != q->tokens) break;
        s = kvb_seq_fork(g_m, q->id, c->id);
        WCHECK(w, s == KVB_OK, "fork", s);
        if (s == KVB_OK) {
          c->live = 1;
          c->swapped = 0;
          c->tokens = c->computed = q->tokens;
        }
        break;
      }
      case 7: case 8:
        s = kvb_seq_free(g_m, q->id);
        WCHECK(w, s == KVB_OK, "free", s);
        q->live = 0;
        break;
      case 9: {
        kvb_stats st;
        kvb_stats_init(&st);
        s = kvb_get_stats(g_m, &st);
        WCHECK(w, s == KVB_OK && st.free_blocks + st.used_blocks == st.num_blocks &&
                      st.cached_free_blocks <= st.free_blocks, "stats", s);
        s = kvb_num_free_blocks(g_m, &n);
        WCHECK(w, s == KVB_OK && n <= st.num_blocks, "num_free_blocks", s);
        break;
      }
      case 10: { /* batch export of this thread's sequences on device, or a batched decode step */
        int32_t tables[SEQS_PER_THREAD * 16], lens[SEQS_PER_THREAD], qs[SEQS_PER_THREAD + 1];
        int64_t slots[SEQS_PER_THREAD * 64], toks[SEQS_PER_THREAD];
        tseq* listed[SEQS_PER_THREAD];
        kvb_batch b;
        size_t k, cnt = 0;
        for (k = 0; k < SEQS_PER_THREAD; ++k)
          if (w->seqs[k].live && !w->seqs[k].swapped && w->seqs[k].tokens <= 16 * BS) {
            listed[cnt] = &w->seqs[k];
            toks[cnt] = (int64_t)((r >> 3) & 0xff);
            ids[cnt++] = w->seqs[k].id;
          }
        if (r & 0x20000) { /* append one token to each, all or none, then commit every uncomputed token */
          s = kvb_batch_append(g_m, ids, toks, cnt);
          WCHECK(w, s == KVB_OK || s == KVB_ERR_OUT_OF_BLOCKS, "batch_append", s);
          if (s == KVB_OK)
            for (k = 0; k < cnt; ++k) listed[k]->tokens++;
          else
            ++w->oob;
          s = kvb_batch_commit(g_m, ids, NULL, cnt);
          WCHECK(w, s == KVB_OK, "batch_commit", s);
          for (k = 0; k < cnt; ++k) listed[k]->computed = listed[k]->tokens;
          break;
        }
        b = kvbt_batch(16, tables, lens, qs, slots, SEQS_PER_THREAD * 64);
        s = kvb_batch_export(g_m, ids, cnt, &b);
        WCHECK(w, s == KVB_OK, "batch_export", s);
        break;
      }
      case 11:
        s = kvb_drain_copies(g_m, pairs, 64, &n);
        WCHECK(w, s == KVB_OK || s == KVB_ERR_BUFFER_TOO_SMALL, "drain_copies", s);
        break;
      case 12: {
        kvb_event ev[8];
        int64_t et[8 * BS];
        uint64_t dropped;
        s = kvb_drain_events(g_m, ev, 8, et, 8 * BS, &n, &dropped);
        WCHECK(w, s == KVB_OK, "drain_events", s);
        break;
      }
      case 13:
        if (q->computed != q->tokens) break;
        s = kvb_seq_swap_out(g_m, q->id, pairs, 64, &n);
        /* BAD_STATE: a copy-on-write pair into this sequence is pending (another thread may drain it). */
        WCHECK(w, s == KVB_OK || s == KVB_ERR_OUT_OF_BLOCKS || s == KVB_ERR_BAD_STATE, "swap_out", s);
        if (s == KVB_OK) q->swapped = 1;
        break;
      case 14:
        if ((r & 0x3f) == 0) {
          s = kvb_check_invariants(g_m);
          WCHECK(w, s == KVB_OK, "check_invariants", s);
        }
        break;
      default: {
        kvb_seq_info info;
        kvb_seq_info_init(&info);
        s = kvb_seq_get_info(g_m, q->id, &info);
        WCHECK(w, s == KVB_OK && info.num_tokens == q->tokens && info.num_computed == q->computed &&
                      info.location == KVB_SEQ_ON_DEVICE, "get_info", s);
        break;
      }
    }
    if (q->live && !q->swapped && q->tokens > 200) { /* keep sequences short */
      s = kvb_seq_free(g_m, q->id);
      WCHECK(w, s == KVB_OK, "free long", s);
      q->live = 0;
    }
  }
  for (i = 0; i < SEQS_PER_THREAD; ++i)
    if (w->seqs[i].live) {
      kvb_status s = kvb_seq_free(g_m, w->seqs[i].id);
      WCHECK(w, s == KVB_OK, "final free", s);
    }
  return NULL;
}

static void test_threads_hammer_one_manager(void) {
  kvb_config cfg;
  pthread_t th[NUM_THREADS];
  worker w[NUM_THREADS];
  kvb_stats st;
  int i;
  long ops = 0, oob = 0;
  size_t n;
  int32_t pairs[2 * 1024];
  kvb_config_init(&cfg);
  cfg.block_size = BS;
  cfg.num_blocks = 16;
  cfg.num_host_blocks = 16;
  cfg.flags = KVB_CONFIG_EVENTS | KVB_CONFIG_KEYED_INDEX;
  cfg.event_capacity = 128;
  CHECK_OK(kvb_manager_create(&cfg, &g_m));
  if (!g_m) return;
  for (i = 0; i < NUM_THREADS; ++i) {
    w[i].index = i;
    w[i].rng = 12345u + 977u * (unsigned)i;
    w[i].errors = 0;
    w[i].ops = w[i].oob = 0;
    CHECK(pthread_create(&th[i], NULL, run_worker, &w[i]) == 0);
  }
  for (i = 0; i < NUM_THREADS; ++i) {
    CHECK(pthread_join(th[i], NULL) == 0);
    CHECK(w[i].errors == 0);
    ops += w[i].ops;
    oob += w[i].oob;
  }
  CHECK_OK(kvb_check_invariants(g_m));
  CHECK_OK(kvb_drain_copies(g_m, pairs, 1024, &n));
  kvb_stats_init(&st);
  CHECK_OK(kvb_get_stats(g_m, &st));
  CHECK(st.num_seqs == 0);
  CHECK(st.used_blocks == 0);
  CHECK(st.free_blocks == cfg.num_blocks);
  CHECK(st.free_host_blocks == cfg.num_host_blocks);
  CHECK(st.swapped_in_blocks <= st.swapped_out_blocks);
  CHECK(st.hit_tokens <= st.query_tokens);
  CHECK_OK(kvb_num_free_blocks(g_m, &n));
  CHECK(n == cfg.num_blocks);
  CHECK_OK(kvb_reset_prefix_cache(g_m)); /* nothing in use any more */
  CHECK_OK(kvb_check_invariants(g_m));
  printf("%d threads, %ld operations (%ld out of blocks); hits %llu of %llu query tokens, %llu swapped out, "
         "%llu copies\n", NUM_THREADS, ops, oob, (unsigned long long)st.hit_tokens,
         (unsigned long long)st.query_tokens, (unsigned long long)st.swapped_out_blocks,
         (unsigned long long)st.cow_copies);
  kvb_manager_destroy(g_m);
  g_m = NULL;
}

int main(void) {
  const char* iters = getenv("KVB_STRESS_ITERS");
  const char* quick = getenv("KVB_TEST_QUICK");
  if (quick && *quick && strcmp(quick, "0") != 0) g_iters = 400;
  if (iters && *iters) g_iters = atol(iters);
  RUN_TEST(test_threads_hammer_one_manager);
  TEST_SUMMARY();
}
