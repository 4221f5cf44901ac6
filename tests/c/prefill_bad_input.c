/* kvb_prefill_attention from outside, the way a bad-input matrix drives it (public header only): strides
 * whose defaults or extents overflow int64, tensors that wrap the address space, struct sizes around
 * ours, and q aliasing out. Every refusal must leave out untouched (poisoned) and name the argument;
 * nothing may crash or trip a sanitizer. The exhaustive valid/invalid table of the prefill author is in
 * tests/cpp/kernels_prefill.cpp; this file covers what that table does not. */
#include <stddef.h>

#include "kvbt_common.h"

#define BS 16
#define HKV 2
#define HQ 8
#define D 64
#define NB 8

static float kc[NB * BS * HKV * D], vc[NB * BS * HKV * D];
static float qbuf[64 * HQ * D], obuf[64 * HQ * D], ref[64 * HQ * D];
static int32_t qstart[3] = {0, 5, 9}, lens[2] = {20, 4}, tables[2 * 4] = {3, 1, -1, -1, 6, -1, -1, -1};

static uint64_t rs = 12345;
static float frand(void) {
  rs = rs * 6364136223846793005ULL + 1442695040888963407ULL;
  return (float)((rs >> 40) & 0xffff) / 65536.0f - 0.5f;
}

static void fill(void) {
  size_t i;
  for (i = 0; i < sizeof kc / sizeof kc[0]; ++i) kc[i] = frand(), vc[i] = frand();
  for (i = 0; i < sizeof qbuf / sizeof qbuf[0]; ++i) qbuf[i] = frand();
}

static kvb_cache_desc cache(void) { return kvbt_cache(KVB_DTYPE_FP32, kc, vc, NB, BS, HKV, D); }

static kvb_prefill_args args(void) {
  kvb_prefill_args a;
  kvb_prefill_args_init(&a);
  KVBT_PAGED_ARGS(a, 2, HQ, 4, qbuf, obuf, tables, lens);
  a.total_q_tokens = 9;
  a.query_start = qstart;
  return a;
}

static void poison(void) {
  size_t i;
  for (i = 0; i < sizeof obuf / sizeof obuf[0]; ++i) obuf[i] = NAN;
}

static int out_untouched(void) {
  size_t i;
  for (i = 0; i < sizeof obuf / sizeof obuf[0]; ++i)
    if (!isnan(obuf[i])) return 0;
  return 1;
}

/* Runs one bad call: want status, a message naming `needle`, out untouched. */
static void expect_refused(const kvb_cache_desc* c, const kvb_prefill_args* a, kvb_status want, const char* needle,
                           int shapes_only, int line) {
  kvb_status s;
  size_t ws = 12345;
  poison();
  kvbt_prime_last_error();
  s = kvb_prefill_attention(c, a, NULL);
  if (s != want || !strstr(kvb_last_error(), needle)) {
    fprintf(stderr, "line %d: got %s (%s), want %s naming \"%s\"\n", line, kvb_status_string(s), kvb_last_error(),
            kvb_status_string(want), needle);
    CHECK(0);
  }
  if (!out_untouched()) {
    fprintf(stderr, "line %d: a refused call wrote out\n", line);
    CHECK(0);
  }
  /* The workspace query sees the same shapes and strides: it must refuse them too (pointers aside). */
  if (shapes_only) {
    s = kvb_prefill_attention_workspace_size(c, a, &ws);
    if (s == KVB_OK) {
      fprintf(stderr, "line %d: workspace query accepted what the call refuses\n", line);
      CHECK(0);
    }
  }
}
#define REFUSED(c, a, want, needle) expect_refused((c), (a), (want), (needle), 1, __LINE__)
/* Refusals that only the launch can see (pointers, device arrays). */
#define REFUSED_LAUNCH(c, a, want, needle) expect_refused((c), (a), (want), (needle), 0, __LINE__)

