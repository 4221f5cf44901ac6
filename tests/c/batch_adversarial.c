/* kvb_batch_append / kvb_batch_commit against the per-sequence calls, over random operation sequences
 * that include what batch_decode.c's random run leaves out: fork_at of partial blocks, rollback,
 * sliding windows with sinks, swap out / in, a watermark, events, the host cache (every other run), and
 * copy-on-write pairs and host transfers left pending across many steps (drained only now and then). A
 * mirror manager runs the per-sequence calls; after every step the two must agree on block tables,
 * sequence info, stats, hashes, pending pairs and events. A refused batch must change nothing (events included), and the per-sequence loop must then
 * fail as well. */
#include "kvbt_common.h"

#define NSEQ KVBT_MAX_SEQS
#define MAX_TOKENS 160 /* 40 blocks of 4: block tables stay within KVBT_MAX_BLOCKS */
static const int64_t all_ids[NSEQ] = {0, 1, 2, 3, 4, 5, 6, 7};

enum { A_ALLOC, A_COMMIT, A_FORK_AT, A_FREE, A_APPEND, A_ROLLBACK, A_WINDOW, A_SWAP_OUT, A_SWAP_IN, A_DRAIN };
typedef struct aop {
  int type;
  int64_t id, other;
  size_t n;
  uint32_t window, sink;
  int64_t tokens[24];
  kvb_status status; /* what the per-sequence call returned the first time (replays must agree) */
} aop;

#define MAX_LOG 8192
static aop alog[MAX_LOG];
static int alog_len;

static uint64_t rs;
static uint32_t rnd(uint32_t n) {
  rs = rs * 6364136223846793005ULL + 1442695040888963407ULL;
  return (uint32_t)(rs >> 33) % n;
}

static uint32_t pool_flags = KVB_CONFIG_EVENTS; /* odd runs add the host cache (offloads on eviction, host hits) */
static kvb_manager* make_pool(uint32_t blocks) { return kvbt_make_ex(4, blocks, 24, 0.1f, pool_flags, 0); }

static kvb_status aapply(kvb_manager* m, const aop* o) {
  int32_t pairs[2 * 64];
  size_t np = 0;
  kvb_seq_options opts;
  switch (o->type) {
    case A_ALLOC:
      kvb_seq_options_init(&opts);
      opts.window_tokens = o->window;
      opts.sink_tokens = o->sink;
      return kvb_seq_allocate_ex(m, o->id, o->tokens, o->n, &opts, NULL);
    case A_COMMIT: return kvb_seq_commit(m, o->id, o->n);
    case A_FORK_AT: return kvb_seq_fork_at(m, o->id, o->other, o->n);
    case A_FREE: return kvb_seq_free(m, o->id);
    case A_ROLLBACK: return kvb_seq_rollback(m, o->id, o->n);
    case A_WINDOW: return kvb_seq_set_window(m, o->id, o->window, o->sink);
    case A_SWAP_OUT: return kvb_seq_swap_out(m, o->id, pairs, 64, &np);
    case A_SWAP_IN: return kvb_seq_swap_in(m, o->id, pairs, 64, &np);
    case A_DRAIN: { /* copy-on-write pairs, then host transfers (the replay of drain_both) */
      int32_t off[128], load[128];
      size_t no = 0, nl = 0;
      kvb_status s = kvb_drain_copies(m, pairs, 64, &np);
      return s != KVB_OK ? s : kvb_drain_host_transfers(m, off, 64, &no, load, 64, &nl);
    }
    default: return kvb_seq_append(m, o->id, o->tokens, 1);
  }
}

static void alog_push(const aop* o) {
  if (alog_len < MAX_LOG) alog[alog_len++] = *o;
}

/* Applies o to both managers: they must answer alike. */
static void both(kvb_manager* m, kvb_manager* mirror, aop* o) {
  kvb_status a = aapply(m, o), b = aapply(mirror, o);
  if (a != b) fprintf(stderr, "  op %d on seq %lld: %s vs %s\n", o->type, (long long)o->id, kvb_status_string(a),
                      kvb_status_string(b));
  CHECK(a == b);
  o->status = a;
  alog_push(o);
}

static kvb_manager* replay(uint32_t blocks) {
  kvb_manager* m = make_pool(blocks);
  kvb_event ev[64];
  int64_t tok[512];
  size_t ne = 0;
  int i;
  for (i = 0; i < alog_len; ++i) CHECK_STATUS(aapply(m, &alog[i]), alog[i].status);
  do CHECK_OK(kvb_drain_events(m, ev, 64, tok, 512, &ne, NULL)); while (ne > 0);
  return m;
}

