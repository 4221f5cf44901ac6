/* Every error path of the manager API: the status, a kvb_last_error() message that names the offending
 * value, and that the manager is unchanged afterwards (invariants, free count, stats, block tables,
 * sequence infos and block hashes; see EXPECT_FAIL in kvbt_common.h). */
#include "kvbt_common.h"

static const int64_t kIds[] = {1, 2, 3, 99};
#define NIDS 4

/* bs 4, 16 device blocks, 8 host blocks. seq 1: 10 tokens, all committed (blocks 0,1,2); seq 2: 6 tokens,
   4 committed; seq 3: 5 tokens committed, swapped out. */
static kvb_manager* fixture(void) {
  kvb_manager* m = kvbt_make_ex(4, 16, 8, 0.0f, KVB_CONFIG_EVENTS, 0);
  int64_t t[16];
  int32_t pairs[8];
  size_t np = 0;
  kvbt_iota(t, 16, 100);
  CHECK_OK(kvb_seq_allocate(m, 1, t, 10, NULL));
  CHECK_OK(kvb_seq_commit(m, 1, 10));
  kvbt_iota(t, 16, 500);
  CHECK_OK(kvb_seq_allocate(m, 2, t, 6, NULL));
  CHECK_OK(kvb_seq_commit(m, 2, 4));
  kvbt_iota(t, 16, 900);
  CHECK_OK(kvb_seq_allocate(m, 3, t, 5, NULL));
  CHECK_OK(kvb_seq_commit(m, 3, 5));
  CHECK_OK(kvb_seq_swap_out(m, 3, pairs, 4, &np));
  CHECK(np == 2);
  CHECK_INV(m);
  return m;
}

/* ---- configuration ------------------------------------------------------------------------------ */

static void expect_bad_config(const kvb_config* cfg, const char* needle, int line) {
  kvb_manager* m = (kvb_manager*)&m; /* poison: a failed create must set *out = NULL */
  kvbt_prime_last_error();
  if (kvb_manager_create(cfg, &m) != KVB_ERR_INVALID_ARGUMENT) {
    fprintf(stderr, "line %d: bad config accepted\n", line);
    kvbt_case_failures++;
    if (m && m != (kvb_manager*)&m) kvb_manager_destroy(m);
    return;
  }
  if (m != NULL) {
    fprintf(stderr, "line %d: failed create left *out non-NULL\n", line);
    kvbt_case_failures++;
  }
  if (!strstr(kvb_last_error(), needle)) {
    fprintf(stderr, "line %d: kvb_last_error() \"%s\" lacks \"%s\"\n", line, kvb_last_error(), needle);
    kvbt_case_failures++;
  }
}

static void test_bad_config(void) {
  kvb_config cfg;
  kvb_manager* m = NULL;
  int64_t nc[2] = {7, 8};
#define BASE() (kvb_config_init(&cfg), cfg.num_blocks = 8)
  BASE(); cfg.block_size = 0; expect_bad_config(&cfg, "block_size 0", __LINE__);
  BASE(); cfg.block_size = 70000; expect_bad_config(&cfg, "block_size 70000", __LINE__);
  BASE(); cfg.num_blocks = 0; expect_bad_config(&cfg, "num_blocks 0", __LINE__);
  BASE(); cfg.num_blocks = 0x7fffffffu; expect_bad_config(&cfg, "num_blocks 2147483647", __LINE__);
  BASE(); cfg.num_host_blocks = 0x7fffffffu; expect_bad_config(&cfg, "num_host_blocks 2147483647", __LINE__);
  BASE(); cfg.watermark = 1.0f; expect_bad_config(&cfg, "watermark 1", __LINE__);
  BASE(); cfg.watermark = 1.5f; expect_bad_config(&cfg, "watermark 1.5", __LINE__);
  BASE(); cfg.watermark = -0.25f; expect_bad_config(&cfg, "watermark -0.25", __LINE__);
  BASE(); cfg.watermark = (float)NAN; expect_bad_config(&cfg, "nan", __LINE__);
  BASE(); cfg.flags = 8; expect_bad_config(&cfg, "0x8", __LINE__);
  BASE(); cfg.flags = KVB_CONFIG_HOST_CACHE; expect_bad_config(&cfg, "num_host_blocks > 0", __LINE__);
  BASE(); cfg.flags = KVB_CONFIG_EVENTS | 0x80; expect_bad_config(&cfg, "0x82", __LINE__);
  BASE(); cfg.non_cacheable_tokens = NULL; cfg.num_non_cacheable_tokens = 3; expect_bad_config(&cfg, "3", __LINE__);
  CHECK_MSG("non_cacheable_tokens");
  BASE(); cfg.flags = KVB_CONFIG_EVENTS; cfg.event_capacity = 0; expect_bad_config(&cfg, "event_capacity", __LINE__);
  BASE(); cfg.struct_size = 8; expect_bad_config(&cfg, "struct_size 8", __LINE__);
  BASE(); cfg.struct_size = 0; expect_bad_config(&cfg, "struct_size 0", __LINE__);
  expect_bad_config(NULL, "kvb_config is NULL", __LINE__);
  /* out NULL */
  BASE();
  kvbt_prime_last_error();
  CHECK_STATUS(kvb_manager_create(&cfg, NULL), KVB_ERR_INVALID_ARGUMENT);
  CHECK_MSG("out is NULL");
  /* a valid list is accepted; a count of 0 with a NULL list too */
  BASE(); cfg.non_cacheable_tokens = nc; cfg.num_non_cacheable_tokens = 2;
  CHECK_OK(kvb_manager_create(&cfg, &m));
  kvb_manager_destroy(m);
  m = NULL;
  BASE(); cfg.non_cacheable_tokens = NULL; cfg.num_non_cacheable_tokens = 0;
  CHECK_OK(kvb_manager_create(&cfg, &m));
  kvb_manager_destroy(m);
  m = NULL;
  /* watermark just below 1 is valid */
  BASE(); cfg.watermark = 0.99f;
  CHECK_OK(kvb_manager_create(&cfg, &m));
  kvb_manager_destroy(m);
#undef BASE
}

