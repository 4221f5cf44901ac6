/* replay_common.c - pieces shared by the sequential and the timed replay. */
#include "replay_common.h"

#include <stdlib.h>
#include <string.h>

#include "report.h"
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
  if (o->host_cache) {
    cfg.num_host_blocks = (uint32_t)o->num_host_blocks;
    cfg.flags |= KVB_CONFIG_HOST_CACHE;
    cfg.host_cache_twin_percent = (uint32_t)o->host_twin_percent;
  }
  cfg.groups = o->num_groups ? o->groups : NULL;
  cfg.num_groups = o->num_groups;
  s = kvb_manager_create(&cfg, &m);
  if (s != KVB_OK) {
    lib_error("kvb_manager_create", s);
    return NULL;
  }
  return m;
}

int replay_parse_groups(const char* val, replay_opts* o) {
  const char* p = val;
  o->num_groups = 0;
  while (*p) {
    kvb_group_spec* g;
    char* end;
    if (o->num_groups == REPLAY_MAX_GROUPS) {
      tool_error("replay: --groups: at most %d groups", REPLAY_MAX_GROUPS);
      return 0;
    }
    g = &o->groups[o->num_groups++];
    kvb_group_spec_init(g);
    if (!strncmp(p, "full", 4) && (p[4] == ',' || p[4] == '\0')) {
      p += 4;
    } else if (!strncmp(p, "window:", 7)) {
      unsigned long w, s = 0;
      w = strtoul(p + 7, &end, 10);
      if (end == p + 7 || w == 0 || w > 0xffffffffUL) {
        tool_error("replay: --groups '%s': window:W needs a window of 1 or more tokens", val);
        return 0;
      }
      p = end;
      if (*p == ':') {
        s = strtoul(p + 1, &end, 10);
        if (end == p + 1 || s > 0xffffffffUL) {
          tool_error("replay: --groups '%s': window:W:SINKS needs a sink count", val);
          return 0;
        }
        p = end;
      }
      g->kind = KVB_GROUP_WINDOW;
      g->window_tokens = (uint32_t)w;
      g->sink_tokens = (uint32_t)s;
    } else {
      tool_error("replay: --groups '%s': each group is full or window:W[:SINKS]", val);
      return 0;
    }
    if (*p == ',') {
      p++;
      if (!*p) {
        tool_error("replay: --groups '%s' ends with a comma", val);
        return 0;
      }
    } else if (*p) {
      tool_error("replay: --groups '%s': unexpected '%c'", val, *p);
      return 0;
    }
  }
  if (o->num_groups == 0) {
    tool_error("replay: --groups is empty");
    return 0;
  }
  return 1;
}

void replay_host_init(replay_host* h, const replay_opts* o, uint64_t num_blocks) {
  h->off_cap = o->host_cache ? (size_t)o->num_host_blocks : 0;
  h->load_cap = o->host_cache ? (size_t)num_blocks : 0;
  h->off = (int32_t*)xmalloc((2 * h->off_cap + 2) * sizeof(int32_t));
  h->load = (int32_t*)xmalloc((2 * h->load_cap + 2) * sizeof(int32_t));
  h->moved = 0;
  h->store = o->store_blocks != 0;
}

void replay_host_free(replay_host* h) {
  free(h->off);
  free(h->load);
}

kvb_status replay_host_drain(kvb_manager* m, replay_host* h) {
  size_t no = 0, nl = 0;
  kvb_status s;
  if (h->off_cap == 0) return KVB_OK;
  if (h->store && (s = kvb_store_poll(m, NULL)) != KVB_OK) return s;
  s = kvb_drain_host_transfers(m, h->off, h->off_cap, &no, h->load, h->load_cap, &nl);
  if (s == KVB_OK) h->moved += no + nl;
  return s;
}

void replay_host_report(report* rep, const replay_opts* o, const kvb_stats* st) {
  const double gb = (double)o->kv_bytes_per_block / 1e9;
  if (!o->host_cache) return;
  report_u64(rep, "num_host_blocks", "host cache blocks", o->num_host_blocks, NULL);
  report_u64(rep, "host_twin_percent", "  twin budget", o->host_twin_percent, "% of host blocks");
  report_u64(rep, "device_hit_tokens", "  device hit tokens", st->device_hit_tokens, NULL);
  report_u64(rep, "host_hit_tokens", "  host hit tokens", st->host_hit_tokens, "(loaded back)");
  report_u64(rep, "offloaded_blocks", "  offloaded blocks", st->offloaded_blocks, "(device -> host)");
  report_u64(rep, "loaded_blocks", "  loaded blocks", st->loaded_blocks, "(host -> device)");
  report_u64(rep, "host_evictions", "  host evictions", st->host_evictions, "blocks");
  if (o->store_blocks) {
    report_u64(rep, "store_blocks", "store blocks", o->store_blocks,
               o->store_exclusive ? "(model store, keys only, exclusive)" : "(model store, keys only)");
    report_u64(rep, "store_hit_tokens", "  store hit tokens", st->store_hit_tokens, NULL);
    report_u64(rep, "store_put_blocks", "  put blocks", st->store_put_blocks, "(host -> store)");
    report_u64(rep, "store_get_blocks", "  got blocks", st->store_get_blocks, "(store -> host)");
    report_u64(rep, "store_get_failures", "  failed gets", st->store_get_failures, NULL);
  }
  report_u64(rep, "kv_bytes_per_block", "  KV bytes per block", o->kv_bytes_per_block, NULL);
  report_f64(rep, "offloaded_gb", "  offloaded", (double)st->offloaded_blocks * gb, 1, "GB");
  report_f64(rep, "loaded_gb", "  loaded", (double)st->loaded_blocks * gb, 1, "GB");
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