/* Drains and compares events (the stream is part of the observable state). */
static int same_events(kvb_manager* a, kvb_manager* b) {
  kvb_event ea[64], eb[64];
  int64_t ta[512], tb[512];
  size_t na = 0, nb = 0, i;
  uint64_t da = 0, db = 0;
  int ok = 1;
  do {
    CHECK_OK(kvb_drain_events(a, ea, 64, ta, 512, &na, &da));
    CHECK_OK(kvb_drain_events(b, eb, 64, tb, 512, &nb, &db));
    if (na != nb || da != db) { fprintf(stderr, "  event counts differ (%zu vs %zu)\n", na, nb); return 0; }
    for (i = 0; i < na; ++i)
      if (ea[i].type != eb[i].type || ea[i].block_hash != eb[i].block_hash || ea[i].block_id != eb[i].block_id ||
          ea[i].parent_hash != eb[i].parent_hash) {
        fprintf(stderr, "  event %zu differs\n", i);
        ok = 0;
      }
  } while (na > 0 && ok);
  return ok;
}

static int same_state(kvb_manager* a, kvb_manager* b) {
  kvbt_snap sa, sb;
  kvbt_snap_take(a, all_ids, NSEQ, &sa);
  kvbt_snap_take(b, all_ids, NSEQ, &sb);
  return kvbt_snap_eq(&sa, &sb) && same_events(a, b);
}

/* Pending copy-on-write pairs are compared by draining both (a logged operation, so replays agree). */
static void drain_both(kvb_manager* m, kvb_manager* mirror) {
  int32_t pa[128], pb[128];
  size_t na = 0, nb = 0;
  aop o;
  CHECK_OK(kvb_drain_copies(m, pa, 64, &na));
  CHECK_OK(kvb_drain_copies(mirror, pb, 64, &nb));
  if (na != nb || memcmp(pa, pb, 2 * na * sizeof(int32_t)) != 0) {
    fprintf(stderr, "  copy-on-write pairs differ (%zu vs %zu)\n", na, nb);
    CHECK(0);
  }
  { /* host-cache offloads and loads (none without the host cache) */
    int32_t oa[128], ob[128], la[128], lb[128];
    size_t noa = 0, nob = 0, nla = 0, nlb = 0;
    CHECK_OK(kvb_drain_host_transfers(m, oa, 64, &noa, la, 64, &nla));
    CHECK_OK(kvb_drain_host_transfers(mirror, ob, 64, &nob, lb, 64, &nlb));
    if (noa != nob || nla != nlb || memcmp(oa, ob, 2 * noa * sizeof(int32_t)) != 0 ||
        memcmp(la, lb, 2 * nla * sizeof(int32_t)) != 0) {
      fprintf(stderr, "  host transfers differ\n");
      CHECK(0);
    }
  }
  memset(&o, 0, sizeof o);
  o.type = A_DRAIN;
  alog_push(&o);
}

static void batch_step(kvb_manager* m, kvb_manager** mirror, uint32_t blocks, int* live) {
  int64_t ids[NSEQ], toks[NSEQ];
  size_t counts[NSEQ], n = 0;
  int i, use_counts = (int)rnd(2), append = (int)rnd(2);
  kvb_status s;
  aop o;
  memset(&o, 0, sizeof o);
  for (i = 0; i < NSEQ; ++i) {
    int id = (int)((i + rnd(NSEQ)) % NSEQ);
    kvb_seq_info info = kvbt_info(m, id);
    int listed = 0, j;
    for (j = 0; j < (int)n; ++j) listed |= ids[j] == id;
    if (!live[id] || listed || info.location != KVB_SEQ_ON_DEVICE || rnd(4) == 0) continue;
    if (append && info.num_tokens >= MAX_TOKENS) continue;
    ids[n] = id;
    toks[n] = (int64_t)rnd(3);
    counts[n] = (size_t)rnd((uint32_t)(info.num_tokens - info.num_computed) + 1);
    ++n;
  }
  if (append) {
    kvbt_snap before, after;
    kvbt_snap_take(m, all_ids, NSEQ, &before);
    s = kvb_batch_append(m, ids, toks, n);
    CHECK(s == KVB_OK || s == KVB_ERR_OUT_OF_BLOCKS);
    if (s == KVB_OK) {
      for (i = 0; i < (int)n; ++i) {
        o.type = A_APPEND;
        o.id = ids[i];
        o.tokens[0] = toks[i];
        o.status = aapply(*mirror, &o);
        CHECK_OK(o.status);
        alog_push(&o);
      }
    } else {
      kvb_status first_fail = KVB_OK;
      kvbt_snap_take(m, all_ids, NSEQ, &after);
      CHECK(kvbt_snap_eq(&before, &after));
      CHECK(same_state(m, *mirror)); /* nothing changed, no event either */
      for (i = 0; i < (int)n && first_fail == KVB_OK; ++i) first_fail = kvb_seq_append(*mirror, ids[i], toks + i, 1);
      CHECK(first_fail == KVB_ERR_OUT_OF_BLOCKS);
      kvb_manager_destroy(*mirror);
      *mirror = replay(blocks);
    }
  } else {
    CHECK_OK(kvb_batch_commit(m, ids, use_counts ? counts : NULL, n));
    for (i = 0; i < (int)n; ++i) {
      kvb_seq_info info = kvbt_info(*mirror, ids[i]);
      o.type = A_COMMIT;
      o.id = ids[i];
      o.n = use_counts ? counts[i] : (size_t)(info.num_tokens - info.num_computed);
      o.status = aapply(*mirror, &o);
      CHECK_OK(o.status);
      alog_push(&o);
    }
  }
}

