// Allocation failure: this binary replaces the global operator new / new[] (every variant: plain,
// nothrow, aligned, aligned nothrow) with a counting version that fails the Nth allocation made inside a
// library call. A realistic sequence of C API calls is run for N = 1, 2, 3, ... until a run completes
// without reaching N. In every run:
//   - the call whose allocation failed must return KVB_ERR_OUT_OF_MEMORY with a message (no other call may);
//   - right after it, kvb_check_invariants() passes and the observable state (stats, free count, block
//     tables and infos, block hashes) is byte-identical to the state before the call;
//   - the call is then retried without injection and must give what it gives in the reference run, and
//     the sequence goes on; at the end the full state, drained copies and events included, must equal
//     the reference run's.
// And: every OUT_OF_MEMORY says what could not be allocated and how much, and the event
// queue grows on demand instead of reserving event_capacity events of a block of tokens each up front.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <string>
#include <vector>

#include "c/kvbt_common.h"
#include "harness.h"
#include "kvbt_state.h"
#include "replace_new.h"

// ---- counting, failing global allocator ----------------------------------------------------------

namespace {
bool g_armed = false;     // counting only inside library calls
long g_count = 0;         // allocations counted in this run
long g_fail_at = 0;       // fail the g_fail_at-th counted allocation (0 = never)
bool g_injected = false;  // the failure was injected (once per run)
std::size_t g_fail_min_bytes = 0;  // fail every counted allocation of at least this many bytes (0 = none)
unsigned long long g_bytes = 0;    // bytes of the counted allocations

void* counted_alloc(std::size_t n, std::size_t align) noexcept {
  if (g_armed) {
    if (g_fail_min_bytes && n >= g_fail_min_bytes) {
      g_injected = true;
      return nullptr;
    }
    g_bytes += n;
    ++g_count;
    if (g_count == g_fail_at) {
      g_injected = true;
      return nullptr;
    }
  }
  return system_alloc(n, align);
}

}  // namespace

void* test_alloc(std::size_t n, std::size_t align) noexcept { return counted_alloc(n, align); }
void test_free(void* p) noexcept { std::free(p); }

// ---- the operation sequence ------------------------------------------------------------------------