/* A caller built against the core-contract header passes a smaller struct_size: the later fields
   (flags, event_capacity, index_seed) are not read, whatever garbage they hold. */
static void test_old_config_struct_size(void) {
  kvb_config cfg;
  kvb_manager* m = NULL;
  uint64_t h = 0;
  size_t n = 0;
  kvb_config_init(&cfg);
  cfg.struct_size = (uint32_t)(offsetof(kvb_config, num_non_cacheable_tokens) + sizeof(size_t));
  cfg.num_blocks = 4;
  cfg.flags = 0xffffffffu; /* unknown flags, but beyond the caller's struct */
  cfg.event_capacity = 0;
  CHECK_OK(kvb_manager_create(&cfg, &m));
  CHECK(m != NULL);
  /* events are off: draining says so */
  {
    kvb_event ev[1];
    int64_t tk[16];
    EXPECT_FAIL(m, NULL, 0, kvb_drain_events(m, ev, 1, tk, 16, &n, NULL), KVB_ERR_BAD_STATE, "KVB_CONFIG_EVENTS");
  }
  CHECK_STATUS(kvb_block_hash(m, 0, &h), KVB_ERR_BAD_STATE);
  kvb_manager_destroy(m);
  kvb_manager_destroy(NULL); /* no-op */
}

/* ---- NULL manager: every manager entry point ---------------------------------------------------- */

static void test_null_manager(void) {
  int64_t t[4] = {1, 2, 3, 4};
  size_t n = 0;
  uint64_t h = 0;
  int32_t buf[8];
  kvb_availability a;
  kvb_seq_info info;
  kvb_stats st;
  kvb_batch batch;
  kvb_event ev[2];
  int64_t tk[8];
  uint64_t dropped = 0;
  kvb_seq_info_init(&info);
  kvb_stats_init(&st);
  kvb_batch_init(&batch);
#define NULLM(expr) EXPECT_FAIL(NULL, NULL, 0, expr, KVB_ERR_INVALID_ARGUMENT, "manager is NULL")
  NULLM(kvb_block_hash(NULL, 0, &h));
  NULLM(kvb_seq_can_allocate(NULL, t, 4, &n));
  NULLM(kvb_seq_allocate(NULL, 1, t, 4, &n));
  NULLM(kvb_seq_commit(NULL, 1, 1));
  NULLM(kvb_seq_can_append(NULL, 1, 1));
  NULLM(kvb_seq_append(NULL, 1, t, 1));
  NULLM(kvb_seq_free(NULL, 1));
  NULLM(kvb_seq_block_table(NULL, 1, buf, 8, &n));
  NULLM(kvb_num_free_blocks(NULL, &n));
  NULLM(kvb_check_invariants(NULL));
  NULLM(kvb_seq_can_allocate_ex(NULL, t, 4, NULL, &n));
  NULLM(kvb_seq_allocate_ex(NULL, 1, t, 4, NULL, &n));
  NULLM(kvb_seq_set_extra_key(NULL, 1, 0, 5));
  NULLM(kvb_seq_get_info(NULL, 1, &info));
  NULLM(kvb_seq_fork(NULL, 1, 2));
  NULLM(kvb_seq_fork_at(NULL, 1, 2, 1));
  NULLM(kvb_drain_copies(NULL, buf, 4, &n));
  NULLM(kvb_seq_rollback(NULL, 1, 1));
  NULLM(kvb_seq_set_window(NULL, 1, 8, 0));
  NULLM(kvb_seq_can_swap_out(NULL, 1, &a));
  NULLM(kvb_seq_swap_out(NULL, 1, buf, 4, &n));
  NULLM(kvb_seq_can_swap_in(NULL, 1, &a));
  NULLM(kvb_seq_swap_in(NULL, 1, buf, 4, &n));
  NULLM(kvb_batch_export(NULL, t, 1, &batch));
  NULLM(kvb_get_stats(NULL, &st));
  NULLM(kvb_drain_events(NULL, ev, 2, tk, 8, &n, &dropped));
  NULLM(kvb_reset_prefix_cache(NULL));
#undef NULLM
}

