/* kvb_batch_export's prefix groups on kvblock.h's worked example: rows 0 and 2 forked from one 70-token
   prompt share 4 full blocks (their partial blocks copied on write), row 1 is unrelated. Then the
   minimum, a too-small buffer (sizes reported, nothing written), a struct below its first version, and
   a manager with a window group, whose released blocks end the sharing of that group only. */
#include <stdint.h>
#include <string.h>

#include "harness.h"

static kvb_manager* worked_example(const kvb_group_spec* groups, size_t num_groups) {
  kvb_config cfg;
  kvb_manager* m = NULL;
  int64_t prompt[70], other[20], tok[3] = {1, 2, 3}, ids[3] = {10, 11, 12};
  int i;
  kvb_config_init(&cfg);
  cfg.block_size = 16;
  cfg.num_blocks = 32;
  cfg.groups = groups;
  cfg.num_groups = num_groups;
  CHECK_OK(kvb_manager_create(&cfg, &m));
  for (i = 0; i < 70; i++) prompt[i] = i;
  for (i = 0; i < 20; i++) other[i] = 500 + i;
  CHECK_OK(kvb_seq_allocate(m, 10, prompt, 70, NULL));
  CHECK_OK(kvb_seq_commit(m, 10, 70));
  CHECK_OK(kvb_seq_fork(m, 10, 12));
  CHECK_OK(kvb_seq_allocate(m, 11, other, 20, NULL));
  CHECK_OK(kvb_seq_commit(m, 11, 20));
  CHECK_OK(kvb_batch_append(m, ids, tok, 3));
  return m;
}

typedef struct out {
  int32_t start[4], members[3], shared[3], tables[3 * 8], lens[3];
  kvb_prefix_groups pg;
  kvb_batch b;
} out;

static void prepare(out* o, uint32_t group) {
  memset(o, 0xee, sizeof *o);
  kvb_prefix_groups_init(&o->pg);
  o->pg.group_start = o->start;
  o->pg.members = o->members;
  o->pg.shared_blocks = o->shared;
  o->pg.group_capacity = 3;
  o->pg.member_capacity = 3;
  kvb_batch_init(&o->b);
  o->b.max_blocks_per_seq = 8;
  o->b.block_tables = o->tables;
  o->b.seq_lens = o->lens;
  o->b.group = group;
  o->b.prefix_groups = &o->pg;
}

static void test_worked_example(void) {
  const int64_t ids[3] = {10, 11, 12};
  kvb_manager* m = worked_example(NULL, 0);
  out o;
  prepare(&o, 0);
  CHECK(o.pg.min_shared_blocks == 2);
  CHECK_OK(kvb_batch_export(m, ids, 3, &o.b));
  CHECK(o.lens[0] == 71 && o.lens[1] == 21 && o.lens[2] == 71);
  CHECK(o.pg.num_groups == 1 && o.pg.num_members == 2);
  CHECK(o.start[0] == 0 && o.start[1] == 2 && o.members[0] == 0 && o.members[1] == 2 && o.shared[0] == 4);
  CHECK(memcmp(o.tables, o.tables + 16, 4 * sizeof(int32_t)) == 0 && o.tables[4] != o.tables[20]);
  /* a minimum above the shared prefix: no group (group_start[0] = 0 still written) */
  prepare(&o, 0);
  o.pg.min_shared_blocks = 5;
  CHECK_OK(kvb_batch_export(m, ids, 3, &o.b));
  CHECK(o.pg.num_groups == 0 && o.pg.num_members == 0 && o.start[0] == 0);
  /* too small: the sizes needed, nothing written */
  prepare(&o, 0);
  o.pg.member_capacity = 1;
  CHECK_STATUS(kvb_batch_export(m, ids, 3, &o.b), KVB_ERR_BUFFER_TOO_SMALL);
  CHECK(o.pg.num_groups == 1 && o.pg.num_members == 2 && o.start[0] == (int32_t)0xeeeeeeee);
  CHECK(o.lens[0] == (int32_t)0xeeeeeeee);
  /* a struct below its first version */
  prepare(&o, 0);
  o.pg.struct_size = 8;
  CHECK_STATUS(kvb_batch_export(m, ids, 3, &o.b), KVB_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvb_last_error(), "kvb_prefix_groups") != NULL);
  CHECK_OK(kvb_check_invariants(m));
  kvb_manager_destroy(m);
}

/* Group 1 slides a 16-token window (no sinks): its first blocks are released (-1) once committed past
   them, so only group 0 (full attention) describes the fork's shared prefix. */
static void test_window_group(void) {
  const int64_t ids[3] = {10, 11, 12};
  kvb_group_spec gs[2];
  kvb_manager* m;
  out o;
  kvb_group_spec_init(&gs[0]);
  kvb_group_spec_init(&gs[1]);
  gs[1].kind = KVB_GROUP_WINDOW;
  gs[1].window_tokens = 16;
  m = worked_example(gs, 2);
  prepare(&o, 0);
  CHECK_OK(kvb_batch_export(m, ids, 3, &o.b));
  CHECK(o.pg.num_groups == 1 && o.shared[0] == 4);
  prepare(&o, 1);
  CHECK_OK(kvb_batch_export(m, ids, 3, &o.b));
  CHECK(o.tables[0] == -1 && o.pg.num_groups == 0);
  kvb_manager_destroy(m);
}

int main(void) {
  RUN_TEST(test_worked_example);
  RUN_TEST(test_window_group);
  TEST_SUMMARY();
}
