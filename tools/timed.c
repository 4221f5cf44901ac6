/* timed.c - `kvblock replay --mode timed`: requests arrive on a simulated clock (trace timestamps /
   --speed) and run under a continuous-batching scheduler model (max running sequences, per-step token
   budget with chunked prefill, one decode token per running sequence per step, preemption by
   recompute or swap when blocks run out). The step time is a linear model (see replay --help). */
#include <stdlib.h>
#include <string.h>

#include "chart.h"
#include "progress.h"
#include "timed.h"
#include "report.h"
#include "util.h"

enum { S_PENDING, S_WAITING, S_RUNNING, S_SWAPPED, S_DONE, S_SKIPPED };

typedef struct tseq {
  int state;
  int first_done;     /* first output token produced (TTFT recorded) */
  int ever_admitted;
  uint64_t ntok;      /* tokens in the sequence: prompt + appended outputs */
  uint64_t computed;  /* committed tokens (cache hits included) */
  uint64_t gen;       /* outputs appended */
  double arrival;     /* s */
  double ttft;        /* s */
} tseq;

typedef struct sim {
  const replay_opts* o;
  const trace* t;
  kvb_manager* m;
  tseq* s;
  size_t n;
  size_t *running, nrun;           /* admission order */
  size_t *waitq, wq_head, wq_len;  /* ring deque of waiting requests (arrived) */
  size_t *swapped, nswap;          /* FIFO */
  int64_t* tokens;                 /* scratch: prompt + generated tokens of one request */
  size_t tokens_req;               /* whose tokens are in it (SIZE_MAX = none) ... */
  uint64_t tokens_len;             /* ... and how many */
  int32_t* pairs;                  /* scratch: swap pairs */
  size_t pairs_cap;
  double mgr_s;                    /* time inside libkvblock calls */
  replay_host host;                /* --host-cache transfers: blocks moved this step */
  double transfer_s;               /* simulated time charged to them */
  uint64_t preempt_recompute, swap_outs, swap_ins, skipped, cut;
  replay_notes notes;
  uint64_t first_query, first_hit; /* prompt tokens and hits at first admission */
  uint64_t prefill_tokens, decode_tokens, done;
  int failed;
} sim;

static void fail_lib(sim* S, const char* what, kvb_status st, size_t r) {
  replay_call_error(what, st, S->t, r);
  S->failed = 1;
}

static void wq_push_back(sim* S, size_t r) { S->waitq[(S->wq_head + S->wq_len++) % S->n] = r; }
static void wq_push_front(sim* S, size_t r) {
  S->wq_head = (S->wq_head + S->n - 1) % S->n;
  S->waitq[S->wq_head] = r;
  S->wq_len++;
}
static size_t wq_front(const sim* S) { return S->waitq[S->wq_head]; }
static void wq_pop(sim* S) {
  S->wq_head = (S->wq_head + 1) % S->n;
  S->wq_len--;
}

static void remove_running(sim* S, size_t pos) {
  memmove(S->running + pos, S->running + pos + 1, (S->nrun - pos - 1) * sizeof *S->running);
  S->nrun--;
}

/* Drop a request that can never run (done, counted, noted on stderr). */
static void drop(sim* S, size_t r, int cut) {
  double t0 = now_s();
  kvb_status st = kvb_seq_free(S->m, (int64_t)r);
  S->mgr_s += now_s() - t0;
  if (st != KVB_OK && st != KVB_ERR_NO_SUCH_SEQUENCE) fail_lib(S, "kvb_seq_free", st, r);
  S->s[r].state = S_SKIPPED;
  if (cut) S->cut++;
  else S->skipped++;
  S->done++;
  replay_note(S->o, S->t, r,
                      cut ? "cannot finish even alone in the pool: generation cut short"
                          : "does not fit in the pool: skipped",
                      &S->notes);
}

/* Preempt the last running sequence (vLLM's victim): swap it out when asked and possible, otherwise
   free it for recomputation at the front of the waiting queue. */