/* ---- NULL out-params and NULL token arrays ----------------------------------------------------- */

static void test_null_pointers(void) {
  kvb_manager* m = fixture();
  int64_t t[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  int32_t buf[16];
  size_t n = 0;
  kvb_batch batch;
  kvb_event ev[2];
  int64_t tk[8];
  kvb_seq_options opts;

  EXPECT_FAIL(m, kIds, NIDS, kvb_block_hash(m, 0, NULL), KVB_ERR_INVALID_ARGUMENT, "hash is NULL");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_can_allocate(m, t, 4, NULL), KVB_ERR_INVALID_ARGUMENT, "num_cached_tokens is NULL");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_can_allocate(m, NULL, 5, &n), KVB_ERR_INVALID_ARGUMENT, "n is 5");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_can_allocate_ex(m, NULL, 6, NULL, &n), KVB_ERR_INVALID_ARGUMENT, "n is 6");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_allocate(m, 7, NULL, 5, &n), KVB_ERR_INVALID_ARGUMENT, "n is 5");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_allocate_ex(m, 7, NULL, 9, NULL, &n), KVB_ERR_INVALID_ARGUMENT, "n is 9");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_append(m, 1, NULL, 3), KVB_ERR_INVALID_ARGUMENT, "n is 3");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_block_table(m, 1, buf, 16, NULL), KVB_ERR_INVALID_ARGUMENT, "len is NULL");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_block_table(m, 1, NULL, 16, &n), KVB_ERR_INVALID_ARGUMENT, "out is NULL");
  EXPECT_FAIL(m, kIds, NIDS, kvb_num_free_blocks(m, NULL), KVB_ERR_INVALID_ARGUMENT, "n is NULL");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_get_info(m, 1, NULL), KVB_ERR_INVALID_ARGUMENT, "kvb_seq_info is NULL");
  EXPECT_FAIL(m, kIds, NIDS, kvb_get_stats(m, NULL), KVB_ERR_INVALID_ARGUMENT, "kvb_stats is NULL");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_can_swap_out(m, 1, NULL), KVB_ERR_INVALID_ARGUMENT, "answer is NULL");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_can_swap_in(m, 3, NULL), KVB_ERR_INVALID_ARGUMENT, "answer is NULL");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_swap_out(m, 1, buf, 8, NULL), KVB_ERR_INVALID_ARGUMENT, "num_pairs is NULL");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_swap_out(m, 1, NULL, 8, &n), KVB_ERR_INVALID_ARGUMENT, "pairs is NULL");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_swap_in(m, 3, buf, 8, NULL), KVB_ERR_INVALID_ARGUMENT, "num_pairs is NULL");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_swap_in(m, 3, NULL, 8, &n), KVB_ERR_INVALID_ARGUMENT, "pairs is NULL");
  EXPECT_FAIL(m, kIds, NIDS, kvb_drain_copies(m, buf, 8, NULL), KVB_ERR_INVALID_ARGUMENT, "num_pairs is NULL");
  EXPECT_FAIL(m, kIds, NIDS, kvb_batch_export(m, kIds, 1, NULL), KVB_ERR_INVALID_ARGUMENT, "kvb_batch is NULL");
  kvb_batch_init(&batch);
  EXPECT_FAIL(m, kIds, NIDS, kvb_batch_export(m, NULL, 2, &batch), KVB_ERR_INVALID_ARGUMENT, "num_seqs is 2");
  EXPECT_FAIL(m, kIds, NIDS, kvb_drain_events(m, ev, 2, tk, 8, NULL, NULL), KVB_ERR_INVALID_ARGUMENT, "num_events is NULL");
  EXPECT_FAIL(m, kIds, NIDS, kvb_drain_events(m, NULL, 2, tk, 8, &n, NULL), KVB_ERR_INVALID_ARGUMENT, "capacity is 2");
  EXPECT_FAIL(m, kIds, NIDS, kvb_drain_events(m, ev, 2, NULL, 8, &n, NULL), KVB_ERR_INVALID_ARGUMENT, "token_capacity is 8");
  /* options: extra-key arrays NULL with a count */
  kvb_seq_options_init(&opts);
  opts.num_extra_keys = 2;
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_allocate_ex(m, 7, t, 8, &opts, &n), KVB_ERR_INVALID_ARGUMENT, "num_extra_keys is 2");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_can_allocate_ex(m, t, 8, &opts, &n), KVB_ERR_INVALID_ARGUMENT, "num_extra_keys is 2");
  /* NULL tokens with n == 0 is the zero-length prompt error, not a crash */
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_allocate(m, 7, NULL, 0, &n), KVB_ERR_INVALID_ARGUMENT, "0 tokens");
  /* NULL tokens with n == 0 for append is a no-op */
  CHECK_OK(kvb_seq_append(m, 2, NULL, 0));
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

