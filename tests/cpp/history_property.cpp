// Whole-history property test (docs/ARCHITECTURE.md, "Prefix index and whole-history matching").
// Random operations whose salts, extra keys and token ids all come from the same few values (so
// that `salt ‖ tokens`, `parent ‖ tokens` and `tokens ‖ extra` byte streams line up as often as possible),
// in both index modes and at several block sizes. The model records, for every device block, the whole
// history of the K/V that was last committed into it (salt or none, then every block's tokens and extra key
// up to and including this one), and forgets it when anything writes into the block. Every prefix hit that
// kvb_seq_allocate reports must land on a block whose recorded history equals the prompt's.
#include <cinttypes>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "harness.h"
#include "splitmix.h"

namespace {

struct Rng : SplitMix64 {
  explicit Rng(uint64_t seed) : SplitMix64(seed, 77) {}
  uint32_t below(uint32_t n) { return static_cast<uint32_t>(next() % n); }
};

using History = std::vector<int64_t>;  // [has_salt, salt, (tokens..., has_extra, extra) per block]

struct MSeq {
  bool has_salt = false;
  int64_t salt = 0;
  std::vector<int64_t> tokens;
  std::map<uint32_t, uint64_t> extra;  // block index -> extra key, as the library holds it
  uint64_t computed = 0;
};

struct Config {
  const char* name;
  uint32_t bs, num_blocks, flags;
  bool non_cacheable;  // token 3 is non-cacheable (then only an extra key makes its block cacheable)
  uint32_t num_host_blocks = 0;  // with KVB_CONFIG_HOST_CACHE: host hits are checked the same way
};

class HistoryTest {
 public:
  HistoryTest(const Config& c, uint64_t seed) : cfg_(c), rng_(seed) {
    kvb_config kc;
    kvb_config_init(&kc);
    kc.block_size = c.bs;
    kc.num_blocks = c.num_blocks;
    kc.flags = c.flags;
    kc.index_seed = seed + 1;
    kc.num_host_blocks = c.num_host_blocks;
    static const int64_t nc[1] = {3};
    if (c.non_cacheable) {
      kc.non_cacheable_tokens = nc;
      kc.num_non_cacheable_tokens = 1;
    }
    ok_ = kvb_manager_create(&kc, &m_) == KVB_OK;
    block_history_.assign(c.num_blocks, History{});
    host_history_.assign(c.num_host_blocks, History{});
  }
  ~HistoryTest() { kvb_manager_destroy(m_); }

  // Runs steps operations; returns false (with a message) at the first violation.
  bool run(int steps) {
    if (!ok_) return fail("manager_create failed: %s", kvb_last_error());
    for (step_ = 0; step_ < steps; ++step_) {
      uint32_t r = rng_.below(100);
      bool good = r < 35 ? op_allocate() : r < 60 ? op_commit() : r < 72 ? op_append() : r < 84 ? op_free()
                  : r < 90 ? op_fork() : r < 95 ? op_rollback() : r < 99 ? op_set_extra_key() : op_reset();
      if (!good) return false;
      if (kvb_check_invariants(m_) != KVB_OK) return fail("invariants: %s", kvb_last_error());
    }
    return true;
  }
  uint64_t hits() const { return hit_blocks_; }
  uint64_t host_loads() const { return host_loads_; }

 private:
  bool fail(const char* fmt, ...) __attribute__((format(printf, 2, 3))) {
    va_list ap;
    va_start(ap, fmt);
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "history %s: step %d: %s\n", cfg_.name, step_, buf);
    return false;
  }

  int64_t tiny() { return static_cast<int64_t>(rng_.below(4)); }  // 0..3: tokens, salts, extra keys alike

  History history_of(const MSeq& s, uint32_t upto_block) const {  // blocks [0, upto_block]
    History h{s.has_salt, s.has_salt ? s.salt : 0};
    for (uint32_t i = 0; i <= upto_block; ++i) {
      for (uint32_t k = 0; k < cfg_.bs; ++k) h.push_back(s.tokens[static_cast<size_t>(i) * cfg_.bs + k]);
      auto it = s.extra.find(i);
      h.push_back(it != s.extra.end());
      h.push_back(it != s.extra.end() ? static_cast<int64_t>(it->second) : 0);
    }
    return h;
  }

  bool table(int64_t id, std::vector<int32_t>& t) {
    size_t len = 0;
    t.assign(4096, -2);
    if (kvb_seq_block_table(m_, id, t.data(), t.size(), &len) != KVB_OK)
      return fail("block_table(%" PRId64 "): %s", id, kvb_last_error());
    t.resize(len);
    return true;
  }