/* A default stride computed from a huge given one must not overflow int64 (UB, seen by UBSan). */
static void test_default_stride_overflow(void) {
  kvb_cache_desc c = cache();
  kvb_prefill_args a = args();
  fill();
  a.q_head_stride = (int64_t)1 << 62; /* default q_token_stride = 8 * 2^62 overflows */
  REFUSED(&c, &a, KVB_ERR_INVALID_ARGUMENT, "q_head_stride");
  a = args();
  a.out_head_stride = (int64_t)1 << 61; /* 8 * 2^61 = 2^64 */
  REFUSED(&c, &a, KVB_ERR_INVALID_ARGUMENT, "out_head_stride");
  a = args();
  a.q_head_stride = INT64_MAX;
  REFUSED(&c, &a, KVB_ERR_INVALID_ARGUMENT, "q_head_stride");
  a = args();
  a.out_token_stride = INT64_MAX;
  REFUSED(&c, &a, KVB_ERR_INVALID_ARGUMENT, "out_token_stride");
  a = args();
  a.q_token_stride = INT64_MIN;
  REFUSED(&c, &a, KVB_ERR_INVALID_ARGUMENT, "q_token_stride");
  a = args();
  a.q_token_stride = (int64_t)1 << 61;
  REFUSED(&c, &a, KVB_ERR_INVALID_ARGUMENT, "q_token_stride");
}

/* q or out so close to the top of the address space that the tensor wraps: refused, never read. */
static void test_address_wrap(void) {
  kvb_cache_desc c = cache();
  kvb_prefill_args a = args();
  fill();
  a.q = (const void*)(uintptr_t)(UINTPTR_MAX - 4096);
  REFUSED_LAUNCH(&c, &a, KVB_ERR_INVALID_ARGUMENT, "wrap");
  a = args();
  a.out = (void*)(uintptr_t)(UINTPTR_MAX - 64);
  REFUSED_LAUNCH(&c, &a, KVB_ERR_INVALID_ARGUMENT, "wrap");
}

/* struct_size: below the first version refused; beyond ours (a newer header) read up to ours. */
static void test_struct_size(void) {
  kvb_cache_desc c = cache();
  struct {
    kvb_prefill_args a;
    uint64_t newer_fields[4];
  } big;
  kvb_prefill_args a = args();
  size_t i;
  fill();
  a.struct_size = 0;
  REFUSED(&c, &a, KVB_ERR_INVALID_ARGUMENT, "struct_size");
  a.struct_size = (uint32_t)offsetof(kvb_prefill_args, allow_tf32) - 8;  /* below the first layout */
  REFUSED(&c, &a, KVB_ERR_INVALID_ARGUMENT, "struct_size");
  poison();
  a = args();
  CHECK_OK(kvb_prefill_attention(&c, &a, NULL));
  memcpy(ref, obuf, sizeof ref);
  /* The first layout (before allow_tf32): the bytes beyond it are not read (here: garbage). */
  a = args();
  a.struct_size = (uint32_t)offsetof(kvb_prefill_args, allow_tf32);
  a.allow_tf32 = 0xdeadbeefu;
  a.reserved2 = 0xdeadbeefu;
  poison();
  CHECK_OK(kvb_prefill_attention(&c, &a, NULL));
  for (i = 0; i < 9 * HQ * D; ++i)
    if (obuf[i] != ref[i]) {
      CHECK(0);
      break;
    }
  memset(&big, 0, sizeof big);
  big.a = args();
  big.a.struct_size = (uint32_t)sizeof big;
  poison();
  CHECK_OK(kvb_prefill_attention(&c, &big.a, NULL));
  for (i = 0; i < 9 * HQ * D; ++i)
    if (obuf[i] != ref[i]) {
      CHECK(0);
      break;
    }
}

/* In place (q == out, same strides): every row's query is read before its output is written, so the
 * result equals the out-of-place one bit for bit. */