/* ---- unknown / duplicate sequence ids ------------------------------------------------------------ */

static void test_unknown_and_duplicate_ids(void) {
  kvb_manager* m = fixture();
  int64_t t[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  int32_t buf[16];
  size_t n = 0;
  kvb_availability a;
  kvb_seq_info info;
  kvb_batch batch;
  int64_t ids[2] = {1, 77};
  kvb_seq_info_init(&info);
  kvb_batch_init(&batch);
#define UNKNOWN(expr) EXPECT_FAIL(m, kIds, NIDS, expr, KVB_ERR_NO_SUCH_SEQUENCE, "77")
  UNKNOWN(kvb_seq_commit(m, 77, 1));
  UNKNOWN(kvb_seq_can_append(m, 77, 1));
  UNKNOWN(kvb_seq_append(m, 77, t, 1));
  UNKNOWN(kvb_seq_free(m, 77));
  UNKNOWN(kvb_seq_block_table(m, 77, buf, 16, &n));
  UNKNOWN(kvb_seq_set_extra_key(m, 77, 0, 5));
  UNKNOWN(kvb_seq_get_info(m, 77, &info));
  UNKNOWN(kvb_seq_fork(m, 77, 78));
  UNKNOWN(kvb_seq_fork_at(m, 77, 78, 1));
  UNKNOWN(kvb_seq_rollback(m, 77, 1));
  UNKNOWN(kvb_seq_set_window(m, 77, 8, 0));
  UNKNOWN(kvb_seq_can_swap_out(m, 77, &a));
  UNKNOWN(kvb_seq_swap_out(m, 77, buf, 8, &n));
  UNKNOWN(kvb_seq_can_swap_in(m, 77, &a));
  UNKNOWN(kvb_seq_swap_in(m, 77, buf, 8, &n));
  UNKNOWN(kvb_batch_export(m, ids, 2, &batch));
#undef UNKNOWN
  /* negative and extreme ids are just ids */
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_free(m, -5), KVB_ERR_NO_SUCH_SEQUENCE, "-5");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_free(m, INT64_MIN), KVB_ERR_NO_SUCH_SEQUENCE, "-9223372036854775808");
  /* duplicates */
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_allocate(m, 1, t, 4, &n), KVB_ERR_SEQUENCE_EXISTS, "1");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_allocate(m, 3, t, 4, &n), KVB_ERR_SEQUENCE_EXISTS, "sequence id 3");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_allocate_ex(m, 2, t, 4, NULL, &n), KVB_ERR_SEQUENCE_EXISTS, "sequence id 2");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_fork(m, 1, 2), KVB_ERR_SEQUENCE_EXISTS, "sequence id 2");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_fork_at(m, 1, 3, 4), KVB_ERR_SEQUENCE_EXISTS, "sequence id 3");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_fork(m, 1, 1), KVB_ERR_SEQUENCE_EXISTS, "seq 1");
  /* double free */
  CHECK_OK(kvb_seq_allocate(m, 50, t, 3, &n));
  CHECK_OK(kvb_seq_free(m, 50));
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_free(m, 50), KVB_ERR_NO_SUCH_SEQUENCE, "50");
  kvb_manager_destroy(m);
}

/* ---- sizes and states ----------------------------------------------------------------------------- */

static void test_zero_length_and_commit_bounds(void) {
  kvb_manager* m = fixture();
  int64_t t[4] = {1, 2, 3, 4};
  size_t n = 0;
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_allocate(m, 7, t, 0, &n), KVB_ERR_INVALID_ARGUMENT, "0 tokens");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_can_allocate(m, t, 0, &n), KVB_ERR_INVALID_ARGUMENT, "0 tokens");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_allocate_ex(m, 7, t, 0, NULL, &n), KVB_ERR_INVALID_ARGUMENT, "0 tokens");
  /* seq 2 has 2 uncomputed tokens; seq 1 none */
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_commit(m, 2, 3), KVB_ERR_INVALID_ARGUMENT, "commit of 3 tokens exceeds 2");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_commit(m, 1, 1), KVB_ERR_INVALID_ARGUMENT, "exceeds 0");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_commit(m, 2, (size_t)-1), KVB_ERR_INVALID_ARGUMENT, "18446744073709551615");
  /* commit(0) is a valid no-op */
  CHECK_OK(kvb_seq_commit(m, 2, 0));
  /* a prompt longer than any pool is refused by allocate and by can_allocate alike (tokens are not read) */
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_allocate(m, 7, t, (size_t)1 << 40, &n), KVB_ERR_INVALID_ARGUMENT, "1099511627776");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_can_allocate(m, t, (size_t)1 << 40, &n), KVB_ERR_INVALID_ARGUMENT, "1099511627776");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_append(m, 1, t, (size_t)1 << 40), KVB_ERR_INVALID_ARGUMENT, "1099511627776");
  CHECK_STATUS(kvb_seq_can_append(m, 1, (size_t)1 << 40), KVB_ERR_OUT_OF_BLOCKS);
  kvb_manager_destroy(m);
}

