/* kvb_hash_tokens against fixed vectors, and (with --dump DIR) a writer of the hashed byte layout for
 * tests/scripts/hash_xxhsum.sh, which compares them with the xxhsum tool.
 *
 * The constants below were produced independently of libkvblock with Python's `xxhash` package
 * (xxhash 4.1.0): xxhash.xxh64(data, seed=0).intdigest() over
 *   data = struct.pack('<Q', parent) [only with a parent] + b''.join(struct.pack('<q', t) for t in tokens)
 * i.e. the documented layout: parent hash as u64 little-endian, then the tokens as i64 little-endian. */
#include <stdlib.h>

#include "harness.h"

static int64_t toks_iota16[16];
static int64_t toks_iota37[37];
static const int64_t toks_zero[1] = {0};
static const int64_t toks_1234[4] = {1, 2, 3, 4};
static const int64_t toks_5678[4] = {5, 6, 7, 8};
static const int64_t toks_edge[4] = {-1, INT64_MAX, INT64_MIN, 151643};
static const int64_t toks_42[1] = {42};

typedef struct vec {
  const char* name;
  int has_parent;
  uint64_t parent;
  const int64_t* tokens;
  size_t n;
  uint64_t want;
} vec;

static vec vectors[] = {
    {"empty", 0, 0, NULL, 0, 0xef46db3751d8e999ULL},                /* xxh64(b'') */
    {"zero", 0, 0, toks_zero, 1, 0x34c96acdcadb1bbbULL},
    {"1234", 0, 0, toks_1234, 4, 0x73f859a04f669e6dULL},
    {"iota16", 0, 0, toks_iota16, 16, 0x00b47f43944b694bULL},        /* 0..15 */
    {"edge", 0, 0, toks_edge, 4, 0xa97c30af3945f6bbULL},             /* -1, INT64_MAX, INT64_MIN, 151643 */
    {"iota37", 0, 0, toks_iota37, 37, 0xa51c328c33176192ULL},        /* 100..136: the >= 32-byte path */
    {"chain", 1, 0x73f859a04f669e6dULL, toks_5678, 4, 0x087884241753df3eULL}, /* parent = hash("1234") */
    {"parent_only", 1, 0x0123456789abcdefULL, NULL, 0, 0xea3c52081e9843ecULL},
    {"parent_max", 1, 0xffffffffffffffffULL, toks_42, 1, 0x21cdc5d41c130a8eULL},
    {"salt_as_parent", 1, 0xdeadbeefULL, toks_1234, 4, 0xb101bbb799dbeb88ULL},
};
#define NVEC (sizeof vectors / sizeof vectors[0])

static void fill(void) {
  int i;
  for (i = 0; i < 16; ++i) toks_iota16[i] = i;
  for (i = 0; i < 37; ++i) toks_iota37[i] = 100 + i;
}

static void test_vectors(void) {
  size_t i;
  for (i = 0; i < NVEC; ++i) {
    const vec* v = &vectors[i];
    uint64_t got = kvb_hash_tokens(v->has_parent ? &v->parent : NULL, v->tokens, v->n);
    if (got != v->want) {
      fprintf(stderr, "vector %s: got 0x%016llx want 0x%016llx\n", v->name, (unsigned long long)got,
              (unsigned long long)v->want);
      kvbt_case_failures++;
    }
  }
}

/* The chain as a manager computes it equals kvb_hash_tokens step by step. */
static void test_manager_chain_matches(void) {
  kvb_config cfg;
  kvb_manager* m = NULL;
  uint64_t h = 0, want0, want1;
  kvb_config_init(&cfg);
  cfg.block_size = 4;
  cfg.num_blocks = 4;
  CHECK_OK(kvb_manager_create(&cfg, &m));
  {
    int64_t p[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    CHECK_OK(kvb_seq_allocate(m, 1, p, 9, NULL));
    CHECK_OK(kvb_seq_commit(m, 1, 9));
  }
  want0 = 0x73f859a04f669e6dULL;
  want1 = 0x087884241753df3eULL;
  CHECK_OK(kvb_block_hash(m, 0, &h));
  CHECK(h == want0);
  CHECK_OK(kvb_block_hash(m, 1, &h));
  CHECK(h == want1);
  kvb_manager_destroy(m);
}

/* NULL tokens with n == 0 hash as no tokens; with n > 0 they are invalid: 0 (see tests/c/bad_input.c).
   The parent pointer is only read. */
static void test_null_tokens(void) {
  uint64_t p = 0x0123456789abcdefULL;
  CHECK(kvb_hash_tokens(NULL, NULL, 0) == 0xef46db3751d8e999ULL);
  CHECK(kvb_hash_tokens(NULL, NULL, 5) == 0);
  CHECK(kvb_hash_tokens(&p, NULL, 0) == 0xea3c52081e9843ecULL);
  CHECK(p == 0x0123456789abcdefULL);
}

/* --dump DIR: DIR/<name>.bin holds the hashed bytes; stdout lists "<name> <16 hex digits>". */
static int dump(const char* dir) {
  size_t i, j;
  for (i = 0; i < NVEC; ++i) {
    const vec* v = &vectors[i];
    char path[4096];
    FILE* f;
    unsigned char b[8];
    int k;
    snprintf(path, sizeof path, "%s/%s.bin", dir, v->name);
    f = fopen(path, "wb");
    if (!f) {
      perror(path);
      return 1;
    }
    if (v->has_parent) {
      for (k = 0; k < 8; ++k) b[k] = (unsigned char)(v->parent >> (8 * k));
      fwrite(b, 1, 8, f);
    }
    for (j = 0; j < v->n; ++j) {
      uint64_t u = (uint64_t)v->tokens[j];
      for (k = 0; k < 8; ++k) b[k] = (unsigned char)(u >> (8 * k));
      fwrite(b, 1, 8, f);
    }
    fclose(f);
    printf("%s %016llx\n", v->name,
           (unsigned long long)kvb_hash_tokens(v->has_parent ? &v->parent : NULL, v->tokens, v->n));
  }
  return 0;
}

int main(int argc, char** argv) {
  fill();
  if (argc == 3 && strcmp(argv[1], "--dump") == 0) return dump(argv[2]);
  RUN_TEST(test_vectors);
  RUN_TEST(test_manager_chain_matches);
  RUN_TEST(test_null_tokens);
  TEST_SUMMARY();
}
