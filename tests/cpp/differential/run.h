// Differential test of the block manager: one run (one configuration, one seed) drives the library and
// the model (model.h) side by side and plays the engine on a simulated KV store. The class is declared
// here; its parts are defined by concern in inputs.h (random prompts, ids and options), engine.h (the KV
// store, batch export and commits), operations.h (the operation generator) and compare.h (the checks
// after every step).
#pragma once

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "kvblock.h"
#include "configs.h"
#include "model.h"
#include "store_mem.h"
#include "util.h"

namespace {

class Run {
 public:
  Run(const Config& c, uint64_t seed, bool verbose) : cfg_(c), rng_(seed), verbose_(verbose) {}
  ~Run() { kvb_manager_destroy(m_); }

  void go() {
    kvb_config kc;
    kvb_config_init(&kc);
    kc.block_size = cfg_.bs;
    kc.num_blocks = cfg_.N;
    kc.num_host_blocks = cfg_.host;
    kc.watermark = cfg_.wm;
    std::vector<int64_t> ncv;
    if (cfg_.nc) ncv = {kNC, kNC + 1};
    kc.non_cacheable_tokens = ncv.empty() ? nullptr : ncv.data();
    kc.num_non_cacheable_tokens = ncv.size();
    kc.flags = cfg_.flags;
    kc.index_seed = cfg_.flags & KVB_CONFIG_KEYED_INDEX ? 12345 : 0;
    kc.host_cache_twin_percent = cfg_.twin_pct;
    std::vector<MGroupSpec> specs = parse_groups(cfg_.groups);
    std::vector<kvb_group_spec> kgs(specs.size());
    for (size_t g = 0; g < specs.size(); ++g) {
      kvb_group_spec_init(&kgs[g]);
      kgs[g].kind = specs[g].window ? KVB_GROUP_WINDOW : KVB_GROUP_FULL;
      kgs[g].window_tokens = specs[g].window_tokens;
      kgs[g].sink_tokens = specs[g].sink_tokens;
    }
    kc.groups = kgs.empty() ? nullptr : kgs.data();
    kc.num_groups = kgs.size();
    expect(kvb_manager_create(&kc, &m_), KVB_OK, "manager_create");
    model_.init(cfg_.bs, cfg_.N, cfg_.host, cfg_.wm, ncv, (cfg_.flags & KVB_CONFIG_KEYED_INDEX) != 0,
                (cfg_.flags & KVB_CONFIG_HOST_CACHE) != 0, cfg_.twin_pct, specs);
    content_.assign(static_cast<size_t>(cfg_.N) * cfg_.bs, -1);
    host_content_.assign(static_cast<size_t>(cfg_.host) * cfg_.bs, -1);
    if (cfg_.store) set_store();
    // Shared prefixes over a small vocabulary: prompts collide often.
    for (int i = 0; i < 6; ++i) prefixes_.push_back(gen_tokens(rng_.range(1, 5 * cfg_.bs)));
    compare();
    for (step_ = 1; step_ <= cfg_.steps; ++step_) {
      one_step();
      compare();
    }
    g_act.seeds++;
    g_act.steps += static_cast<uint64_t>(cfg_.steps);
    g_act.hit_tokens += model_.hit;
    g_act.cow += model_.cow;
    g_act.evictions += model_.evictions;
    g_act.released += model_.window_released;
    g_act.window_skipped += model_.window_skipped;
    g_act.window_cut += model_.window_cut;
    g_act.host_hit_tokens += model_.host_hit;
    g_act.offloads += model_.offloaded;
    g_act.loads += model_.loaded;
    g_act.host_evictions += model_.host_evictions;
    g_act.store_hit_tokens += model_.store_hit;
    g_act.store_puts += model_.put_blocks;
    g_act.store_gets += model_.get_blocks;
    g_act.store_failed_gets += model_.get_failures;
    // Tear down: run what is pending (a load holds its device block), then free everything.
    drain_and_run_host_transfers();
    std::vector<int64_t> ids;
    for (const auto& kv : model_.seqs) ids.push_back(kv.first);
    for (int64_t id : ids) {
      note(fmt("final free %" PRId64, id));
      expect(kvb_seq_free(m_, id), model_.free_seq(id), "free");
    }
    compare();
    size_t nf = 0;
    expect(kvb_num_free_blocks(m_, &nf), KVB_OK, "num_free_blocks");
    if (nf != cfg_.N) fail(fmt("after freeing everything %zu of %u blocks are free", nf, cfg_.N));
  }