static void test_block_ids_out_of_range(void) {
  kvb_manager* m = fixture();
  uint64_t h = 0;
  EXPECT_FAIL(m, kIds, NIDS, kvb_block_hash(m, -1, &h), KVB_ERR_INVALID_ARGUMENT, "block id -1");
  EXPECT_FAIL(m, kIds, NIDS, kvb_block_hash(m, 16, &h), KVB_ERR_INVALID_ARGUMENT, "block id 16");
  EXPECT_FAIL(m, kIds, NIDS, kvb_block_hash(m, INT32_MAX, &h), KVB_ERR_INVALID_ARGUMENT, "2147483647");
  EXPECT_FAIL(m, kIds, NIDS, kvb_block_hash(m, INT32_MIN, &h), KVB_ERR_INVALID_ARGUMENT, "-2147483648");
  /* in range but no committed full block: BAD_STATE naming the block */
  EXPECT_FAIL(m, kIds, NIDS, kvb_block_hash(m, 15, &h), KVB_ERR_BAD_STATE, "block 15");
  CHECK_OK(kvb_block_hash(m, 0, &h));
  kvb_manager_destroy(m);
}

static void test_out_of_blocks(void) {
  kvb_manager* m = fixture();
  int64_t t[64];
  size_t n = 99, freeb = kvbt_free(m);
  kvbt_iota(t, 64, 7000);
  /* 16 blocks, fixture holds 5 (3 + 2): 11 free. 12 blocks' worth of tokens cannot fit. */
  CHECK(freeb == 11);
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_allocate(m, 7, t, 45, &n), KVB_ERR_OUT_OF_BLOCKS, "needs 12 free blocks");
  CHECK_SAVED_MSG("11 are free");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_can_allocate(m, t, 45, &n), KVB_ERR_OUT_OF_BLOCKS, "45");
  CHECK(n == 0); /* still written */
  CHECK_OK(kvb_seq_can_allocate(m, t, 44, &n));
  /* seq 2: 6 tokens in 2 blocks, 2 free slots in its last block: 2 + 44 = 46 tokens = 11 more blocks */
  CHECK_OK(kvb_seq_can_append(m, 2, 46));
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_can_append(m, 2, 47), KVB_ERR_OUT_OF_BLOCKS, "47");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_append(m, 2, t, 47), KVB_ERR_OUT_OF_BLOCKS, "needs 12 free blocks");
  kvb_manager_destroy(m);
}

static void test_swapped_state(void) {
  kvb_manager* m = fixture();
  int64_t t[4] = {1, 2, 3, 4};
  int32_t buf[16];
  size_t n = 0;
  kvb_availability a;
  kvb_batch batch;
  int64_t ids[1] = {3};
  kvb_batch_init(&batch);
#define SWAPPED(expr) EXPECT_FAIL(m, kIds, NIDS, expr, KVB_ERR_BAD_STATE, "seq 3")
  SWAPPED(kvb_seq_commit(m, 3, 0));
  SWAPPED(kvb_seq_can_append(m, 3, 1));
  SWAPPED(kvb_seq_append(m, 3, t, 1));
  SWAPPED(kvb_seq_block_table(m, 3, buf, 16, &n));
  SWAPPED(kvb_seq_fork(m, 3, 30));
  SWAPPED(kvb_seq_fork_at(m, 3, 30, 1));
  SWAPPED(kvb_seq_rollback(m, 3, 1));
  SWAPPED(kvb_seq_set_window(m, 3, 8, 0));
  SWAPPED(kvb_seq_can_swap_out(m, 3, &a));
  SWAPPED(kvb_seq_swap_out(m, 3, buf, 8, &n));
  SWAPPED(kvb_batch_export(m, ids, 1, &batch));
  /* not swapped out */
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_can_swap_in(m, 1, &a), KVB_ERR_BAD_STATE, "seq 1");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_swap_in(m, 2, buf, 8, &n), KVB_ERR_BAD_STATE, "seq 2");
#undef SWAPPED
  kvb_manager_destroy(m);
}

static void test_fork_rollback_window_errors(void) {
  kvb_manager* m = fixture();
  /* seq 2: 6 tokens, 4 committed */
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_fork(m, 2, 20), KVB_ERR_BAD_STATE, "only 4 are committed");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_fork_at(m, 2, 20, 5), KVB_ERR_BAD_STATE, "fork of 5 tokens");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_fork_at(m, 2, 20, 0), KVB_ERR_INVALID_ARGUMENT, "position 0");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_fork_at(m, 1, 20, 11), KVB_ERR_INVALID_ARGUMENT, "position 11");
  /* rollback must leave >= 1 token */
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_rollback(m, 1, 10), KVB_ERR_INVALID_ARGUMENT, "rollback of 10 tokens");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_rollback(m, 2, 100), KVB_ERR_INVALID_ARGUMENT, "100");
  CHECK_OK(kvb_seq_rollback(m, 1, 0)); /* no-op */
  /* a sink without a window */
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_set_window(m, 1, 0, 4), KVB_ERR_INVALID_ARGUMENT, "sink_tokens 4");
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