  // Host-cache transfers of the last call, applied to the model in the order the caller runs them:
  // offloads copy a device block's K/V to the host before anything overwrites it, then loads copy back.
  bool transfers() {
    if (!(cfg_.flags & KVB_CONFIG_HOST_CACHE)) return true;
    std::vector<int32_t> off(2 * cfg_.num_host_blocks + 2), load(2 * cfg_.num_blocks + 2);
    size_t no = 0, nl = 0;
    if (kvb_drain_host_transfers(m_, off.data(), off.size() / 2, &no, load.data(), load.size() / 2, &nl) != KVB_OK)
      return fail("drain_host_transfers: %s", kvb_last_error());
    for (size_t i = 0; i < no; ++i) host_history_[off[2 * i + 1]] = block_history_[off[2 * i]];
    for (size_t i = 0; i < nl; ++i) block_history_[load[2 * i + 1]] = host_history_[load[2 * i]];
    host_loads_ += nl;
    return true;
  }

  // Blocks that held positions [from, to) of seq id were written: their recorded K/V is gone.
  bool wrote(int64_t id, uint64_t from, uint64_t to) {
    std::vector<int32_t> t;
    if (!table(id, t)) return false;
    for (uint64_t p = from; p < to; ++p) {
      int32_t b = t[p / cfg_.bs];
      if (b >= 0) block_history_[b].clear();
    }
    return true;
  }

  int64_t pick_seq() {
    if (seqs_.empty()) return -1;
    auto it = seqs_.begin();
    std::advance(it, rng_.below(static_cast<uint32_t>(seqs_.size())));
    return it->first;
  }

  // A fresh prompt, or (mostly) a variant of an earlier one, so that prefixes recur: the same prompt, one
  // token / salt / extra key changed, or the salt moved into the tokens and the first block's last token
  // into its extra key (`salt ‖ tokens` == `tokens ‖ extra`: whole_history.c's collision case), or back.
  MSeq make_prompt() {
    MSeq s;
    if (!prompts_.empty() && rng_.below(4) != 0) {
      s = prompts_[rng_.below(static_cast<uint32_t>(prompts_.size()))];
      s.computed = 0;
      const uint32_t bs = cfg_.bs;
      switch (rng_.below(6)) {
        case 0: break;
        case 1: s.tokens[rng_.below(static_cast<uint32_t>(s.tokens.size()))] = tiny(); break;
        case 2:
          s.has_salt = !s.has_salt;
          s.salt = tiny();
          break;
        case 3: {
          uint32_t bi = rng_.below(static_cast<uint32_t>((s.tokens.size() + bs - 1) / bs));
          if (s.extra.count(bi)) s.extra.erase(bi);
          else s.extra[bi] = static_cast<uint64_t>(tiny());
          break;
        }
        case 4:  // salt S, block 0 = [t0 .. t(bs-1)]  ->  no salt, block 0 = [S t0 .. t(bs-2)] + extra t(bs-1)
          if (s.has_salt && !s.extra.count(0) && s.tokens.size() >= bs) {
            s.extra[0] = static_cast<uint64_t>(s.tokens[bs - 1]);
            s.tokens.erase(s.tokens.begin() + bs - 1);
            s.tokens.insert(s.tokens.begin(), s.salt);
            s.has_salt = false;
          }
          break;
        default:  // the reverse
          if (!s.has_salt && s.extra.count(0) && s.tokens.size() >= bs) {
            s.has_salt = true;
            s.salt = s.tokens[0];
            s.tokens.erase(s.tokens.begin());
            s.tokens.insert(s.tokens.begin() + bs - 1, static_cast<int64_t>(s.extra[0]));
            s.extra.erase(0);
          }
          break;
      }
      if (rng_.below(2)) s.tokens.push_back(tiny());  // often a longer prompt: its prefix can hit
      return s;
    }
    s.has_salt = rng_.below(2);
    s.salt = tiny();
    uint32_t n = 1 + rng_.below(4 * cfg_.bs + 1);
    for (uint32_t i = 0; i < n; ++i) s.tokens.push_back(tiny());
    for (uint32_t i = 0; i < (n + cfg_.bs - 1) / cfg_.bs; ++i)
      if (rng_.below(3) == 0) s.extra[i] = static_cast<uint64_t>(tiny());
    return s;
  }