  int step() const { return step_; }
  // Model state, printed with a failure.
  void dump() const {
    for (const auto& kv : model_.seqs) {
      const MSeq& s = kv.second;
      printf("    seq %" PRId64 "%s: %zu tokens, %zu computed, %zu hashed, unc %ld%s\n", kv.first,
             s.swapped ? " (swapped)" : "", s.tokens.size(), s.computed, s.hashed, s.unc, s.has_salt ? ", salted" : "");
      for (size_t g = 0; g < s.g.size(); ++g)
        printf("      group %zu: window %u sink %u, table %s\n", g, s.g[g].window, s.g[g].sink,
               vec_str(s.swapped ? s.g[g].host_table : s.g[g].table).c_str());
    }
    std::string fq;
    for (int32_t b : model_.freeq) fq += std::to_string(b) + (model_.indexed(b) ? "* " : " ");
    if (!model_.parked.empty()) fq += "| parked ";
    for (int32_t b : model_.parked) fq += std::to_string(b) + (model_.indexed(b) ? "* " : " ");
    printf("    free queue (* = cached): %s\n", fq.c_str());
    std::string pc;
    for (const auto& p : model_.pending) pc += fmt("(%d,%d) ", p.first, p.second);
    if (!pc.empty()) printf("    pending copies: %s\n", pc.c_str());
    if (!model_.host_cache) return;
    std::string hl;
    for (int32_t h : model_.host_lru) hl += std::to_string(h) + " ";
    hl += "| twins ";
    for (int32_t h : model_.host_twins) hl += fmt("%d(%d) ", h, model_.twin[h]);
    printf("    host LRU (oldest first): %s\n", hl.c_str());
    std::string ht;
    for (const auto& p : model_.offloads) ht += fmt("off(%d,%d) ", p.first, p.second);
    for (const auto& p : model_.loads) ht += fmt("load(%d,%d) ", p.first, p.second);
    if (!ht.empty()) printf("    pending host transfers: %s\n", ht.c_str());
  }
  const std::deque<std::string>& history() const { return history_; }

 private:
  const Config& cfg_;
  Rng rng_;
  bool verbose_;
  kvb_manager* m_ = nullptr;
  Model model_;
  std::vector<int64_t> content_, host_content_;  // simulated K/V: the token id written at each slot
  std::vector<std::vector<int64_t>> prefixes_;
  std::vector<std::vector<int64_t>> past_;  // earlier prompts (host cache and group configurations)
  MemStore store_;  // the store configurations' third level
  std::deque<std::string> history_;
  int step_ = 0;
  int64_t next_id_ = 0;

  [[noreturn]] void fail(const std::string& msg) { throw Divergence(msg); }

  static void count(kvb_status st, const char* what) {
    if (st != KVB_OK) {
      ++g_act.errors;
      if (st == KVB_ERR_OUT_OF_BLOCKS && !strcmp(what, "allocate")) ++g_act.alloc_oob;
      return;
    }
    if (!strcmp(what, "allocate")) ++g_act.allocs;
    else if (!strcmp(what, "commit")) ++g_act.commits;
    else if (!strcmp(what, "append")) ++g_act.appends;
    else if (!strcmp(what, "fork") || !strcmp(what, "fork_at")) ++g_act.forks;
    else if (!strcmp(what, "rollback")) ++g_act.rollbacks;
    else if (!strcmp(what, "swap_out")) ++g_act.swaps_out;
    else if (!strcmp(what, "swap_in")) ++g_act.swaps_in;
    else if (!strcmp(what, "append_tree")) ++g_act.trees;
    else if (!strcmp(what, "commit_tree")) ++g_act.tree_commits;
  }

  void note(const std::string& s) {
    if (verbose_) printf("  [%d] %s\n", step_, s.c_str());
    history_.push_back(fmt("[%d] ", step_) + s);
    if (history_.size() > 40) history_.pop_front();
  }