static void test_rollback_into_released_window(void) {
  kvb_manager* m = kvbt_make(4, 16);
  int64_t t[20], ids[1] = {1};
  kvbt_iota(t, 20, 1);
  CHECK_OK(kvb_seq_allocate(m, 1, t, 20, NULL));
  CHECK_OK(kvb_seq_commit(m, 1, 20));
  CHECK_OK(kvb_seq_set_window(m, 1, 8, 0)); /* blocks 0..2 released */
  CHECK(kvbt_info(m, 1).num_held_blocks == 2);
  EXPECT_FAIL(m, ids, 1, kvb_seq_rollback(m, 1, 10), KVB_ERR_BAD_STATE, "10 tokens");
  EXPECT_FAIL(m, ids, 1, kvb_seq_fork_at(m, 1, 2, 6), KVB_ERR_BAD_STATE, "fork at 6 tokens");
  kvb_manager_destroy(m);
}

static void test_options_errors(void) {
  kvb_manager* m = fixture();
  int64_t t[16];
  size_t n = 0;
  kvb_seq_options o;
  uint32_t blocks[3] = {0, 2, 2};
  uint64_t keys[3] = {11, 22, 33};
  kvbt_iota(t, 16, 3000);
  kvb_seq_options_init(&o);
  o.has_cache_salt = 2;
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_allocate_ex(m, 7, t, 8, &o, &n), KVB_ERR_INVALID_ARGUMENT, "got 2");
  kvb_seq_options_init(&o);
  o.struct_size = 12;
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_allocate_ex(m, 7, t, 8, &o, &n), KVB_ERR_INVALID_ARGUMENT, "struct_size 12");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_can_allocate_ex(m, t, 8, &o, &n), KVB_ERR_INVALID_ARGUMENT, "struct_size 12");
  kvb_seq_options_init(&o);
  o.extra_key_blocks = blocks;
  o.extra_keys = keys;
  o.num_extra_keys = 3; /* 2, 2: not strictly increasing */
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_allocate_ex(m, 7, t, 16, &o, &n), KVB_ERR_INVALID_ARGUMENT, "extra_key_blocks[2] = 2");
  kvb_seq_options_init(&o);
  o.sink_tokens = 3;
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_allocate_ex(m, 7, t, 8, &o, &n), KVB_ERR_INVALID_ARGUMENT, "sink_tokens 3");
  /* set_extra_key on an already hashed block */
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_set_extra_key(m, 1, 1, 5), KVB_ERR_BAD_STATE, "block 1");
  kvb_manager_destroy(m);
}

static void test_struct_size_too_small(void) {
  kvb_manager* m = fixture();
  kvb_seq_info info;
  kvb_stats st;
  kvb_batch batch;
  kvb_seq_info_init(&info);
  info.struct_size = 4;
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_get_info(m, 1, &info), KVB_ERR_INVALID_ARGUMENT, "struct_size 4");
  kvb_stats_init(&st);
  st.struct_size = 16;
  EXPECT_FAIL(m, kIds, NIDS, kvb_get_stats(m, &st), KVB_ERR_INVALID_ARGUMENT, "struct_size 16");
  kvb_batch_init(&batch);
  batch.struct_size = 0;
  EXPECT_FAIL(m, kIds, NIDS, kvb_batch_export(m, kIds, 1, &batch), KVB_ERR_INVALID_ARGUMENT, "struct_size 0");
  kvb_manager_destroy(m);
}

/* ---- buffers too small ---------------------------------------------------------------------------- */