namespace {

struct Ctx {
  kvb_manager* m = nullptr;
  std::vector<int64_t> prompt;
  int32_t pairs[2 * 256];
  size_t n = 0;
  kvb_event events[8];
  int64_t event_tokens[8 * 4];
  uint32_t ekb[2] = {1, 3};
  uint64_t ek[2] = {0xabc, 0xdef};
};

struct Step {
  std::string name;
  kvb_status want;  // what the call gives without injected failures
  std::function<kvb_status(Ctx&)> fn;
};

constexpr uint32_t kBlockSize = 4;
constexpr uint32_t kBlocks = 128;
constexpr int kManySeqs = 70;  // more than the sequence table's initial capacity (64): it must grow

kvb_status create(Ctx& c) {
  kvb_config cfg;
  kvb_config_init(&cfg);
  static const int64_t kNonCacheable[] = {99};
  cfg.block_size = kBlockSize;
  cfg.num_blocks = kBlocks;
  cfg.num_host_blocks = 16;
  cfg.flags = KVB_CONFIG_KEYED_INDEX | KVB_CONFIG_EVENTS;
  cfg.event_capacity = 12;
  cfg.index_seed = 77;
  cfg.non_cacheable_tokens = kNonCacheable;
  cfg.num_non_cacheable_tokens = 1;
  c.m = reinterpret_cast<kvb_manager*>(&cfg);  // a failed create must set it to NULL
  kvb_status s = kvb_manager_create(&cfg, &c.m);
  if (s != KVB_OK && c.m != nullptr) {
    std::fprintf(stderr, "failed kvb_manager_create left *out non-NULL\n");
    std::abort();
  }
  return s;
}

std::vector<Step> build_steps(bool quick) {
  std::vector<Step> v;
  auto add = [&](std::string name, kvb_status want, std::function<kvb_status(Ctx&)> fn) {
    v.push_back(Step{std::move(name), want, std::move(fn)});
  };
  add("allocate 1", KVB_OK, [](Ctx& c) {
    return kvb_seq_allocate(c.m, 1, c.prompt.data(), c.prompt.size(), &c.n);
  });
  add("commit 1", KVB_OK, [](Ctx& c) { return kvb_seq_commit(c.m, 1, 18); });
  add("can_allocate", KVB_OK, [](Ctx& c) { return kvb_seq_can_allocate(c.m, c.prompt.data(), c.prompt.size(), &c.n); });
  add("allocate 2 (prefix hit)", KVB_OK,
      [](Ctx& c) { return kvb_seq_allocate(c.m, 2, c.prompt.data(), c.prompt.size() - 1, &c.n); });
  add("commit 2", KVB_OK, [](Ctx& c) { return kvb_seq_commit(c.m, 2, 17 - 16); });
  add("allocate_ex 3 (salt, extra keys, window)", KVB_OK, [](Ctx& c) {
    kvb_seq_options o;
    kvb_seq_options_init(&o);
    o.has_cache_salt = 1;
    o.cache_salt = 5;
    o.extra_key_blocks = c.ekb;
    o.extra_keys = c.ek;
    o.num_extra_keys = 2;
    o.window_tokens = 8;
    o.sink_tokens = 2;
    return kvb_seq_allocate_ex(c.m, 3, c.prompt.data(), c.prompt.size(), &o, &c.n);
  });
  add("set_extra_key 3", KVB_OK, [](Ctx& c) { return kvb_seq_set_extra_key(c.m, 3, 2, 0x123); });
  add("set_extra_key 3 again", KVB_OK, [](Ctx& c) { return kvb_seq_set_extra_key(c.m, 3, 0, 0x456); });
  add("commit 3", KVB_OK, [](Ctx& c) { return kvb_seq_commit(c.m, 3, 18); });
  add("fork 1 -> 4", KVB_OK, [](Ctx& c) { return kvb_seq_fork(c.m, 1, 4); });
  add("fork_at 1 -> 5", KVB_OK, [](Ctx& c) { return kvb_seq_fork_at(c.m, 1, 5, 6); });
  for (int i = 0; i < 6; ++i) {
    add("append 4 #" + std::to_string(i), KVB_OK, [i](Ctx& c) {
      int64_t t = 2000 + i;
      return kvb_seq_append(c.m, 4, &t, 1);
    });
    add("commit 4 #" + std::to_string(i), KVB_OK, [](Ctx& c) { return kvb_seq_commit(c.m, 4, 1); });
  }
  add("append 5 (copy on write)", KVB_OK, [](Ctx& c) {
    int64_t t[3] = {7, 8, 9};
    return kvb_seq_append(c.m, 5, t, 3);
  });
  add("drain_copies", KVB_OK, [](Ctx& c) { return kvb_drain_copies(c.m, c.pairs, 256, &c.n); });
  for (int i = 0; i < 10; ++i)
    add("decode 1 #" + std::to_string(i), KVB_OK, [i](Ctx& c) {
      int64_t t = 3000 + i;
      kvb_status s = kvb_seq_append(c.m, 1, &t, 1);
      return s != KVB_OK ? s : kvb_seq_commit(c.m, 1, 1);  // commit cannot allocate
    });
  add("rollback 1", KVB_OK, [](Ctx& c) { return kvb_seq_rollback(c.m, 1, 3); });
  add("set_window 4", KVB_OK, [](Ctx& c) { return kvb_seq_set_window(c.m, 4, 8, 0); });
  // Batched decode steps over plain and windowed sequences (3, its fork 7 and 4 have windows: committing
  // may release blocks and keep chain links, which needs memory), three times so that windows release.
  add("fork 3 -> 7 (windowed)", KVB_OK, [](Ctx& c) { return kvb_seq_fork(c.m, 3, 7); });
  for (int i = 0; i < 3; ++i) {
    add("batch_append 1 3 4 5 7 #" + std::to_string(i), KVB_OK, [i](Ctx& c) {
      const int64_t ids[5] = {1, 3, 4, 5, 7}, t[5] = {4000 + i, 4100 + i, 4200 + i, 4300 + i, 4400 + i};
      return kvb_batch_append(c.m, ids, t, 5);
    });
    add("batch_commit 1 7 3 4 5 #" + std::to_string(i), KVB_OK, [](Ctx& c) {
      const int64_t ids[5] = {1, 7, 3, 4, 5};
      const size_t n[5] = {1, 1, 1, 1, 1};
      return kvb_batch_commit(c.m, ids, n, 5);
    });
  }
  add("drain_copies after batches", KVB_OK, [](Ctx& c) { return kvb_drain_copies(c.m, c.pairs, 256, &c.n); });
  add("batch_export", KVB_OK, [](Ctx& c) {
    static int32_t tables[4 * 16], lens[4], qs[5];
    static int64_t slots[64];
    const int64_t ids[4] = {1, 2, 4, 5};
    kvb_batch b = kvbt_batch(16, tables, lens, qs, slots, 64);
    return kvb_batch_export(c.m, ids, 4, &b);
  });
  // A token tree on the windowed sequence 4: its first tree grows the per-slot shapes, its commit the
  // pending slot pairs and held blocks.
  add("append_tree 4", KVB_OK, [](Ctx& c) {
    const int64_t t[8] = {50, 51, 52, 53, 54, 55, 56, 57};
    const int32_t parents[8] = {-1, -1, 0, 1, 3, 4, 5, -1};
    int32_t depths[8];
    return kvb_seq_append_tree(c.m, 4, t, parents, 8, depths);
  });
  add("commit_tree 4", KVB_OK, [](Ctx& c) {
    const int32_t path[5] = {1, 3, 4, 5, 6};
    return kvb_seq_commit_tree(c.m, 4, path, 5);
  });
  add("drain_slot_copies", KVB_OK, [](Ctx& c) {
    static int64_t pairs[64];
    return kvb_drain_slot_copies(c.m, pairs, 32, &c.n);
  });
  add("can_swap_out 2", KVB_OK, [](Ctx& c) {
    kvb_availability a;
    return kvb_seq_can_swap_out(c.m, 2, &a);
  });
  add("swap_out 2", KVB_OK, [](Ctx& c) { return kvb_seq_swap_out(c.m, 2, c.pairs, 256, &c.n); });
  add("get_info 2", KVB_OK, [](Ctx& c) {
    kvb_seq_info i;
    kvb_seq_info_init(&i);
    return kvb_seq_get_info(c.m, 2, &i);
  });
  add("swap_in 2", KVB_OK, [](Ctx& c) { return kvb_seq_swap_in(c.m, 2, c.pairs, 256, &c.n); });
  add("swap_out 3", KVB_OK, [](Ctx& c) { return kvb_seq_swap_out(c.m, 3, c.pairs, 256, &c.n); });
  // Expected failures: their messages are built on the heap too.
  add("allocate existing id", KVB_ERR_SEQUENCE_EXISTS,
      [](Ctx& c) { return kvb_seq_allocate(c.m, 1, c.prompt.data(), c.prompt.size(), &c.n); });
  add("allocate too long", KVB_ERR_OUT_OF_BLOCKS, [](Ctx& c) {
    static int64_t big[kBlocks * kBlockSize + 1];
    return kvb_seq_allocate(c.m, 9, big, kBlocks * kBlockSize + 1, &c.n);
  });
  add("commit too much", KVB_ERR_INVALID_ARGUMENT, [](Ctx& c) { return kvb_seq_commit(c.m, 5, 1000); });
  add("drain_events too small", KVB_ERR_BUFFER_TOO_SMALL,
      [](Ctx& c) { return kvb_drain_events(c.m, c.events, 0, c.event_tokens, 0, &c.n, nullptr); });
  add("drain_events", KVB_OK, [](Ctx& c) { return kvb_drain_events(c.m, c.events, 8, c.event_tokens, 32, &c.n, nullptr); });
  add("check_invariants", KVB_OK, [](Ctx& c) { return kvb_check_invariants(c.m); });
  // Many sequences: the sequence table and the sequence pool grow.
  const int many = quick ? 8 : kManySeqs;
  for (int i = 0; i < many; ++i)
    add("allocate many #" + std::to_string(i), KVB_OK, [i](Ctx& c) {
      int64_t t[2] = {4000 + i, 1};
      return kvb_seq_allocate(c.m, 100 + i, t, 1 + (i & 1), nullptr);
    });
  for (int i = 0; i < many; i += 2)
    add("free many #" + std::to_string(i), KVB_OK, [i](Ctx& c) { return kvb_seq_free(c.m, 100 + i); });
  add("commit many", KVB_OK, [](Ctx& c) { return kvb_seq_commit(c.m, 101, 2); });
  add("fork many", KVB_OK, [](Ctx& c) { return kvb_seq_fork(c.m, 101, 1000); });
  add("get_stats", KVB_OK, [](Ctx& c) {
    kvb_stats st;
    kvb_stats_init(&st);
    return kvb_get_stats(c.m, &st);
  });
  for (int64_t id : {1, 2, 3, 4, 5, 7, 1000})
    add("free " + std::to_string(id), KVB_OK, [id](Ctx& c) { return kvb_seq_free(c.m, id); });
  for (int i = 1; i < many; i += 2)
    add("free many #" + std::to_string(i), KVB_OK, [i](Ctx& c) { return kvb_seq_free(c.m, 100 + i); });
  add("reset_prefix_cache", KVB_OK, [](Ctx& c) { return kvb_reset_prefix_cache(c.m); });
  add("allocate after reset", KVB_OK, [](Ctx& c) {
    return kvb_seq_allocate(c.m, 7, c.prompt.data(), c.prompt.size(), &c.n);
  });
  add("commit after reset", KVB_OK, [](Ctx& c) { return kvb_seq_commit(c.m, 7, 18); });
  return v;
}

const int64_t kIds[] = {1, 2, 3, 4, 5, 7, 9, 100, 101, 1000};

struct RunResult {
  bool injected = false;      // an allocation failure was injected in this run
  long allocations = 0;       // counted allocations (all of them when nothing was injected)
  std::string failed_step;    // the step whose call failed, if any
  kvbt_state final_state{};
  int errors = 0;
};

// Runs the sequence, failing the fail_at-th library allocation (0 = none). With ref_before non-NULL, the
// state before every step is compared (after an injected failure) with the reference's.
RunResult run_sequence(const std::vector<Step>& steps, long fail_at, std::vector<kvbt_state>* record_before,
                       const std::vector<kvbt_state>* ref_before) {
  RunResult res;
  Ctx c;  // everything the steps use is allocated here, before any counting
  c.prompt.resize(18);
  for (size_t i = 0; i < c.prompt.size(); ++i) c.prompt[i] = 1000 + static_cast<int64_t>(i % 13);
  g_count = 0;
  g_fail_at = fail_at;
  g_injected = false;
  const size_t nids = sizeof kIds / sizeof kIds[0];

  auto complain = [&](const char* what, const std::string& step, kvb_status s) {
    std::fprintf(stderr, "N=%ld, step \"%s\": %s (%s: %s)\n", fail_at, step.c_str(), what, kvb_status_string(s),
                 kvb_last_error());
    ++res.errors;
  };

  // Creation: under injection too.
  for (;;) {
    bool before = g_injected;
    g_armed = true;
    kvb_status s = create(c);
    g_armed = false;
    if (s == KVB_OK) break;
    if (s != KVB_ERR_OUT_OF_MEMORY || before || !g_injected || kvb_last_error()[0] == '\0') {
      complain("kvb_manager_create failed without an injected failure", "create", s);
      return res;
    }
    res.failed_step = "create";
  }

  kvbt_state now{};
  for (size_t k = 0; k < steps.size(); ++k) {
    const Step& st = steps[k];
    if (record_before) {
      record_before->emplace_back();
      kvbt_state_take(c.m, kIds, nids, 0, &record_before->back());
    }
    const bool before = g_injected;
    g_armed = true;
    kvb_status s = st.fn(c);
    g_armed = false;
    if (g_injected && !before) {
      res.failed_step = st.name;
      if (s != KVB_ERR_OUT_OF_MEMORY) complain("an injected allocation failure did not give KVB_ERR_OUT_OF_MEMORY", st.name, s);
      else if (kvb_last_error()[0] == '\0') complain("KVB_ERR_OUT_OF_MEMORY without a message", st.name, s);
      kvb_status inv = kvb_check_invariants(c.m);
      if (inv != KVB_OK) complain("invariants broken after the failed call", st.name, inv);
      if (ref_before) {
        kvbt_state_take(c.m, kIds, nids, 0, &now);
        long d = kvbt_state_diff(&(*ref_before)[k], &now);
        if (d >= 0) {
          std::fprintf(stderr, "N=%ld, step \"%s\": the failed call changed the observable state (byte %ld)\n",
                       fail_at, st.name.c_str(), d);
          ++res.errors;
        }
      }
      s = st.fn(c);  // retry: the manager must still be usable
    }
    if (s != st.want) complain("unexpected status", st.name, s);
  }
  kvb_status inv = kvb_check_invariants(c.m);
  if (inv != KVB_OK) complain("invariants broken at the end", "end", inv);
  kvbt_state_take(c.m, kIds, nids, 1, &res.final_state);
  kvb_manager_destroy(c.m);
  kvbt_state_free(&now);
  res.injected = g_injected;
  res.allocations = g_count;
  return res;
}

bool quick_mode() {
  const char* q = std::getenv("KVB_TEST_QUICK");
  return q && *q && std::strcmp(q, "0") != 0;
}

void test_allocator_replacement_works() {
  g_count = 0;
  g_fail_at = 2;
  g_injected = false;
  g_armed = true;
  void* a = ::operator new(16, std::nothrow);
  void* b = ::operator new[](16, std::align_val_t{64}, std::nothrow);
  bool threw = false;
  try {
    void* d = ::operator new(8);
    ::operator delete(d);
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  g_armed = false;
  CHECK(a != nullptr);
  CHECK(b == nullptr);  // the 2nd allocation failed
  CHECK(!threw);
  CHECK(g_count == 3);
  ::operator delete(a);
  g_count = 0;
  g_fail_at = 1;
  g_armed = true;
  try {
    void* d = ::operator new[](8, std::align_val_t{128});
    ::operator delete[](d, std::align_val_t{128});
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  g_armed = false;
  g_fail_at = 0;
  CHECK(threw);
}

void test_every_allocation_fails_once() {
  const bool quick = quick_mode();
  g_armed = false;
  std::vector<Step> steps = build_steps(quick);
  std::vector<kvbt_state> ref_before;
  // A warm-up run first: the library keeps per-thread scratch (the batch calls' duplicate stamps) that
  // only the first run on this thread allocates, so the reference counts what every later run does.
  RunResult warm = run_sequence(steps, 0, nullptr, nullptr);
  kvbt_state_free(&warm.final_state);
  RunResult ref = run_sequence(steps, 0, &ref_before, nullptr);
  CHECK(ref.errors == 0);
  CHECK(!ref.injected);
  CHECK(ref.allocations > 0);  // the library allocates: the replacement is in effect
  long runs = 0, injected = 0;
  long stride = 1;
  for (long n = 1;; n += stride) {
    RunResult r = run_sequence(steps, n, nullptr, &ref_before);
    ++runs;
    if (r.errors) {
      kvbt_case_failures += r.errors;
      std::fprintf(stderr, "  (run N=%ld failed at step \"%s\")\n", n, r.failed_step.c_str());
    }
    if (!r.injected) {
      CHECK(n > ref.allocations);
      kvbt_state_free(&r.final_state);
      break;
    }
    ++injected;
    long d = kvbt_state_diff(&ref.final_state, &r.final_state);
    if (d >= 0) {
      std::fprintf(stderr, "N=%ld (failure in \"%s\"): final state differs from the reference (byte %ld)\n", n,
                   r.failed_step.c_str(), d);
      ++kvbt_case_failures;
    }
    kvbt_state_free(&r.final_state);
    if (n > 100000) {
      CHECK(!"allocation count does not converge");
      break;
    }
  }
  std::printf("allocation failure injected at each of %ld allocations of a %zu-step sequence (%ld runs)\n",
              injected, steps.size(), runs);
  kvbt_state_free(&ref.final_state);
  for (kvbt_state& s : ref_before) kvbt_state_free(&s);
}

// Is our operator new the one in effect? Under valgrind (which substitutes its own allocator for every
// operator new, the executable's included) it is not, and no failure can be injected.
bool replacement_in_effect() {
  g_count = 0;
  g_fail_at = 1;
  g_injected = false;
  g_armed = true;
  void* p = ::operator new(8, std::nothrow);
  g_armed = false;
  g_fail_at = 0;
  if (p) ::operator delete(p);
  return p == nullptr && g_injected;
}

// The decode path (append + commit of one token, the batch export of the step) allocates nothing once a
// sequence's block table has room: counted over many steps, across block boundaries and hash commits.
void test_decode_path_does_not_allocate() {
  const kvb_config cfg = kvbt_config(16, 4096, 0, 0.f, 0);
  kvb_manager* m = nullptr;
  CHECK_OK(kvb_manager_create(&cfg, &m));
  std::vector<int64_t> prompt(100);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int64_t>(i);
  const int kSeqs = 8, kSteps = 1000;
  for (int s = 0; s < kSeqs; ++s) {
    prompt[0] = s;  // distinct prompts
    CHECK_OK(kvb_seq_allocate(m, s, prompt.data(), prompt.size(), nullptr));
    CHECK_OK(kvb_seq_commit(m, s, prompt.size()));
  }
  int64_t ids[kSeqs];
  int32_t tables[kSeqs * 256], lens[kSeqs];
  int64_t slots[kSeqs];
  kvb_batch batch = kvbt_batch(256, tables, lens, nullptr, slots, kSeqs);
  auto step = [&](int t) {
    for (int s = 0; s < kSeqs; ++s) {
      ids[s] = s;
      int64_t tok = 1000 + t;
      CHECK_OK(kvb_seq_append(m, s, &tok, 1));
    }
    CHECK_OK(kvb_batch_export(m, ids, kSeqs, &batch));
    for (int s = 0; s < kSeqs; ++s) CHECK_OK(kvb_seq_commit(m, s, 1));
  };
  // Warm up: the block tables grow (geometrically) past what the measured steps need.
  for (int t = 0; t < 2 * kSteps; ++t) step(t);
  for (int s = 0; s < kSeqs; ++s) CHECK_OK(kvb_seq_rollback(m, s, 2 * kSteps));
  g_count = 0;
  g_fail_at = 0;
  g_armed = true;
  for (int t = 0; t < kSteps; ++t) step(t);
  g_armed = false;
  if (g_count != 0) std::fprintf(stderr, "decode path: %ld allocations in %d steps\n", g_count, kSteps * kSeqs);
  CHECK(g_count == 0);
  CHECK_OK(kvb_check_invariants(m));
  kvb_manager_destroy(m);
}

// A manager that fails kvb_manager_create when allocations of at least fail_min_bytes fail: its message.
std::string create_message(uint32_t block_size, uint32_t num_blocks, bool events, std::size_t fail_min_bytes) {
  const kvb_config cfg = kvbt_config(block_size, num_blocks, 0, 0.f, events ? KVB_CONFIG_EVENTS : 0);
  kvb_manager* m = nullptr;
  g_fail_min_bytes = fail_min_bytes;
  g_armed = true;
  const kvb_status s = kvb_manager_create(&cfg, &m);
  g_armed = false;
  g_fail_min_bytes = 0;
  CHECK(s == KVB_ERR_OUT_OF_MEMORY && m == nullptr);
  kvb_manager_destroy(m);
  return kvb_last_error();
}

bool mentions(const std::string& msg, const char* needle) {
  if (msg.find(needle) != std::string::npos) return true;
  std::fprintf(stderr, "  message \"%s\" does not mention \"%s\"\n", msg.c_str(), needle);
  return false;
}

void test_out_of_memory_says_what_and_how_much() {
  // The device pool's token ids (65536 blocks of 64 tokens: 32 MiB, with 3 MiB of metadata).
  std::string msg = create_message(64, 1u << 16, false, 16u << 20);
  CHECK(mentions(msg, "cannot allocate the device block pool: 35.0 MiB ("));
  CHECK(mentions(msg, "65536 blocks"));
  // The event queue's first slots (block size 32768: 256 KiB of tokens an event) where the pool's fit.
  msg = create_message(32768, 1, true, 512u << 10);
  CHECK(mentions(msg, "cannot allocate the event queue: "));
  CHECK(mentions(msg, "of up to 65536 events of"));
  // A sequence's block table (60000 blocks at block size 1): the call fails and changes nothing.
  const kvb_config cfg = kvbt_config(1, 1u << 16, 0, 0.f, 0);
  kvb_manager* m = nullptr;
  CHECK_OK(kvb_manager_create(&cfg, &m));
  std::vector<int64_t> prompt(60000, 7);
  g_fail_min_bytes = 128u << 10;
  g_armed = true;
  CHECK_STATUS(kvb_seq_allocate(m, 5, prompt.data(), prompt.size(), nullptr), KVB_ERR_OUT_OF_MEMORY);
  g_armed = false;
  g_fail_min_bytes = 0;
  msg = kvb_last_error();
  CHECK(mentions(msg, "cannot allocate the tables of seq 5: 234.4 KiB (1 group x (60000 blocks"));
  size_t free_blocks = 0;
  CHECK_OK(kvb_num_free_blocks(m, &free_blocks));
  CHECK(free_blocks == cfg.num_blocks);
  CHECK_STATUS(kvb_seq_free(m, 5), KVB_ERR_NO_SUCH_SEQUENCE);
  // Anything else names the call.
  CHECK_OK(kvb_seq_allocate(m, 1, prompt.data(), 10, nullptr));
  g_count = 0;
  g_fail_at = 1;
  g_armed = true;
  CHECK_STATUS(kvb_seq_fork(m, 1, 2), KVB_ERR_OUT_OF_MEMORY);
  g_armed = false;
  g_fail_at = 0;
  msg = kvb_last_error();
  CHECK(mentions(msg, "out of host memory in kvb_seq_fork"));
  CHECK_OK(kvb_check_invariants(m));
  kvb_manager_destroy(m);
}

// Block size 65536 with events and the default capacity (65536 events): 32 GiB if reserved up front. The
// queue starts at 1 MiB or less and grows as events come, keeping them in order.
void test_event_queue_grows_on_demand() {
  const kvb_config cfg = kvbt_config(65536, 8, 0, 0.f, KVB_CONFIG_EVENTS);
  kvb_manager* m = nullptr;
  g_bytes = 0;
  g_armed = true;
  CHECK_OK(kvb_manager_create(&cfg, &m));
  g_armed = false;
  std::printf("kvb_manager_create, block size 65536, 8 blocks, events: %.1f MiB allocated\n", double(g_bytes) / (1 << 20));
  CHECK(g_bytes < (8u << 20));  // the pool's token ids (4 MiB), the queue's first 512 KiB, little more
  if (!m) return;
  const size_t n = 5 * size_t(cfg.block_size) + 1;
  std::vector<int64_t> prompt(n);
  for (size_t i = 0; i < n; ++i) prompt[i] = int64_t(i * 7 % 1000);
  CHECK_OK(kvb_seq_allocate(m, 1, prompt.data(), n, nullptr));
  CHECK_OK(kvb_seq_commit(m, 1, n));  // 5 full blocks: 5 STORED events
  std::vector<kvb_event> ev(8);
  std::vector<int64_t> toks(8 * size_t(cfg.block_size));
  size_t got = 0;
  uint64_t dropped = 1;
  CHECK_OK(kvb_drain_events(m, ev.data(), ev.size(), toks.data(), toks.size(), &got, &dropped));
  CHECK(got == 5 && dropped == 0);
  for (size_t e = 0; e < got && e < 5; ++e) {
    CHECK(ev[e].type == KVB_EVENT_BLOCK_STORED && ev[e].num_tokens == cfg.block_size);
    CHECK(std::memcmp(&toks[ev[e].token_offset], &prompt[e * cfg.block_size], cfg.block_size * sizeof(int64_t)) == 0);
  }
  kvb_manager_destroy(m);
}

}  // namespace

int main() {
  if (!replacement_in_effect()) {
    SKIP_TEST(test_allocator_replacement_works, "operator new is replaced by the runtime (valgrind?)");
    SKIP_TEST(test_every_allocation_fails_once, "operator new is replaced by the runtime (valgrind?)");
    SKIP_TEST(test_decode_path_does_not_allocate, "operator new is replaced by the runtime (valgrind?)");
    TEST_SUMMARY();
  }
  RUN_TEST(test_allocator_replacement_works);
  RUN_TEST(test_every_allocation_fails_once);
  RUN_TEST(test_decode_path_does_not_allocate);
  RUN_TEST(test_out_of_memory_says_what_and_how_much);
  RUN_TEST(test_event_queue_grows_on_demand);
  TEST_SUMMARY();
}