  void expect(kvb_status got, kvb_status want, const char* what) {
    count(got, what);
    if (got != want)
      fail(fmt("%s returned %s, model says %s (%s)", what, sname(got), sname(want), kvb_last_error()));
    if (got != KVB_OK && kvb_last_error()[0] == '\0') fail(fmt("%s failed with an empty kvb_last_error()", what));
  }

  // ---- random inputs (inputs.h) ----
  int64_t gen_token();
  std::vector<int64_t> gen_tokens(size_t n);
  int64_t new_id();  // caller-chosen ids: negative and large ones too
  int64_t unknown_id();
  bool pick(int64_t* id, int which);  // which: 0 any, 1 device, 2 swapped
  uint64_t extra_key_for(const int64_t* t);  // mostly a content hash (so equal images match)
  std::vector<int64_t> gen_prompt();
  Opts gen_opts(const std::vector<int64_t>& t);
  static kvb_seq_options to_c(const Opts& o);
  static std::string opts_str(const Opts& o);

  // ---- the engine side: simulated KV store, batch export, commit (engine.h) ----
  void drain_and_run_copies();  // runs pending host transfers first (kvblock.h's order)
  void drain_and_run_host_transfers();
  bool host_cache() const { return (cfg_.flags & KVB_CONFIG_HOST_CACHE) != 0; }
  uint32_t num_groups() const { return static_cast<uint32_t>(model_.num_groups()); }

  // ---- the store level (operations_store.h) ----
  void set_store();
  void store_step_behaviour();  // what the store does wrong this step (refused puts)
  void store_plan_allocation(); // what the next allocation's lookup and gets do
  void store_poll();            // kvb_store_poll, checked against the model
  void store_while_filling(int64_t id);  // before the poll: refusals, store state, a free while filling
  void compare_store();         // the puts since the last step: blocks and bytes

  // Model expectation of kvb_batch_export for ids (all on device).
  struct BatchWant {
    kvb_status st = KVB_OK;
    size_t slots = 0;
    uint32_t max_blocks = 0;
  };
  BatchWant batch_want(const std::vector<int64_t>& ids, uint32_t cols, bool tables, size_t slot_cap, bool slots,
                       uint32_t group);

  // kvb_batch_export of one group's tables and slots (kvb_batch.group).
  std::vector<int64_t> batch_export(const std::vector<int64_t>& ids, uint32_t cols, size_t slot_cap, bool tables,
                                    bool lens, bool qs, bool slots, uint32_t group);
  // The K/V of tokens[from, from + k) of a sequence written at each group's exported slots sm[group].
  void write_kv(const std::vector<std::vector<int64_t>>& sm, size_t off, const std::vector<int64_t>& toks,
                size_t from, size_t k);

  void engine_step();

  // ---- operations: one random step drives the library and the model side by side (operations.h) ----
  // A new operation is declared here, defined in operations.h and given a weight in one_step.
  void op_allocate();
  void op_append();
  void op_batch_append();
  void op_free();
  void op_fork();
  void op_rollback();
  void op_spec_decode();  // append k speculative tokens, commit them, reject some
  void op_tree();         // append a random token tree, or commit a pending one's random path (operations_tree.h)
  void commit_tree(int64_t id);
  void drain_and_run_slot_copies();
  void check_tree_masks(const std::vector<int64_t>& ids);  // kvb_batch.tree_mask against the model
  void op_window();
  void op_swap_out();
  void op_swap_in();
  void op_drain();
  void op_drain_host();
  void op_batch();
  void op_reset();
  void op_extra_key();
  void op_invalid();
  void op_invalid_groups();  // group indices out of range, the plain event drain with several groups
  void one_step();

  // ---- full comparison after every step (compare.h) ----
  int64_t read_slot(const std::map<int32_t, std::vector<int64_t>>& overlay, int32_t b, size_t off) const;
  int64_t read_host_slot(const std::map<int32_t, std::vector<int64_t>>& overlay, int32_t h, size_t off) const;
  void compare_events();

  void compare();
};

}  // namespace
