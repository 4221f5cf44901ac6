/* sequential.c - `kvblock replay` (default mode): each request in file order is allocated, its
   uncached prompt committed, each generated token appended and committed, then freed. The reference
   replay whose figures traces/README.md lists. */
#include "sequential.h"

#include <stdlib.h>

#include "progress.h"
#include "replay_store.h"
#include "report.h"
#include "util.h"

/* Blocks each KV cache group holds for sequence id now; raises peak[g]. */
static kvb_status group_peaks(kvb_manager* m, int64_t id, const replay_opts* o, int32_t* tab, size_t cap,
                              uint64_t* peak) {
  size_t g, i, len;
  for (g = 0; g < o->num_groups; g++) {
    uint64_t held = 0;
    kvb_status s = kvb_seq_block_table_group(m, id, (uint32_t)g, tab, cap, &len);
    if (s != KVB_OK) return s;
    for (i = 0; i < len; i++) held += tab[i] >= 0;
    if (held > peak[g]) peak[g] = held;
  }
  return KVB_OK;
}

static int fail_call(const char* what, kvb_status s, const trace* t, size_t r) {
  replay_call_error(what, s, t, r);
  return EXIT_FAIL;
}

int replay_sequential(const replay_opts* o, const trace* t, uint64_t num_blocks, double load_s) {
  kvb_manager* m = replay_create_manager(o, num_blocks);
  int64_t* tokens;
  uint64_t prompt = 0, cached = 0, generated = 0, blocks = 0, skipped = 0, cut = 0, replayed = 0;
  replay_notes notes = {0};
  uint64_t max_prompt = 0, max_total = 0;
  uint64_t peak[REPLAY_MAX_GROUPS] = {0}; /* --groups: most blocks a group held at once */
  int32_t* tab;
  size_t tab_cap;
  size_t r;
  double t0, elapsed, expand_s = 0, manager_s;
  kvb_stats st;
  kvb_status s;
  progress pr;
  report rep;
  char title[512];
  int rc = EXIT_OK;
  replay_host host;
  replay_store* store = NULL;
  if (!m) return EXIT_FAIL;
  if (o->store_blocks && !(store = replay_store_attach(m, o->store_blocks, o->block_size, o->store_exclusive))) {
    kvb_manager_destroy(m);
    return EXIT_FAIL;
  }
  replay_host_init(&host, o, num_blocks);
  for (r = 0; r < t->num_reqs; r++) {
    if (t->reqs[r].input_length > max_prompt) max_prompt = t->reqs[r].input_length;
    if (t->reqs[r].input_length + t->reqs[r].output_length > max_total)
      max_total = t->reqs[r].input_length + t->reqs[r].output_length;
  }
  tab_cap = (size_t)((max_total + o->block_size - 1) / o->block_size) + 1;
  tab = (int32_t*)xmalloc(tab_cap * sizeof *tab);
  tokens = (int64_t*)xmalloc((size_t)(max_prompt ? max_prompt : 1) * sizeof *tokens);
  progress_init(&pr, "replay", t->num_reqs, o->quiet ? 0 : o->progress);
  t0 = now_s();
  for (r = 0; r < t->num_reqs; r++) {
    const trace_request* q = &t->reqs[r];
    int64_t id = (int64_t)r;
    size_t hit = 0;
    uint64_t k, n = q->input_length;
    double e0 = now_s();
    trace_prompt_tokens(t, r, tokens); /* timed apart: expanding hash ids is the tool's work, not the manager's */
    expand_s += now_s() - e0;
    s = kvb_seq_allocate(m, id, tokens, (size_t)n, &hit);
    if (s == KVB_ERR_OUT_OF_BLOCKS) {
      skipped++;
      replay_note(o, t, r, "does not fit in the pool: skipped", &notes);
      continue;
    }
    if (s != KVB_OK) {
      rc = fail_call("kvb_seq_allocate", s, t, r);
      break;
    }
    if ((s = replay_host_drain(m, &host)) != KVB_OK) { /* offloads and loads run before the step */
      rc = fail_call("kvb_drain_host_transfers", s, t, r);
      break;
    }
    replayed++;
    prompt += n;
    cached += hit;
    /* Peaks (with --groups): after allocation (the whole prompt held for its prefill), after the prompt's
       commit (window groups release), and at the end of decoding (full groups at their largest). */
    if (o->num_groups && (s = group_peaks(m, id, o, tab, tab_cap, peak)) != KVB_OK) {
      rc = fail_call("kvb_seq_block_table_group", s, t, r);
      break;
    }
    if (n > hit && (s = kvb_seq_commit(m, id, (size_t)(n - hit))) != KVB_OK) {
      rc = fail_call("kvb_seq_commit", s, t, r);
      break;
    }
    if (o->num_groups && (s = group_peaks(m, id, o, tab, tab_cap, peak)) != KVB_OK) {
      rc = fail_call("kvb_seq_block_table_group", s, t, r);
      break;
    }
    for (k = 0; k < q->output_length; k++) {
      int64_t tok = trace_output_token(t, r, k);
      s = kvb_seq_append(m, id, &tok, 1);
      if (s == KVB_ERR_OUT_OF_BLOCKS) {
        cut++;
        replay_note(o, t, r, "ran out of blocks while decoding: generation cut short", &notes);
        break;
      }
      if (s != KVB_OK || (s = replay_host_drain(m, &host)) != KVB_OK || (s = kvb_seq_commit(m, id, 1)) != KVB_OK) {
        rc = fail_call("kvb_seq_append / kvb_drain_host_transfers / kvb_seq_commit", s, t, r);
        break;
      }
      generated++;
    }
    if (rc != EXIT_OK) break;
    if (o->num_groups && (s = group_peaks(m, id, o, tab, tab_cap, peak)) != KVB_OK) {
      rc = fail_call("kvb_seq_block_table_group", s, t, r);
      break;
    }
    blocks += (n + k + o->block_size - 1) / o->block_size;
    if ((s = kvb_seq_free(m, id)) != KVB_OK) {
      rc = fail_call("kvb_seq_free", s, t, r);
      break;
    }
    if ((r & 63) == 0) progress_update(&pr, r, NULL);
  }
  elapsed = now_s() - t0;
  manager_s = elapsed > expand_s ? elapsed - expand_s : 0.0;
  progress_finish(&pr);
  replay_notes_finish(o, &notes);
  free(tokens);
  free(tab);
  replay_host_free(&host);
  if (rc == EXIT_OK && o->check && (s = kvb_check_invariants(m)) != KVB_OK) {
    lib_error("kvb_check_invariants", s);
    rc = EXIT_FAIL;
  }
  kvb_stats_init(&st);
  if (rc == EXIT_OK && (s = kvb_get_stats(m, &st)) != KVB_OK) {
    lib_error("kvb_get_stats", s);
    rc = EXIT_FAIL;
  }
  replay_store_free(store, m);
  kvb_manager_destroy(m);
  if (rc != EXIT_OK) return rc;
  if (st.hit_tokens != cached)
    tool_error("warning: kvb_get_stats reports %llu hit tokens, the replay counted %llu",
               (unsigned long long)st.hit_tokens, (unsigned long long)cached);

  snprintf(title, sizeof title, "kvblock replay: %s", o->path);
  report_begin(&rep, stdout, o->json, title);
  report_str(&rep, "trace", "trace", o->path);
  report_str(&rep, "format", "format",
             t->mixed_formats ? "mixed" : t->num_reqs ? trace_format_name(t->reqs[0].format) : "none");
  report_str(&rep, "mode", "mode", "sequential");
  report_u64(&rep, "block_size", "block size", o->block_size, "tokens");
  report_u64(&rep, "num_blocks", "blocks", num_blocks, o->num_blocks ? NULL : "(default)");
  report_u64(&rep, "trace_requests", "requests in trace", t->num_reqs, NULL);
  report_u64(&rep, "requests", "requests replayed", replayed, NULL);
  report_u64(&rep, "skipped_requests", "skipped (out of blocks)", skipped, NULL);
  report_u64(&rep, "decode_cut_requests", "cut short in decode", cut, "(replayed, generation stopped early)");
  report_u64(&rep, "prompt_tokens", "prompt tokens", prompt, NULL);
  report_u64(&rep, "cached_tokens", "cached prompt tokens", cached, NULL);
  report_ratio(&rep, "hit_ratio", "hit ratio", prompt ? (double)cached / (double)prompt : 0.0);
  report_u64(&rep, "generated_tokens", "generated tokens", generated, NULL);
  report_u64(&rep, "evictions", "evictions", st.evictions, "blocks");
  replay_host_report(&rep, o, &st);
  {
    size_t g;
    for (g = 0; g < o->num_groups; g++) {
      char key[32], label[32], unit[64];
      snprintf(key, sizeof key, "peak_blocks_group%zu", g);
      snprintf(label, sizeof label, "peak blocks, group %zu", g);
      if (o->groups[g].kind == KVB_GROUP_WINDOW)
        snprintf(unit, sizeof unit, "(window %u, sinks %u)", o->groups[g].window_tokens, o->groups[g].sink_tokens);
      else
        snprintf(unit, sizeof unit, "(full)");
      report_u64(&rep, key, label, peak[g], unit);
    }
  }
  report_u64(&rep, "blocks", "blocks handled", blocks, NULL);
  report_f64(&rep, "load_s", "trace load", load_s, 3, "s");
  report_f64(&rep, "elapsed_s", "elapsed", elapsed, 3, "s (replay loop)");
  report_f64(&rep, "expand_s", "  trace expansion", expand_s, 3, "s (hash ids -> token ids)");
  report_f64(&rep, "manager_s", "  manager", manager_s, 3, "s (the rest: libkvblock calls)");
  report_f64(&rep, "blocks_per_s", "blocks/s", manager_s > 0 ? (double)blocks / manager_s : 0.0, 0,
             "(manager time)");
  report_f64(&rep, "tokens_per_s", "tokens/s", manager_s > 0 ? (double)(prompt + generated) / manager_s : 0.0, 0,
             "(manager time)");
  report_f64(&rep, "ns_per_block", "ns/block", blocks ? manager_s * 1e9 / (double)blocks : 0.0, 1,
             "(manager time)");
  report_end(&rep);
  return EXIT_OK;
}
