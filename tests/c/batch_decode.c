/* kvb_batch_append / kvb_batch_commit: all-or-nothing refusals (out of blocks, unknown, duplicate and
 * swapped-out ids, over-commit), exact copy-on-write accounting for forked siblings, and equivalence with
 * the per-sequence calls over random operation sequences (a mirror manager runs the per-sequence calls;
 * when the batch is refused, the per-sequence loop must fail too). */
#include "kvbt_common.h"

#define NSEQ KVBT_MAX_SEQS
static const int64_t all_ids[NSEQ] = {0, 1, 2, 3, 4, 5, 6, 7};

/* Two sequences with full last blocks and one free block: the batch needs two, so nothing changes. */
static void test_out_of_blocks_changes_nothing(void) {
  kvb_manager* m = kvbt_make(4, 5);
  int64_t t[8], ids[3] = {1, 2, 3}, toks[3] = {100, 101, 102};
  kvbt_snap before, after;
  kvbt_iota(t, 8, 1);
  CHECK_OK(kvb_seq_allocate(m, 1, t, 8, NULL)); /* 2 blocks, full */
  CHECK_OK(kvb_seq_allocate(m, 2, t + 4, 4, NULL)); /* 1 block, full */
  CHECK_OK(kvb_seq_allocate(m, 3, t, 2, NULL)); /* 1 block, partial: needs nothing */
  CHECK_OK(kvb_batch_commit(m, ids, NULL, 3));
  CHECK(kvbt_free(m) == 1);
  kvbt_snap_take(m, all_ids, NSEQ, &before);
  CHECK_STATUS(kvb_batch_append(m, ids, toks, 3), KVB_ERR_OUT_OF_BLOCKS);
  CHECK(strstr(kvb_last_error(), "needs 2 free blocks, 1 is free") != NULL);
  kvbt_snap_take(m, all_ids, NSEQ, &after);
  CHECK(kvbt_snap_eq(&before, &after));
  /* without seq 1 it fits */
  CHECK_OK(kvb_batch_append(m, ids + 1, toks + 1, 2));
  CHECK(kvbt_info(m, 2).num_tokens == 5 && kvbt_info(m, 3).num_tokens == 3);
  CHECK(kvbt_free(m) == 0);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

/* Unknown, duplicate and swapped-out ids, NULL arrays and over-commits are refused before any change. */
static void test_refusals_change_nothing(void) {
  kvb_manager* m = kvbt_make_ex(4, 16, 8, 0.0f, 0, 0);
  int64_t t[8], toks[3] = {7, 8, 9};
  int64_t unknown[3] = {1, 42, 2}, dup[3] = {1, 2, 1}, swapped[2] = {1, 3};
  size_t counts[2] = {1, 5}, np = 0;
  int32_t pairs[16];
  int64_t two[2] = {1, 2};
  kvbt_snap before, after;
  kvbt_iota(t, 8, 1);
  CHECK_OK(kvb_seq_allocate(m, 1, t, 6, NULL));
  CHECK_OK(kvb_seq_allocate(m, 2, t, 3, NULL));
  CHECK_OK(kvb_seq_allocate(m, 3, t, 3, NULL));
  CHECK_OK(kvb_seq_commit(m, 3, 3));
  CHECK_OK(kvb_seq_swap_out(m, 3, pairs, 8, &np));
  kvbt_snap_take(m, all_ids, NSEQ, &before);
  CHECK_STATUS(kvb_batch_append(m, unknown, toks, 3), KVB_ERR_NO_SUCH_SEQUENCE);
  CHECK(strstr(kvb_last_error(), "42") != NULL);
  CHECK_STATUS(kvb_batch_append(m, dup, toks, 3), KVB_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvb_last_error(), "seq 1 appears twice (seq_ids[2])") != NULL);
  CHECK_STATUS(kvb_batch_append(m, swapped, toks, 2), KVB_ERR_BAD_STATE);
  CHECK_STATUS(kvb_batch_append(m, two, NULL, 2), KVB_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvb_batch_append(m, NULL, toks, 2), KVB_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvb_batch_append(NULL, two, toks, 2), KVB_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvb_batch_commit(m, unknown, NULL, 3), KVB_ERR_NO_SUCH_SEQUENCE);
  CHECK_STATUS(kvb_batch_commit(m, dup, NULL, 3), KVB_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvb_batch_commit(m, two, counts, 2), KVB_ERR_INVALID_ARGUMENT); /* seq 2 has 3 uncomputed */
  CHECK(strstr(kvb_last_error(), "seq 2 (num_tokens[1]): commit of 5 tokens exceeds 3") != NULL);
  kvbt_snap_take(m, all_ids, NSEQ, &after);
  CHECK(kvbt_snap_eq(&before, &after));
  /* empty batches are no-ops */
  CHECK_OK(kvb_batch_append(m, NULL, NULL, 0));
  CHECK_OK(kvb_batch_commit(m, NULL, NULL, 0));
  counts[1] = 3;
  CHECK_OK(kvb_batch_commit(m, two, counts, 2));
  CHECK(kvbt_info(m, 1).num_computed == 1 && kvbt_info(m, 2).num_computed == 3);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

/* Three sequences share a partial block: appending to all three copies it twice (the last writes in
 * place), so two free blocks are exactly enough and one is not. */
static void test_cow_siblings_exact(void) {
  kvb_manager* m = kvbt_make(4, 4);
  int64_t t[8], ids[3] = {1, 2, 3}, toks[3] = {50, 51, 52}, filler[4] = {9, 9, 9, 9};
  int32_t pairs[8];
  size_t np = 0;
  kvbt_snap before, after;
  kvbt_iota(t, 8, 1);
  CHECK_OK(kvb_seq_allocate(m, 1, t, 6, NULL)); /* blocks 0, 1 (2 tokens) */
  CHECK_OK(kvb_seq_commit(m, 1, 6));
  CHECK_OK(kvb_seq_fork(m, 1, 2));
  CHECK_OK(kvb_seq_fork(m, 1, 3));
  CHECK_OK(kvb_seq_allocate(m, 4, filler, 1, NULL)); /* leaves 1 free block */
  kvbt_snap_take(m, all_ids, NSEQ, &before);
  CHECK_STATUS(kvb_batch_append(m, ids, toks, 3), KVB_ERR_OUT_OF_BLOCKS);
  kvbt_snap_take(m, all_ids, NSEQ, &after);
  CHECK(kvbt_snap_eq(&before, &after));
  /* two of the three fit in one free block? no: both copy while they share it with a third holder */
  CHECK_STATUS(kvb_batch_append(m, ids, toks, 2), KVB_ERR_OUT_OF_BLOCKS);
  CHECK_OK(kvb_seq_free(m, 4));
  CHECK_OK(kvb_batch_append(m, ids, toks, 3));
  CHECK(kvbt_free(m) == 0);
  CHECK_OK(kvb_drain_copies(m, pairs, 4, &np));
  CHECK(np == 2 && pairs[0] == 1 && pairs[2] == 1);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

/* ---- random equivalence with the per-sequence calls -------------------------------------------- */

enum { OP_ALLOC, OP_COMMIT, OP_FORK, OP_FREE, OP_APPEND };
typedef struct op {
  int type;
  int64_t id, other;
  size_t n;
  int64_t tokens[24];
} op;

#define MAX_LOG 4096
static op oplog[MAX_LOG];
static int log_len;

static uint64_t rng_state;
static uint32_t rnd(uint32_t n) {
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (uint32_t)(rng_state >> 33) % n;
}

static kvb_status apply(kvb_manager* m, const op* o) {
  switch (o->type) {
    case OP_ALLOC: return kvb_seq_allocate(m, o->id, o->tokens, o->n, NULL);
    case OP_COMMIT: return kvb_seq_commit(m, o->id, o->n);
    case OP_FORK: return kvb_seq_fork(m, o->id, o->other);
    case OP_FREE: return kvb_seq_free(m, o->id);
    default: return kvb_seq_append(m, o->id, o->tokens, 1);
  }
}

/* Logged per-sequence operations applied to the mirror (which must accept them). */
static void mirror_do(kvb_manager* mirror, const op* o) {
  CHECK_OK(apply(mirror, o));
  if (log_len < MAX_LOG) oplog[log_len++] = *o;
}

static kvb_manager* make_pool(uint32_t blocks) { return kvbt_make(4, blocks); }

static kvb_manager* replay(uint32_t blocks) {
  kvb_manager* m = make_pool(blocks);
  int i;
  int32_t pairs[2 * 64];
  size_t np;
  for (i = 0; i < log_len; ++i) {
    CHECK_OK(apply(m, &oplog[i]));
    CHECK_OK(kvb_drain_copies(m, pairs, 64, &np)); /* the random loop drains after every operation */
  }
  return m;
}

static int same_state(kvb_manager* a, kvb_manager* b) {
  kvbt_snap sa, sb;
  int32_t pa[128], pb[128];
  size_t na = 0, nb = 0;
  int ok;
  kvbt_snap_take(a, all_ids, NSEQ, &sa);
  kvbt_snap_take(b, all_ids, NSEQ, &sb);
  ok = kvbt_snap_eq(&sa, &sb);
  CHECK_OK(kvb_drain_copies(a, pa, 64, &na));
  CHECK_OK(kvb_drain_copies(b, pb, 64, &nb));
  if (na != nb || memcmp(pa, pb, 2 * na * sizeof(int32_t)) != 0) {
    fprintf(stderr, "  copy-on-write pairs differ (%zu vs %zu)\n", na, nb);
    ok = 0;
  }
  return ok;
}

static void random_run(uint64_t seed, uint32_t blocks, int steps) {
  kvb_manager* m = make_pool(blocks);
  kvb_manager* mirror = make_pool(blocks);
  int live[NSEQ] = {0};
  int step, i;
  rng_state = seed;
  log_len = 0;
  for (step = 0; step < steps && log_len < MAX_LOG - 64; ++step) {
    uint32_t r = rnd(10);
    int64_t id = (int64_t)rnd(NSEQ);
    op o;
    memset(&o, 0, sizeof o);
    o.id = id;
    if (r < 2 && !live[id]) { /* allocate a prompt from a small alphabet: prefix hits happen */
      o.type = OP_ALLOC;
      o.n = 1 + rnd(20);
      for (i = 0; i < (int)o.n; ++i) o.tokens[i] = i < 8 ? (int64_t)i : (int64_t)rnd(3);
      if (apply(m, &o) == KVB_OK) { mirror_do(mirror, &o); live[id] = 1; }
    } else if (r < 3 && live[id]) {
      int64_t child = (int64_t)rnd(NSEQ);
      kvb_seq_info info = kvbt_info(m, id);
      if (!live[child] && info.num_computed == info.num_tokens) {
        o.type = OP_FORK;
        o.other = child;
        CHECK_OK(apply(m, &o));
        mirror_do(mirror, &o);
        live[child] = 1;
      }
    } else if (r < 4 && live[id]) {
      o.type = OP_FREE;
      CHECK_OK(apply(m, &o));
      mirror_do(mirror, &o);
      live[id] = 0;
    } else { /* a batch over a random subset, in random order; commit or append */
      int64_t ids[NSEQ], toks[NSEQ];
      size_t counts[NSEQ], n = 0;
      int perm[NSEQ], j, use_counts = rnd(2), append = rnd(2);
      kvb_status s;
      for (i = 0; i < NSEQ; ++i) perm[i] = i;
      for (i = NSEQ - 1; i > 0; --i) { j = (int)rnd((uint32_t)i + 1); int t = perm[i]; perm[i] = perm[j]; perm[j] = t; }
      for (i = 0; i < NSEQ; ++i)
        if (live[perm[i]] && rnd(3) != 0) {
          kvb_seq_info info = kvbt_info(m, perm[i]);
          ids[n] = perm[i];
          toks[n] = (int64_t)rnd(4);
          counts[n] = (size_t)rnd((uint32_t)(info.num_tokens - info.num_computed) + 1);
          ++n;
        }
      if (append) {
        s = kvb_batch_append(m, ids, toks, n);
        CHECK(s == KVB_OK || s == KVB_ERR_OUT_OF_BLOCKS);
        if (s == KVB_OK) {
          for (i = 0; i < (int)n; ++i) {
            o.type = OP_APPEND;
            o.id = ids[i];
            o.tokens[0] = toks[i];
            mirror_do(mirror, &o);
          }
        } else {
          kvb_status first_fail = KVB_OK;
          CHECK(same_state(m, mirror)); /* the refused batch changed nothing */
          for (i = 0; i < (int)n && first_fail == KVB_OK; ++i) first_fail = kvb_seq_append(mirror, ids[i], toks + i, 1);
          CHECK(first_fail == KVB_ERR_OUT_OF_BLOCKS); /* the per-sequence loop runs out as well */
          kvb_manager_destroy(mirror);
          mirror = replay(blocks);
        }
      } else {
        CHECK_OK(kvb_batch_commit(m, ids, use_counts ? counts : NULL, n));
        for (i = 0; i < (int)n; ++i) {
          kvb_seq_info info = kvbt_info(mirror, ids[i]);
          o.type = OP_COMMIT;
          o.id = ids[i];
          o.n = use_counts ? counts[i] : (size_t)(info.num_tokens - info.num_computed);
          mirror_do(mirror, &o);
        }
      }
    }
    if (!same_state(m, mirror)) {
      fprintf(stderr, "seed %llu: batch and per-sequence managers differ after step %d\n", (unsigned long long)seed, step);
      CHECK(0);
      break;
    }
    CHECK_INV(m);
  }
  kvb_manager_destroy(m);
  kvb_manager_destroy(mirror);
}

static void test_random_equivalence(void) {
  const char* quick = getenv("KVB_TEST_QUICK");
  int runs = quick && quick[0] == '1' ? 4 : 40, r;
  for (r = 0; r < runs; ++r) random_run(1000 + (uint64_t)r, r % 2 ? 12 : 40, 300);
}

int main(void) {
  RUN_TEST(test_out_of_blocks_changes_nothing);
  RUN_TEST(test_refusals_change_nothing);
  RUN_TEST(test_cow_siblings_exact);
  RUN_TEST(test_random_equivalence);
  TEST_SUMMARY();
}