static void preempt_last(sim* S) {
  size_t r = S->running[S->nrun - 1];
  tseq* q = &S->s[r];
  kvb_status st;
  double t0 = now_s();
  remove_running(S, S->nrun - 1);
  if (S->o->preempt_swap) {
    kvb_availability a = KVB_AVAIL_NEVER;
    size_t np = 0;
    if (kvb_seq_can_swap_out(S->m, (int64_t)r, &a) == KVB_OK && a == KVB_AVAIL_OK) {
      st = kvb_seq_swap_out(S->m, (int64_t)r, S->pairs, S->pairs_cap, &np);
      S->mgr_s += now_s() - t0;
      if (st != KVB_OK) {
        fail_lib(S, "kvb_seq_swap_out", st, r);
        return;
      }
      q->state = S_SWAPPED;
      S->swapped[S->nswap++] = r;
      S->swap_outs++;
      return;
    }
  }
  st = kvb_seq_free(S->m, (int64_t)r);
  S->mgr_s += now_s() - t0;
  if (st != KVB_OK) {
    fail_lib(S, "kvb_seq_free", st, r);
    return;
  }
  q->state = S_WAITING;
  q->computed = 0;
  wq_push_front(S, r);
  S->preempt_recompute++;
}

/* Allocate a waiting request (prompt + outputs generated before a preemption). 1 admitted, 0 no room. */
static int admit(sim* S, size_t r) {
  tseq* q = &S->s[r];
  const trace_request* tr = &S->t->reqs[r];
  uint64_t k;
  size_t cached = 0;
  kvb_status st;
  double t0;
  if (S->tokens_req != r || S->tokens_len != q->ntok) { /* a waiting head is retried every step */
    trace_prompt_tokens(S->t, r, S->tokens);
    for (k = 0; k < q->gen; k++) S->tokens[tr->input_length + k] = trace_output_token(S->t, r, k);
    S->tokens_req = r;
    S->tokens_len = q->ntok;
  }
  t0 = now_s();
  st = kvb_seq_allocate(S->m, (int64_t)r, S->tokens, (size_t)q->ntok, &cached);
  if (st == KVB_OK) st = replay_host_drain(S->m, &S->host); /* its loads run before the step */
  S->mgr_s += now_s() - t0;
  if (st == KVB_ERR_OUT_OF_BLOCKS) return 0;
  if (st != KVB_OK) {
    fail_lib(S, "kvb_seq_allocate", st, r);
    return 0;
  }
  if (!q->ever_admitted) {
    q->ever_admitted = 1;
    S->first_query += tr->input_length;
    S->first_hit += cached;
  }
  q->computed = cached;
  q->state = S_RUNNING;
  S->running[S->nrun++] = r;
  return 1;
}

/* Commit up to *budget prompt tokens of a running sequence in prefill. Returns tokens committed. */
static uint64_t prefill_chunk(sim* S, size_t r, uint64_t* budget) {
  tseq* q = &S->s[r];
  uint64_t chunk = q->ntok - q->computed;
  kvb_status st;
  double t0;
  if (chunk > *budget) chunk = *budget;
  if (!chunk) return 0;
  t0 = now_s();
  st = kvb_seq_commit(S->m, (int64_t)r, (size_t)chunk);
  S->mgr_s += now_s() - t0;
  if (st != KVB_OK) {
    fail_lib(S, "kvb_seq_commit", st, r);
    return 0;
  }
  q->computed += chunk;
  *budget -= chunk;
  S->prefill_tokens += chunk;
  return chunk;
}

/* KV blocks a sequence reads in a step. */
static uint64_t seq_blocks(const sim* S, size_t r) {
  return (S->s[r].ntok + S->o->block_size - 1) / S->o->block_size;
}