static void random_run(uint64_t seed, uint32_t blocks, int steps) {
  kvb_manager* m = make_pool(blocks);
  kvb_manager* mirror = make_pool(blocks);
  int live[NSEQ] = {0};
  int step, i;
  rs = seed;
  alog_len = 0;
  for (step = 0; step < steps && alog_len < MAX_LOG - 64; ++step) {
    uint32_t r = rnd(20);
    int64_t id = (int64_t)rnd(NSEQ);
    kvb_seq_info info = kvbt_info(m, id);
    aop o;
    memset(&o, 0, sizeof o);
    o.id = id;
    if (r < 2 && !live[id]) {
      o.type = A_ALLOC;
      o.n = 1 + rnd(20);
      for (i = 0; i < (int)o.n; ++i) o.tokens[i] = i < 6 ? (int64_t)i : (int64_t)rnd(3);
      if (rnd(3) == 0) {
        o.window = 2 + rnd(12);
        o.sink = rnd(3) == 0 ? rnd(6) : 0;
      }
      both(m, mirror, &o);
      live[id] = o.status == KVB_OK;
    } else if (r < 4 && live[id]) {
      int64_t child = (int64_t)rnd(NSEQ);
      if (!live[child] && info.num_computed > 0) {
        o.type = A_FORK_AT;
        o.other = child;
        o.n = rnd(2) ? (size_t)info.num_computed : 1 + rnd((uint32_t)info.num_computed);
        both(m, mirror, &o);
        live[child] = o.status == KVB_OK;
      }
    } else if (r < 5 && live[id]) {
      o.type = A_FREE;
      both(m, mirror, &o);
      live[id] = 0;
    } else if (r < 7 && live[id] && info.num_tokens > 1) {
      o.type = A_ROLLBACK;
      o.n = 1 + rnd((uint32_t)(info.num_tokens - 1 < 6 ? info.num_tokens - 1 : 6));
      both(m, mirror, &o);
    } else if (r < 8 && live[id]) {
      o.type = A_WINDOW;
      o.window = rnd(3) ? 2 + rnd(12) : 0;
      o.sink = o.window && rnd(2) ? rnd(6) : 0;
      both(m, mirror, &o);
    } else if (r < 9 && live[id]) {
      o.type = info.location == KVB_SEQ_ON_DEVICE ? A_SWAP_OUT : A_SWAP_IN;
      both(m, mirror, &o);
    } else if (r < 10) {
      drain_both(m, mirror);
    } else if (r < 12 && live[id] && info.location == KVB_SEQ_ON_DEVICE) {
      o.type = A_COMMIT;
      o.n = rnd((uint32_t)(info.num_tokens - info.num_computed) + 1);
      both(m, mirror, &o);
    } else {
      batch_step(m, &mirror, blocks, live);
    }
    if (!same_state(m, mirror)) {
      fprintf(stderr, "seed %llu: batch and per-sequence managers differ after step %d\n", (unsigned long long)seed, step);
      CHECK(0);
      break;
    }
    CHECK_INV(m);
    if (kvbt_case_failures) {
      fprintf(stderr, "seed %llu: failing at step %d\n", (unsigned long long)seed, step);
      break;
    }
  }
  kvb_manager_destroy(m);
  kvb_manager_destroy(mirror);
}

static void test_random_equivalence_adversarial(void) {
  const char* quick = getenv("KVB_TEST_QUICK");
  int runs = quick && quick[0] == '1' ? 3 : 20, r;
  for (r = 0; r < runs && !kvbt_case_failures; ++r) {
    pool_flags = KVB_CONFIG_EVENTS | (r % 2 ? KVB_CONFIG_HOST_CACHE : 0);
    random_run(7000 + (uint64_t)r, r % 3 == 0 ? 10 : (r % 3 == 1 ? 20 : 48), 400);
  }
}

int main(void) {
  RUN_TEST(test_random_equivalence_adversarial);
  TEST_SUMMARY();
}