  bool op_allocate() {
    MSeq s = make_prompt();
    const uint32_t n = static_cast<uint32_t>(s.tokens.size());
    if (prompts_.size() < 16) prompts_.push_back(s);
    else prompts_[rng_.below(16)] = s;
    std::vector<uint32_t> eb;
    std::vector<uint64_t> ev;
    for (const auto& e : s.extra) {
      eb.push_back(e.first);
      ev.push_back(e.second);
    }
    kvb_seq_options o;
    kvb_seq_options_init(&o);
    o.has_cache_salt = s.has_salt;
    o.cache_salt = static_cast<uint64_t>(s.salt);
    o.extra_key_blocks = eb.empty() ? nullptr : eb.data();
    o.extra_keys = ev.empty() ? nullptr : ev.data();
    o.num_extra_keys = eb.size();
    size_t would = 0, cached = 0;
    kvb_status cs = kvb_seq_can_allocate_ex(m_, s.tokens.data(), n, &o, &would);
    int64_t id = next_id_++;
    kvb_status st = kvb_seq_allocate_ex(m_, id, s.tokens.data(), n, &o, &cached);
    if (st == KVB_ERR_OUT_OF_BLOCKS) return cs == KVB_ERR_OUT_OF_BLOCKS ? true : fail("can_allocate said OK");
    if (st != KVB_OK) return fail("allocate: %s", kvb_last_error());
    if (cs != KVB_OK || would != cached) return fail("can_allocate %zu vs allocate %zu cached", would, cached);
    if (!transfers()) return false;
    if (cached % cfg_.bs) return fail("cached %zu is not whole blocks", cached);
    std::vector<int32_t> t;
    if (!table(id, t)) return false;
    for (uint32_t i = 0; i < cached / cfg_.bs; ++i) {
      const History want = history_of(s, i);
      if (block_history_[t[i]] != want)
        return fail("seq %" PRId64 " (n %u, salt %d/%" PRId64 "): hit on block %u (device %d) whose K/V has another "
                    "history", id, n, s.has_salt, s.salt, i, t[i]);
      ++hit_blocks_;
    }
    s.computed = cached;
    seqs_[id] = s;
    return wrote(id, cached, n);
  }

  bool op_commit() {
    int64_t id = pick_seq();
    if (id < 0) return true;
    MSeq& s = seqs_[id];
    uint64_t left = s.tokens.size() - s.computed;
    uint64_t n = rng_.below(3) ? left : rng_.below(static_cast<uint32_t>(left + 1));
    if (kvb_seq_commit(m_, id, n) != KVB_OK) return fail("commit: %s", kvb_last_error());
    std::vector<int32_t> t;
    if (!table(id, t)) return false;
    for (uint64_t i = s.computed / cfg_.bs; i < (s.computed + n) / cfg_.bs; ++i)
      if (t[i] >= 0) block_history_[t[i]] = history_of(s, static_cast<uint32_t>(i));
    s.computed += n;
    return drain();
  }

  bool op_append() {
    int64_t id = pick_seq();
    if (id < 0) return true;
    MSeq& s = seqs_[id];
    uint32_t n = 1 + rng_.below(cfg_.bs + 1);
    std::vector<int64_t> add;
    for (uint32_t i = 0; i < n; ++i) add.push_back(tiny());
    kvb_status st = kvb_seq_append(m_, id, add.data(), n);
    if (st == KVB_ERR_OUT_OF_BLOCKS) return true;
    if (st != KVB_OK) return fail("append: %s", kvb_last_error());
    if (!transfers()) return false;
    uint64_t from = s.tokens.size();
    s.tokens.insert(s.tokens.end(), add.begin(), add.end());
    return wrote(id, from, s.tokens.size()) && drain();
  }

  // Copy-on-write pairs: the destination receives the source's partial content (never a full block).
  bool drain() {
    int32_t pairs[2 * 64];
    size_t np = 0;
    if (kvb_drain_copies(m_, pairs, 64, &np) != KVB_OK) return fail("drain: %s", kvb_last_error());
    return true;
  }

  bool op_free() {
    int64_t id = pick_seq();
    if (id < 0) return true;
    if (kvb_seq_free(m_, id) != KVB_OK) return fail("free: %s", kvb_last_error());
    seqs_.erase(id);
    return true;
  }

  bool op_fork() {
    int64_t id = pick_seq();
    if (id < 0) return true;
    MSeq& s = seqs_[id];
    if (s.computed == 0) return true;
    uint64_t pos = 1 + rng_.below(static_cast<uint32_t>(s.computed));
    int64_t child = next_id_++;
    kvb_status st = kvb_seq_fork_at(m_, id, child, pos);
    if (st != KVB_OK) return fail("fork_at %" PRIu64 ": %s", pos, kvb_last_error());
    MSeq c = s;
    c.tokens.resize(pos);
    c.computed = pos;
    seqs_[child] = c;
    return true;
  }

  bool op_rollback() {
    int64_t id = pick_seq();
    if (id < 0) return true;
    MSeq& s = seqs_[id];
    if (s.tokens.size() < 2) return true;
    uint32_t n = 1 + rng_.below(static_cast<uint32_t>(s.tokens.size() - 1));
    if (kvb_seq_rollback(m_, id, n) != KVB_OK) return fail("rollback %u: %s", n, kvb_last_error());
    s.tokens.resize(s.tokens.size() - n);
    if (s.computed > s.tokens.size()) s.computed = s.tokens.size();
    return true;
  }