int replay_timed(const replay_opts* o, const trace* t, uint64_t num_blocks, double load_s) {
  sim S;
  size_t* order;
  size_t i, ar = 0, max_tok = 1;
  double clock = 0, used_area = 0, peak_used = 0, wall0, cpu0;
  uint64_t steps = 0, generated = 0;
  chart ch;
  progress pr;
  kvb_stats st;
  report rep;
  char title[512];
  int rc = EXIT_OK;
  memset(&S, 0, sizeof S);
  if (o->preempt_swap && o->num_host_blocks == 0)
    tool_error("warning: --preempt swap with --num-host-blocks 0: every preemption falls back to recompute");
  S.o = o;
  S.t = t;
  S.n = t->num_reqs;
  if (!(S.m = replay_create_manager(o, num_blocks))) return EXIT_FAIL;
  replay_host_init(&S.host, o, num_blocks);
  S.s = (tseq*)xcalloc(S.n ? S.n : 1, sizeof *S.s);
  S.running = (size_t*)xmalloc((S.n ? S.n : 1) * sizeof(size_t));
  S.waitq = (size_t*)xmalloc((S.n ? S.n : 1) * sizeof(size_t));
  S.swapped = (size_t*)xmalloc((S.n ? S.n : 1) * sizeof(size_t));
  order = (size_t*)xmalloc((S.n ? S.n : 1) * sizeof(size_t));
  for (i = 0; i < S.n; i++) {
    const trace_request* q = &t->reqs[i];
    S.s[i].arrival = q->timestamp_ms / 1000.0 / o->speed;
    S.s[i].ntok = q->input_length;
    if (q->input_length + q->output_length > max_tok) max_tok = q->input_length + q->output_length;
    order[i] = i;
  }
  /* Arrival order: stable insertion by timestamp (traces are usually sorted already). */
  for (i = 1; i < S.n; i++) {
    size_t v = order[i], j = i;
    while (j > 0 && S.s[order[j - 1]].arrival > S.s[v].arrival) {
      order[j] = order[j - 1];
      j--;
    }
    order[j] = v;
  }
  S.tokens = (int64_t*)xmalloc(max_tok * sizeof *S.tokens);
  S.tokens_req = (size_t)-1;
  /* A swap moves the held blocks of every KV cache group. */
  S.pairs_cap = ((max_tok + o->block_size - 1) / o->block_size + 1) * (o->num_groups ? o->num_groups : 1);
  S.pairs = (int32_t*)xmalloc(2 * S.pairs_cap * sizeof *S.pairs);
  chart_init(&ch, (size_t)o->svg_points);
  progress_init(&pr, "timed replay", S.n, o->quiet ? 0 : o->progress);
  kvb_stats_init(&st);
  wall0 = now_s();
  cpu0 = cpu_s();

  while (S.done < S.n && !S.failed) {
    uint64_t budget = o->max_batch_tokens, prefill0 = S.prefill_tokens, decode0 = S.decode_tokens, kv = 0;
    double dt, t0;
    while (ar < S.n && S.s[order[ar]].arrival <= clock) {
      S.s[order[ar]].state = S_WAITING;
      wq_push_back(&S, order[ar++]);
    }
    if (S.nrun == 0 && S.nswap == 0 && S.wq_len == 0) {
      clock = S.s[order[ar]].arrival; /* idle: jump to the next arrival */
      continue;
    }
    /* 1. Swapped sequences come back first (FIFO), while they fit above the watermark. */
    while (S.nswap > 0 && S.nrun < o->max_seqs) {
      size_t r = S.swapped[0], np = 0;
      kvb_availability a = KVB_AVAIL_NEVER;
      kvb_status s2;
      t0 = now_s();
      s2 = kvb_seq_can_swap_in(S.m, (int64_t)r, &a);
      if (s2 == KVB_OK && a == KVB_AVAIL_OK) s2 = kvb_seq_swap_in(S.m, (int64_t)r, S.pairs, S.pairs_cap, &np);
      if (s2 == KVB_OK && a == KVB_AVAIL_OK) s2 = replay_host_drain(S.m, &S.host);
      S.mgr_s += now_s() - t0;
      if (s2 != KVB_OK) {
        fail_lib(&S, "kvb_seq_swap_in", s2, r);
        break;
      }
      if (a != KVB_AVAIL_OK) break;
      memmove(S.swapped, S.swapped + 1, (S.nswap - 1) * sizeof *S.swapped);
      S.nswap--;
      S.s[r].state = S_RUNNING;
      S.running[S.nrun++] = r;
      S.swap_ins++;
    }
    /* 2. One decode token per decoding sequence, preempting from the back when blocks run out. */
    for (i = 0; i < S.nrun && budget > 0 && !S.failed; i++) {
      size_t r = S.running[i];
      tseq* q = &S.s[r];
      int64_t tok;
      kvb_status s2;
      if (q->computed < q->ntok || !q->first_done || q->gen >= t->reqs[r].output_length) continue;
      tok = trace_output_token(t, r, q->gen);
      for (;;) {
        t0 = now_s();
        s2 = kvb_seq_append(S.m, (int64_t)r, &tok, 1);
        if (s2 == KVB_OK) s2 = replay_host_drain(S.m, &S.host);
        if (s2 == KVB_OK) s2 = kvb_seq_commit(S.m, (int64_t)r, 1);
        S.mgr_s += now_s() - t0;
        if (s2 != KVB_ERR_OUT_OF_BLOCKS) break;
        if (S.nrun == 1) { /* alone and still no room: it can never finish */
          remove_running(&S, 0);
          drop(&S, r, 1);
          i--;
          break;
        }
        preempt_last(&S);
        if (S.failed || i >= S.nrun) break; /* it was the victim itself */
      }
      if (S.failed) break;
      if (s2 == KVB_ERR_OUT_OF_BLOCKS) continue;
      if (s2 != KVB_OK) {
        fail_lib(&S, "kvb_seq_append/commit", s2, r);
        break;
      }
      if (i >= S.nrun || S.running[i] != r) continue;
      q->gen++;
      q->ntok++;
      q->computed++;
      generated++;
      S.decode_tokens++;
      budget--;
      kv += seq_blocks(&S, r);
    }
    /* 3. Prefill chunks for running sequences still in prefill, then new admissions. */
    for (i = 0; i < S.nrun && budget > 0 && !S.failed; i++) {
      size_t r = S.running[i];
      if (S.s[r].computed < S.s[r].ntok && prefill_chunk(&S, r, &budget) > 0) kv += seq_blocks(&S, r);
    }
    while (S.wq_len > 0 && S.nrun < o->max_seqs && budget > 0 && !S.failed) {
      size_t r = wq_front(&S);
      if (!admit(&S, r)) {
        if (S.failed) break;
        if (S.nrun == 0 && S.nswap == 0) { /* nothing else holds blocks: it never fits */
          wq_pop(&S);
          drop(&S, r, 0);
          continue;
        }
        break; /* wait for blocks (admission never preempts) */
      }
      wq_pop(&S);
      if (prefill_chunk(&S, r, &budget) > 0) kv += seq_blocks(&S, r);
    }
    if (S.failed) break;
    if (S.prefill_tokens == prefill0 && S.decode_tokens == decode0) {
      /* Nothing ran. Wait for an arrival if one is due; otherwise the rest can never be scheduled. */
      if (ar < S.n && S.nrun == 0) {
        clock = S.s[order[ar]].arrival > clock ? S.s[order[ar]].arrival : clock;
        continue;
      }
      if (S.nrun == 0) {
        while (S.nswap > 0) drop(&S, S.swapped[--S.nswap], 1);
        while (S.wq_len > 0) {
          size_t r = wq_front(&S);
          wq_pop(&S);
          drop(&S, r, 0);
        }
        continue;
      }
    }
    /* 4. Advance the simulated clock by the modelled step time. */
    dt = (o->step_base_us + o->step_prefill_us * (double)(S.prefill_tokens - prefill0) +
          o->step_decode_us * (double)(S.decode_tokens - decode0) + o->step_kv_us * (double)kv) * 1e-6;
    if (S.host.moved) { /* host-cache offloads and loads at --pcie-gbps, before the forward pass */
      double move = (double)S.host.moved * (double)o->kv_bytes_per_block / (o->pcie_gbps * 1e9);
      dt += move;
      S.transfer_s += move;
      S.host.moved = 0;
    }
    clock += dt;
    steps++;
    /* 5. First tokens and completions at the end of the step. */
    for (i = 0; i < S.nrun; i++) {
      size_t r = S.running[i];
      tseq* q = &S.s[r];
      if (q->computed < q->ntok) continue;
      if (!q->first_done) {
        q->first_done = 1;
        q->ttft = clock - q->arrival;
      }
      if (q->gen >= t->reqs[r].output_length) {
        kvb_status s2;
        t0 = now_s();
        s2 = kvb_seq_free(S.m, (int64_t)r);
        S.mgr_s += now_s() - t0;
        if (s2 != KVB_OK) {
          fail_lib(&S, "kvb_seq_free", s2, r);
          break;
        }
        q->state = S_DONE;
        S.done++;
        remove_running(&S, i);
        i--;
      }
    }
    if (o->check) {
      kvb_status s2 = kvb_check_invariants(S.m);
      if (s2 != KVB_OK) {
        lib_error("kvb_check_invariants", s2);
        S.failed = 1;
        break;
      }
    }
    kvb_get_stats(S.m, &st);
    used_area += (double)st.used_blocks * dt;
    if ((double)st.used_blocks > peak_used) peak_used = (double)st.used_blocks;
    chart_add(&ch, clock, (double)st.used_blocks, (double)st.cached_free_blocks,
              st.query_tokens ? (double)st.hit_tokens / (double)st.query_tokens : 0.0);
    if (pr.enabled) {
      char extra[64];
      snprintf(extra, sizeof extra, "simulated %.1f s, %zu running", clock, S.nrun);
      progress_update(&pr, S.done, extra);
    }
  }
  progress_finish(&pr);
  replay_notes_finish(o, &S.notes);
  {
    double wall = now_s() - wall0, cpu = cpu_s() - cpu0;
    double* ttft = (double*)xmalloc((S.n ? S.n : 1) * sizeof(double));
    size_t nt = 0;
    if (S.failed) rc = EXIT_FAIL;
    if (rc == EXIT_OK && kvb_get_stats(S.m, &st) != KVB_OK) rc = EXIT_FAIL;
    for (i = 0; i < S.n; i++)
      if (S.s[i].first_done) ttft[nt++] = S.s[i].ttft * 1000.0;
    qsort(ttft, nt, sizeof *ttft, cmp_double);
    if (rc == EXIT_OK && o->svg) {
      /* The title tells two runs apart: pool, preemption mode and what preemption did. */
      char ct[384], nb[32], nh[32];
      fmt_thousands(num_blocks, nb);
      fmt_thousands(o->num_host_blocks, nh);
      if (o->preempt_swap)
        snprintf(ct, sizeof ct,
                 "kvblock timed replay: %.120s, %s blocks, preempt swap (%s host blocks): %llu swap outs, "
                 "%llu recomputes",
                 o->path, nb, nh, (unsigned long long)S.swap_outs, (unsigned long long)S.preempt_recompute);
      else
        snprintf(ct, sizeof ct, "kvblock timed replay: %.120s, %s blocks, preempt recompute: %llu preemptions",
                 o->path, nb, (unsigned long long)S.preempt_recompute);
      if (!chart_write_svg(&ch, o->svg, ct, (double)num_blocks, o->block_size)) rc = EXIT_FAIL;
    }
    if (rc == EXIT_OK) {
      uint64_t finished = S.done - S.skipped - S.cut;
      snprintf(title, sizeof title, "kvblock replay --mode timed: %s", o->path);
      report_begin(&rep, stdout, o->json, title);
      report_str(&rep, "trace", "trace", o->path);
      report_str(&rep, "mode", "mode", "timed");
      report_u64(&rep, "block_size", "block size", o->block_size, "tokens");
      report_u64(&rep, "num_blocks", "blocks", num_blocks, o->num_blocks ? NULL : "(default)");
      report_str(&rep, "preempt", "preemption", o->preempt_swap ? "swap" : "recompute");
      report_u64(&rep, "num_host_blocks", "host blocks", o->preempt_swap ? o->num_host_blocks : 0, NULL);
      report_f64(&rep, "speed", "speed", o->speed, 3, "x");
      report_u64(&rep, "max_seqs", "max running seqs", o->max_seqs, NULL);
      report_u64(&rep, "max_batch_tokens", "tokens per step", o->max_batch_tokens, NULL);
      report_f64(&rep, "watermark", "watermark", o->watermark, 3, NULL);
      report_u64(&rep, "trace_requests", "requests in trace", S.n, NULL);
      report_u64(&rep, "requests", "requests finished", finished, NULL);
      report_u64(&rep, "skipped_requests", "skipped (never fit)", S.skipped, NULL);
      report_u64(&rep, "decode_cut_requests", "cut short in decode", S.cut, "(could not finish even alone)");
      report_u64(&rep, "prompt_tokens", "prompt tokens", S.first_query, "(first admissions)");
      report_u64(&rep, "cached_tokens", "cached prompt tokens", S.first_hit, "(first admissions)");
      report_ratio(&rep, "hit_ratio", "hit ratio", S.first_query ? (double)S.first_hit / (double)S.first_query : 0);
      report_ratio(&rep, "hit_ratio_all", "hit ratio, all lookups",
                   st.query_tokens ? (double)st.hit_tokens / (double)st.query_tokens : 0.0);
      report_u64(&rep, "prefill_tokens", "prefill tokens computed", S.prefill_tokens, NULL);
      report_u64(&rep, "generated_tokens", "generated tokens", generated, NULL);
      report_u64(&rep, "steps", "steps", steps, NULL);
      report_f64(&rep, "simulated_s", "simulated time", clock, 3, "s");
      report_f64(&rep, "tokens_per_s", "simulated tokens/s",
                 clock > 0 ? (double)(S.prefill_tokens + S.decode_tokens) / clock : 0.0, 0, "(prefill + decode)");
      report_f64(&rep, "output_tokens_per_s", "simulated output tok/s", clock > 0 ? (double)generated / clock : 0.0,
                 0, NULL);
      report_u64(&rep, "preemptions", "preemptions", S.preempt_recompute + S.swap_outs, NULL);
      report_u64(&rep, "recomputes", "  by recompute", S.preempt_recompute, NULL);
      report_u64(&rep, "swap_outs", "  by swap out", S.swap_outs, NULL);
      report_u64(&rep, "swap_ins", "swap ins", S.swap_ins, NULL);
      report_u64(&rep, "evictions", "evictions", st.evictions, "blocks");
      replay_host_report(&rep, o, &st);
      if (o->host_cache) report_f64(&rep, "transfer_s", "  transfer time", S.transfer_s, 3, "s (simulated, in steps)");
      report_f64(&rep, "peak_blocks_used", "peak blocks in use", peak_used, 0, NULL);
      report_f64(&rep, "mean_blocks_used", "mean blocks in use", clock > 0 ? used_area / clock : 0.0, 1,
                 "(time-weighted)");
      report_f64(&rep, "ttft_p50_ms", "TTFT p50", quantile_sorted(ttft, nt, 0.50), 1, "ms");
      report_f64(&rep, "ttft_p90_ms", "TTFT p90", quantile_sorted(ttft, nt, 0.90), 1, "ms");
      report_f64(&rep, "ttft_p99_ms", "TTFT p99", quantile_sorted(ttft, nt, 0.99), 1, "ms");
      report_f64(&rep, "ttft_max_ms", "TTFT max", nt ? ttft[nt - 1] : 0.0, 1, "ms");
      report_f64(&rep, "manager_us_per_request", "manager time/request", finished ? S.mgr_s * 1e6 / (double)finished : 0,
                 2, "us");
      report_f64(&rep, "manager_s", "manager time", S.mgr_s, 3, "s");
      report_f64(&rep, "load_s", "trace load", load_s, 3, "s");
      report_f64(&rep, "wall_s", "wall time", wall, 3, "s");
      report_f64(&rep, "cpu_s", "CPU time", cpu, 3, "s");
      if (o->svg) report_str(&rep, "svg", "chart written to", o->svg);
      report_end(&rep);
    }
    free(ttft);
  }
  chart_free(&ch);
  free(S.s);
  free(S.running);
  free(S.waitq);
  free(S.swapped);
  free(S.tokens);
  free(S.pairs);
  replay_host_free(&S.host);
  free(order);
  kvb_manager_destroy(S.m);
  return rc;
}