static void test_q_aliases_out(void) {
  kvb_cache_desc c = cache();
  kvb_prefill_args a = args();
  size_t i;
  fill();
  poison();
  CHECK_OK(kvb_prefill_attention(&c, &a, NULL));
  memcpy(ref, obuf, sizeof ref);
  memcpy(obuf, qbuf, sizeof obuf);
  a.out = obuf;
  a.q = obuf;
  CHECK_OK(kvb_prefill_attention(&c, &a, NULL));
  for (i = 0; i < 9 * HQ * D; ++i)
    if (obuf[i] != ref[i]) {
      fprintf(stderr, "  in place differs at %zu: %g vs %g\n", i, (double)obuf[i], (double)ref[i]);
      CHECK(0);
      break;
    }
}

/* Bad device arrays one at a time (the CPU reads them before writing anything). */
static void test_bad_arrays(void) {
  kvb_cache_desc c = cache();
  kvb_prefill_args a = args();
  int32_t qs[3], ln[2], tb[8];
  fill();
  a.query_start = qs;
  a.seq_lens = ln;
  a.block_tables = tb;
#define RESET() (memcpy(qs, qstart, sizeof qs), memcpy(ln, lens, sizeof ln), memcpy(tb, tables, sizeof tb))
  RESET(); qs[0] = -1; REFUSED_LAUNCH(&c, &a, KVB_ERR_INVALID_ARGUMENT, "query_start[0]");
  RESET(); qs[1] = 10; REFUSED_LAUNCH(&c, &a, KVB_ERR_INVALID_ARGUMENT, "query_start[2]");
  RESET(); qs[1] = INT32_MIN; REFUSED_LAUNCH(&c, &a, KVB_ERR_INVALID_ARGUMENT, "query_start[1]");
  RESET(); qs[2] = 8; REFUSED_LAUNCH(&c, &a, KVB_ERR_INVALID_ARGUMENT, "total_q_tokens");
  RESET(); qs[2] = INT32_MAX; REFUSED_LAUNCH(&c, &a, KVB_ERR_INVALID_ARGUMENT, "seq_lens[1]");
  RESET(); ln[0] = 4; REFUSED_LAUNCH(&c, &a, KVB_ERR_INVALID_ARGUMENT, "seq_lens[0]");          /* q_len 5 > 4 */
  RESET(); ln[1] = -1; REFUSED_LAUNCH(&c, &a, KVB_ERR_INVALID_ARGUMENT, "seq_lens[1]");
  RESET(); ln[0] = 65; REFUSED_LAUNCH(&c, &a, KVB_ERR_INVALID_ARGUMENT, "seq_lens[0]");         /* beyond 4 blocks */
  RESET(); ln[0] = INT32_MIN; REFUSED_LAUNCH(&c, &a, KVB_ERR_INVALID_ARGUMENT, "seq_lens[0]");
  RESET(); tb[1] = -1; REFUSED_LAUNCH(&c, &a, KVB_ERR_INVALID_ARGUMENT, "block_tables[0][1]");
  RESET(); tb[0] = NB; REFUSED_LAUNCH(&c, &a, KVB_ERR_INVALID_ARGUMENT, "block_tables[0][0]");
  RESET(); tb[4] = INT32_MIN; REFUSED_LAUNCH(&c, &a, KVB_ERR_INVALID_ARGUMENT, "block_tables[1][0]");
  /* with a window, a block wholly before every row's window may read -1 */
  RESET(); ln[0] = 40; tb[2] = 5; tb[0] = -1; a.window_tokens = 4; /* rows 35..39 see 32..39 */
  poison();
  CHECK_OK(kvb_prefill_attention(&c, &a, NULL));
  a.sink_tokens = 1; /* ...but not a sink block */
  REFUSED_LAUNCH(&c, &a, KVB_ERR_INVALID_ARGUMENT, "block_tables[0][0]");
#undef RESET
}

int main(void) {
  RUN_TEST(test_default_stride_overflow);
  RUN_TEST(test_address_wrap);
  RUN_TEST(test_struct_size);
  RUN_TEST(test_q_aliases_out);
  RUN_TEST(test_bad_arrays);
  TEST_SUMMARY();
}