  bool op_set_extra_key() {
    int64_t id = pick_seq();
    if (id < 0) return true;
    MSeq& s = seqs_[id];
    uint32_t bi = rng_.below(static_cast<uint32_t>(s.tokens.size() / cfg_.bs + 2));
    uint64_t key = static_cast<uint64_t>(tiny());
    kvb_status st = kvb_seq_set_extra_key(m_, id, bi, key);
    if (st == KVB_ERR_BAD_STATE) return bi < s.computed / cfg_.bs ? true : fail("set_extra_key refused");
    if (st != KVB_OK) return fail("set_extra_key: %s", kvb_last_error());
    s.extra[bi] = key;
    return true;
  }

  bool op_reset() {
    for (auto& e : seqs_)
      if (kvb_seq_free(m_, e.first) != KVB_OK) return fail("free: %s", kvb_last_error());
    seqs_.clear();
    if (kvb_reset_prefix_cache(m_) != KVB_OK) return fail("reset: %s", kvb_last_error());
    return true;
  }

  Config cfg_;
  Rng rng_;
  kvb_manager* m_ = nullptr;
  bool ok_ = false;
  int step_ = 0;
  int64_t next_id_ = 1;
  std::map<int64_t, MSeq> seqs_;
  std::vector<MSeq> prompts_;  // recent prompts, for variants
  std::vector<History> block_history_, host_history_;
  uint64_t host_loads_ = 0;
  uint64_t hit_blocks_ = 0;
};

const Config kConfigs[] = {
    {"bs1_plain", 1, 24, 0, false},          {"bs1_keyed", 1, 24, KVB_CONFIG_KEYED_INDEX, false},
    {"bs2_plain", 2, 24, 0, false},          {"bs2_keyed", 2, 24, KVB_CONFIG_KEYED_INDEX, false},
    {"bs2_plain_nc", 2, 32, 0, true},        {"bs3_keyed_nc", 3, 32, KVB_CONFIG_KEYED_INDEX, true},
    {"bs2_plain_events", 2, 16, KVB_CONFIG_EVENTS, false},
    {"bs2_host_cache", 2, 12, KVB_CONFIG_HOST_CACHE, false, 10},
    {"bs1_host_keyed_events", 1, 10, KVB_CONFIG_HOST_CACHE | KVB_CONFIG_KEYED_INDEX | KVB_CONFIG_EVENTS, true, 6},
    {"bs3_host_cache_nc", 3, 16, KVB_CONFIG_HOST_CACHE, true, 24},
};

void run_config(const Config& c) {
  const bool quick = getenv("KVB_TEST_QUICK") != nullptr;
  const int seeds = quick ? 8 : 200, steps = quick ? 200 : 500;
  uint64_t hits = 0, loads = 0;
  for (int seed = 0; seed < seeds; ++seed) {
    HistoryTest t(c, static_cast<uint64_t>(seed));
    if (!t.run(steps)) {
      fprintf(stderr, "  reproduce: config %s seed %d\n", c.name, seed);
      kvbt_case_failures++;
      return;
    }
    hits += t.hits();
    loads += t.host_loads();
  }
  printf("     %s: %d seeds x %d steps, %" PRIu64 " hit blocks checked, %" PRIu64 " loaded from the host\n", c.name,
         seeds, steps, hits, loads);
  if ((c.flags & KVB_CONFIG_HOST_CACHE) && loads == 0) {
    fprintf(stderr, "%s: no host hit was exercised\n", c.name);
    kvbt_case_failures++;
  }
  if (hits == 0) {
    fprintf(stderr, "%s: no hit was exercised\n", c.name);
    kvbt_case_failures++;
  }
}

#define CONFIG_TEST(i) \
  void history_##i() { run_config(kConfigs[i]); }
CONFIG_TEST(0)
CONFIG_TEST(1)
CONFIG_TEST(2)
CONFIG_TEST(3)
CONFIG_TEST(4)
CONFIG_TEST(5)
CONFIG_TEST(6)
CONFIG_TEST(7)
CONFIG_TEST(8)
CONFIG_TEST(9)

}  // namespace

int main() {
  RUN_TEST(history_0);
  RUN_TEST(history_1);
  RUN_TEST(history_2);
  RUN_TEST(history_3);
  RUN_TEST(history_4);
  RUN_TEST(history_5);
  RUN_TEST(history_6);
  RUN_TEST(history_7);
  RUN_TEST(history_8);
  RUN_TEST(history_9);
  TEST_SUMMARY();
}