static void test_buffers_too_small(void) {
  kvb_manager* m = fixture();
  int32_t buf[32];
  size_t n = 0;
  int64_t t[16];
  kvb_batch batch;
  int32_t tables[2 * 3], lens[2], qs[3];
  int64_t slots[4];
  int64_t ids2[2] = {1, 2};
  /* block table: seq 1 has 3 entries */
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_block_table(m, 1, buf, 2, &n), KVB_ERR_BUFFER_TOO_SMALL, "capacity is 2");
  CHECK(n == 3);
  CHECK_SAVED_MSG("3 entries");
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_block_table(m, 1, NULL, 0, &n), KVB_ERR_BUFFER_TOO_SMALL, "capacity is 0");
  CHECK(n == 3);
  /* swap out: seq 1 holds 3 blocks */
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_swap_out(m, 1, buf, 2, &n), KVB_ERR_BUFFER_TOO_SMALL, "3 block pairs");
  CHECK(n == 3);
  CHECK_SAVED_MSG("capacity_pairs is 2");
  /* swap in: seq 3 has 2 host blocks */
  EXPECT_FAIL(m, kIds, NIDS, kvb_seq_swap_in(m, 3, buf, 1, &n), KVB_ERR_BUFFER_TOO_SMALL, "2 block pairs");
  CHECK(n == 2);
  /* drain copies: make one pending pair (fork of a partial block, append) */
  CHECK_OK(kvb_seq_commit(m, 2, 2));
  CHECK_OK(kvb_seq_fork(m, 2, 20));
  kvbt_iota(t, 4, 40);
  CHECK_OK(kvb_seq_append(m, 20, t, 1));
  {
    int64_t ids5[5] = {1, 2, 3, 20, 99};
    EXPECT_FAIL(m, ids5, 5, kvb_drain_copies(m, buf, 0, &n), KVB_ERR_BUFFER_TOO_SMALL, "1 block pair,");
    CHECK(n == 1);
    EXPECT_FAIL(m, ids5, 5, kvb_drain_copies(m, NULL, 1, &n), KVB_ERR_INVALID_ARGUMENT, "pairs is NULL");
    /* nothing was drained: the pair is still there */
    CHECK_OK(kvb_drain_copies(m, buf, 4, &n));
    CHECK(n == 1);
    CHECK_OK(kvb_drain_copies(m, NULL, 0, &n));
    CHECK(n == 0);
  }
  /* batch export: seqs 1 (10 tokens, 3 blocks, 0 new) and 2 (6 tokens, 2 blocks, 0 new after commit) */
  CHECK_OK(kvb_seq_append(m, 1, t, 3)); /* 13 tokens, 4 blocks, 3 new */
  kvb_batch_init(&batch);
  batch.block_tables = tables;
  batch.max_blocks_per_seq = 3;
  batch.seq_lens = lens;
  batch.query_start = qs;
  batch.slot_mapping = slots;
  batch.slot_capacity = 4;
  {
    int64_t ids5[5] = {1, 2, 3, 20, 99};
    EXPECT_FAIL(m, ids5, 5, kvb_batch_export(m, ids2, 2, &batch), KVB_ERR_BUFFER_TOO_SMALL, "need 4 columns");
    CHECK_SAVED_MSG("max_blocks_per_seq is 3");
    CHECK(batch.max_blocks_needed == 4);
    CHECK(batch.num_slots == 3);
    batch.block_tables = NULL; /* not wanted: no longer a limit */
    batch.slot_capacity = 2;
    EXPECT_FAIL(m, ids5, 5, kvb_batch_export(m, ids2, 2, &batch), KVB_ERR_BUFFER_TOO_SMALL, "needs 3 entries");
    CHECK_SAVED_MSG("slot_capacity is 2");
    CHECK(batch.num_slots == 3);
    CHECK(batch.max_blocks_needed == 4);
    batch.slot_capacity = 3;
    CHECK_OK(kvb_batch_export(m, ids2, 2, &batch));
  }
  /* events: the queue holds STORED events with 4 tokens each */
  {
    kvb_event ev[4];
    int64_t tk[16];
    int64_t ids5[5] = {1, 2, 3, 20, 99};
    EXPECT_FAIL(m, ids5, 5, kvb_drain_events(m, ev, 0, tk, 16, &n, NULL), KVB_ERR_BUFFER_TOO_SMALL, "capacity >= 1");
    EXPECT_FAIL(m, ids5, 5, kvb_drain_events(m, ev, 4, tk, 3, &n, NULL), KVB_ERR_BUFFER_TOO_SMALL, "token_capacity >= 4");
    EXPECT_FAIL(m, ids5, 5, kvb_drain_events(m, ev, 4, NULL, 0, &n, NULL), KVB_ERR_BUFFER_TOO_SMALL, "token_capacity >= 4");
  }
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

