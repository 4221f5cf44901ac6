/* replay_common.c - pieces shared by the sequential and the timed replay. */
#include "replay_common.h"

#include "util.h"

uint64_t replay_default_blocks(const trace* t, uint32_t block_size) {
  uint64_t sum = 0, biggest = 0;
  size_t r;
  for (r = 0; r < t->num_reqs; r++) {
    uint64_t b = (t->reqs[r].input_length + t->reqs[r].output_length + block_size - 1) / block_size;
    sum += b;
    if (b > biggest) biggest = b;
  }
  if (sum > REPLAY_MAX_DEFAULT_BLOCKS) sum = REPLAY_MAX_DEFAULT_BLOCKS;
  if (sum < biggest) sum = biggest;
  if (sum > (1u << 30)) sum = 1u << 30;
  return sum ? sum : 1;
}

kvb_manager* replay_create_manager(const replay_opts* o, uint64_t num_blocks) {
  kvb_config cfg;
  kvb_manager* m = NULL;
  kvb_status s;
  kvb_config_init(&cfg);
  cfg.block_size = o->block_size;
  cfg.num_blocks = (uint32_t)num_blocks;
  if (o->timed) {
    cfg.num_host_blocks = o->preempt_swap ? (uint32_t)o->num_host_blocks : 0;
    cfg.watermark = (float)o->watermark;
  }
  s = kvb_manager_create(&cfg, &m);
  if (s != KVB_OK) {
    lib_error("kvb_manager_create", s);
    return NULL;
  }
  return m;
}

void replay_note(const replay_opts* o, const trace* t, size_t r, const char* why, replay_notes* n) {
  const trace_request* q = &t->reqs[r];
  if (o->quiet) return;
  if (n->count < REPLAY_NOTES_SHOWN)
    fprintf(stderr, "kvblock: %s:%llu: request of %llu prompt + %llu output tokens %s\n", o->path,
            (unsigned long long)q->line, (unsigned long long)q->input_length,
            (unsigned long long)q->output_length, why);
  n->count++;
}

void replay_notes_finish(const replay_opts* o, const replay_notes* n) {
  if (o->quiet || n->count <= REPLAY_NOTES_SHOWN) return;
  fprintf(stderr, "kvblock: ... and %llu more requests skipped or cut short (all counted in the report)\n",
          (unsigned long long)(n->count - REPLAY_NOTES_SHOWN));
}

void replay_call_error(const char* what, kvb_status s, const trace* t, size_t r) {
  char buf[96];
  snprintf(buf, sizeof buf, "%s (request on line %llu)", what, (unsigned long long)t->reqs[r].line);
  lib_error(buf, s);
}