static void test_swap_errors(void) {
  /* 2 host blocks: a 3-block sequence can never swap out; a 2-block one only while host blocks are free */
  kvb_manager* m = kvbt_make_ex(4, 16, 2, 0.0f, 0, 0);
  int64_t t[12], ids[3] = {1, 2, 3};
  int32_t buf[8];
  size_t n = 0;
  kvb_availability a = KVB_AVAIL_OK;
  kvbt_iota(t, 12, 1);
  CHECK_OK(kvb_seq_allocate(m, 1, t, 12, NULL));
  CHECK_OK(kvb_seq_allocate(m, 2, t, 8, NULL));
  CHECK_OK(kvb_seq_allocate(m, 3, t, 1, NULL));
  CHECK_OK(kvb_seq_can_swap_out(m, 1, &a));
  CHECK(a == KVB_AVAIL_NEVER);
  EXPECT_FAIL(m, ids, 3, kvb_seq_swap_out(m, 1, buf, 8, &n), KVB_ERR_OUT_OF_BLOCKS, "needs 3 host blocks");
  CHECK_OK(kvb_seq_swap_out(m, 3, buf, 8, &n));
  CHECK(n == 1);
  CHECK_OK(kvb_seq_can_swap_out(m, 2, &a));
  CHECK(a == KVB_AVAIL_LATER);
  EXPECT_FAIL(m, ids, 3, kvb_seq_swap_out(m, 2, buf, 8, &n), KVB_ERR_OUT_OF_BLOCKS, "1 is free");
  /* swap in with no free device blocks */
  CHECK_OK(kvb_seq_append(m, 2, t, 12)); /* 20 tokens = 5 blocks; device: 3 + 5 = 8 */
  {
    int64_t big[32];
    kvbt_iota(big, 32, 100);
    CHECK_OK(kvb_seq_allocate(m, 4, big, 32, NULL)); /* 8 more: device full */
  }
  CHECK(kvbt_free(m) == 0);
  CHECK_OK(kvb_seq_can_swap_in(m, 3, &a));
  CHECK(a == KVB_AVAIL_LATER);
  EXPECT_FAIL(m, ids, 3, kvb_seq_swap_in(m, 3, buf, 8, &n), KVB_ERR_OUT_OF_BLOCKS, "0 are free");
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

static void test_swap_out_with_pending_copy(void) {
  kvb_manager* m = kvbt_make_ex(4, 16, 8, 0.0f, 0, 0);
  int64_t t[8], ids[2] = {1, 2};
  int32_t buf[8];
  size_t n = 0;
  kvbt_iota(t, 8, 1);
  CHECK_OK(kvb_seq_allocate(m, 1, t, 6, NULL));
  CHECK_OK(kvb_seq_commit(m, 1, 6));
  CHECK_OK(kvb_seq_fork(m, 1, 2));
  CHECK_OK(kvb_seq_append(m, 2, t, 1)); /* CoW into a new block: pending (src, dst) */
  EXPECT_FAIL(m, ids, 2, kvb_seq_swap_out(m, 2, buf, 8, &n), KVB_ERR_BAD_STATE, "pending copy-on-write");
  CHECK_OK(kvb_drain_copies(m, buf, 4, &n));
  CHECK(n == 1);
  CHECK_OK(kvb_seq_swap_out(m, 2, buf, 8, &n));
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

static void test_reset_refused(void) {
  kvb_manager* m = fixture();
  EXPECT_FAIL(m, kIds, NIDS, kvb_reset_prefix_cache(m), KVB_ERR_BAD_STATE, "5 blocks are in use");
  kvb_manager_destroy(m);
}

static void test_status_strings(void) {
  CHECK(strcmp(kvb_status_string(KVB_OK), "KVB_OK") == 0);
  CHECK(strcmp(kvb_status_string(KVB_ERR_INVALID_ARGUMENT), "KVB_ERR_INVALID_ARGUMENT") == 0);
  CHECK(strcmp(kvb_status_string(KVB_ERR_OUT_OF_BLOCKS), "KVB_ERR_OUT_OF_BLOCKS") == 0);
  CHECK(strcmp(kvb_status_string(KVB_ERR_NO_SUCH_SEQUENCE), "KVB_ERR_NO_SUCH_SEQUENCE") == 0);
  CHECK(strcmp(kvb_status_string(KVB_ERR_SEQUENCE_EXISTS), "KVB_ERR_SEQUENCE_EXISTS") == 0);
  CHECK(strcmp(kvb_status_string(KVB_ERR_BAD_STATE), "KVB_ERR_BAD_STATE") == 0);
  CHECK(strcmp(kvb_status_string(KVB_ERR_OUT_OF_MEMORY), "KVB_ERR_OUT_OF_MEMORY") == 0);
  CHECK(strcmp(kvb_status_string(KVB_ERR_DEVICE), "KVB_ERR_DEVICE") == 0);
  CHECK(strcmp(kvb_status_string(KVB_ERR_UNSUPPORTED), "KVB_ERR_UNSUPPORTED") == 0);
  CHECK(strcmp(kvb_status_string(KVB_ERR_BUFFER_TOO_SMALL), "KVB_ERR_BUFFER_TOO_SMALL") == 0);
  CHECK(strcmp(kvb_status_string(KVB_ERR_INTERNAL), "KVB_ERR_INTERNAL") == 0);
  CHECK(strcmp(kvb_status_string((kvb_status)1), "KVB_UNKNOWN_STATUS") == 0);
  CHECK(strcmp(kvb_status_string((kvb_status)-11), "KVB_UNKNOWN_STATUS") == 0);
  CHECK(kvb_last_error() != NULL);
}

int main(void) {
  RUN_TEST(test_status_strings);
  RUN_TEST(test_bad_config);
  RUN_TEST(test_old_config_struct_size);
  RUN_TEST(test_null_manager);
  RUN_TEST(test_null_pointers);
  RUN_TEST(test_unknown_and_duplicate_ids);
  RUN_TEST(test_zero_length_and_commit_bounds);
  RUN_TEST(test_block_ids_out_of_range);
  RUN_TEST(test_out_of_blocks);
  RUN_TEST(test_swapped_state);
  RUN_TEST(test_fork_rollback_window_errors);
  RUN_TEST(test_rollback_into_released_window);
  RUN_TEST(test_options_errors);
  RUN_TEST(test_struct_size_too_small);
  RUN_TEST(test_buffers_too_small);
  RUN_TEST(test_swap_errors);
  RUN_TEST(test_swap_out_with_pending_copy);
  RUN_TEST(test_reset_refused);
  TEST_SUMMARY();
}
