// libFuzzer harness for the manager's C API (build and run: `make fuzz FUZZ_SECONDS=N`).
//
// The input is decoded into a manager configuration and a sequence of C API calls, valid and invalid:
// any sequence ids, lengths, NULL where a pointer is optional or required, capacities too small,
// struct sizes too small, operations in any order. After every call:
//   - kvb_check_invariants() must pass;
//   - a failed call must name a known status, leave a non-empty kvb_last_error() and change nothing
//     observable (stats, free count, block tables and infos, block hashes: tests/kvbt_state.h);
//   - the test model (below) predicts the status of the core operations and, where they succeed, the
//     sequence lengths, computed counts and location; it also tracks what every device block holds, so
//     that a prefix-cache hit on a block whose K/V is not exactly the prompt's (other tokens, other salt
//     or extra key, not yet committed, non-cacheable) is caught.
//   - with KVB_CONFIG_HOST_CACHE the model also plays the KV store the engine keeps: what each device
//     and host block's K/V holds, moved by the drained offload / load pairs (run before anything writes
//     device K/V: before commits and swap-ins), so that a hit from the host level must find the prompt's
//     K/V once its load has run, and every offload / load moves committed, cacheable content.
// Any violation aborts, which libFuzzer reports as a crash with the input saved.
#include <algorithm>
#include <cinttypes>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "kvblock.h"
#include "kvbt_state.h"

namespace {

[[noreturn]] void die(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::fputs("fuzz_capi: ", stderr);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, " (last error: \"%s\")\n", kvb_last_error());
  std::abort();
}

#define REQUIRE(cond, ...) \
  do {                     \
    if (!(cond)) die(__VA_ARGS__); \
  } while (0)

struct Reader {
  const uint8_t* p;
  size_t n;
  bool empty() const { return n == 0; }
  uint8_t u8() {
    if (!n) return 0;
    --n;
    return *p++;
  }
  uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }
  uint32_t u32() { return u16() | (static_cast<uint32_t>(u16()) << 16); }
  uint64_t u64() { return u32() | (static_cast<uint64_t>(u32()) << 32); }
};

// ---- the test model -------------------------------------------------------------------------------

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h *= 0xbf58476d1ce4e5b9ULL;
  return h ^ (h >> 29);
}

struct MSeq {
  std::vector<int64_t> toks;
  uint64_t computed = 0;
  bool swapped = false;
  bool has_salt = false;
  uint64_t salt = 0;
  std::map<uint32_t, uint64_t> extra;
  uint32_t window = 0;
};

struct Model {
  uint32_t bs = 16, nblocks = 0, nhost = 0;
  bool noncache7 = false;
  bool host_cache = false;
  std::map<int64_t, MSeq> seqs;
  std::vector<uint64_t> content;  // per device block: descriptor of the committed content, 0 = none
  // Host cache: the K/V the engine's store holds (descriptors) per device and host block, and host hits
  // not yet checked (device block, descriptor the prompt needs): their loads are pending.
  std::vector<uint64_t> kv, host_kv;
  std::vector<std::pair<int32_t, uint64_t>> unverified;

  bool cacheable_block(const std::vector<int64_t>& t, uint32_t i, bool has_extra) const {
    if (has_extra || !noncache7) return true;
    for (uint32_t k = 0; k < bs; ++k)
      if (t[static_cast<size_t>(i) * bs + k] == 7) return false;
    return true;
  }
  // Descriptors of the full blocks of t (chain: salt, tokens, extra keys); 0 from the first block that
  // cannot be cached on.
  std::vector<uint64_t> descriptors(const std::vector<int64_t>& t, bool has_salt, uint64_t salt,
                                    const std::map<uint32_t, uint64_t>& extra) const {
    std::vector<uint64_t> d;
    uint64_t h = mix(mix(1, has_salt), has_salt ? salt : 0);
    bool ok = true;
    for (uint32_t i = 0; (static_cast<size_t>(i) + 1) * bs <= t.size(); ++i) {
      auto e = extra.find(i);
      bool has_extra = e != extra.end();
      ok = ok && cacheable_block(t, i, has_extra);
      for (uint32_t k = 0; k < bs; ++k) h = mix(h, static_cast<uint64_t>(t[static_cast<size_t>(i) * bs + k]));
      h = mix(mix(h, has_extra), has_extra ? e->second : 0);
      d.push_back(ok ? (h | 1) : 0);
    }
    return d;
  }
};

std::vector<int32_t> table_of(kvb_manager* m, int64_t id) {
  std::vector<int32_t> t(1024);
  size_t len = 0;
  kvb_status s = kvb_seq_block_table(m, id, t.data(), t.size(), &len);
  REQUIRE(s == KVB_OK, "block table of live seq %" PRId64 ": %s", id, kvb_status_string(s));
  t.resize(len);
  return t;
}

void check_info(kvb_manager* m, const Model& md, int64_t id) {
  const MSeq& q = md.seqs.at(id);
  kvb_seq_info info;
  kvb_seq_info_init(&info);
  kvb_status s = kvb_seq_get_info(m, id, &info);
  REQUIRE(s == KVB_OK, "get_info of live seq %" PRId64 ": %s", id, kvb_status_string(s));
  REQUIRE(info.num_tokens == q.toks.size(), "seq %" PRId64 ": %" PRIu64 " tokens, model %zu", id, info.num_tokens,
          q.toks.size());
  REQUIRE(info.num_computed == q.computed, "seq %" PRId64 ": %" PRIu64 " computed, model %" PRIu64, id,
          info.num_computed, q.computed);
  REQUIRE(info.location == (q.swapped ? KVB_SEQ_SWAPPED_OUT : KVB_SEQ_ON_DEVICE), "seq %" PRId64 ": location", id);
  REQUIRE(info.num_blocks == (q.toks.size() + md.bs - 1) / md.bs, "seq %" PRId64 ": %" PRIu64 " blocks", id,
          info.num_blocks);
  REQUIRE(info.window_tokens == q.window, "seq %" PRId64 ": window", id);
  if (!q.swapped) {
    std::vector<int32_t> t = table_of(m, id);
    REQUIRE(t.size() == info.num_blocks, "seq %" PRId64 ": table length", id);
    REQUIRE(!t.empty() && t.back() >= 0, "seq %" PRId64 ": last block released", id);
    for (int32_t b : t) REQUIRE(b >= -1 && b < static_cast<int32_t>(md.nblocks), "seq %" PRId64 ": block %d", id, b);
  }
}

// Drains the host cache's transfers with the given capacities and, when that succeeds, runs them on the
// model's KV store: offloads, then loads (kvblock.h's order). Every pair moves committed content; every
// host hit of an earlier allocate now holds the prompt's K/V.
kvb_status drain_host(kvb_manager* m, Model& md, size_t off_cap, size_t load_cap, bool null_off, bool null_counts) {
  auto off = std::unique_ptr<int32_t[]>(new int32_t[2 * off_cap + 1]());
  auto ld = std::unique_ptr<int32_t[]>(new int32_t[2 * load_cap + 1]());
  size_t no = SIZE_MAX, nl = SIZE_MAX;
  kvb_status s = kvb_drain_host_transfers(m, null_off ? nullptr : off.get(), off_cap, null_counts ? nullptr : &no,
                                          ld.get(), load_cap, &nl);
  if (s != KVB_OK) return s;
  REQUIRE(md.host_cache || (no == 0 && nl == 0), "drain_host_transfers: %zu offloads, %zu loads without a host cache",
          no, nl);
  REQUIRE(no <= off_cap && nl <= load_cap, "drain_host_transfers: counts beyond capacity");
  for (size_t i = 0; i < no; ++i) {
    const int32_t b = off[2 * i], h = off[2 * i + 1];
    REQUIRE(b >= 0 && b < static_cast<int32_t>(md.nblocks) && h >= 0 && h < static_cast<int32_t>(md.nhost),
            "offload pair (%d,%d)", b, h);
    REQUIRE(md.kv[b] != 0, "offload of device block %d, which holds no committed cacheable K/V", b);
    md.host_kv[h] = md.kv[b];
  }
  for (size_t i = 0; i < nl; ++i) {
    const int32_t h = ld[2 * i], d = ld[2 * i + 1];
    REQUIRE(d >= 0 && d < static_cast<int32_t>(md.nblocks) && h >= 0 && h < static_cast<int32_t>(md.nhost),
            "load pair (%d,%d)", h, d);
    REQUIRE(md.host_kv[h] != 0, "load from host block %d, which holds no committed cacheable K/V", h);
    // The loaded block is indexed on the device with that content, also where the sequence's window
    // released it at once (allocate could not see its id, and a later prompt can hit it).
    md.kv[d] = md.content[d] = md.host_kv[h];
  }
  for (const auto& u : md.unverified) {
    bool loaded = false;
    for (size_t i = 0; i < nl; ++i) loaded = loaded || ld[2 * i + 1] == u.first;
    REQUIRE(loaded, "hit on device block %d whose K/V is not the prompt's, and no load into it", u.first);
    REQUIRE(md.kv[u.first] == u.second, "host hit on device block %d: after the loads its K/V is not the prompt's",
            u.first);
  }
  md.unverified.clear();
  return s;
}

// The engine runs every pending transfer before the step writes K/V (commit) or a swap-in overwrites blocks.
void drain_host_all(kvb_manager* m, Model& md) {
  if (!md.host_cache) return;
  kvb_status s = drain_host(m, md, 4096, 4096, false, false);
  REQUIRE(s == KVB_OK, "drain_host_transfers: %s", kvb_status_string(s));
}

// ---- decoding helpers -----------------------------------------------------------------------------

int64_t pick_id(Reader& r) {
  uint8_t b = r.u8();
  if (b < 240) return b % 6;
  switch (b % 4) {
    case 0: return -1;
    case 1: return INT64_MIN;
    case 2: return INT64_MAX;
    default: return static_cast<int64_t>(r.u64());
  }
}

size_t pick_len(Reader& r, const Model& md) {
  uint8_t b = r.u8();
  if (b >= 250) return (b & 1) ? 0 : static_cast<size_t>(md.nblocks + 1) * md.bs;  // empty or too long
  return b % (md.bs * 5 + 3);
}

void make_tokens(Reader& r, std::vector<int64_t>& t, size_t n) {
  // Prompts share prefixes often: a prefix of one of two fixed streams, then a few random tokens.
  uint8_t mode = r.u8();
  size_t shared = mode & 0x80 ? n : (mode & 0x40 ? n / 2 : 0);
  t.resize(n);
  for (size_t i = 0; i < n; ++i)
    t[i] = i < shared ? static_cast<int64_t>((i * 5 + (mode & 1)) % 11) : static_cast<int64_t>(r.u8() % 9);
}

char primed_message[512];

// Leave a message that no call of the harness produces otherwise, so that a stale message cannot pass
// the check below.
void prime_last_error() {
  if (!primed_message[0]) {
    kvb_config c;
    kvb_config_init(&c);
    c.num_blocks = 1;
    c.watermark = 7.25f;
    kvb_manager* x = nullptr;
    (void)kvb_manager_create(&c, &x);  // "watermark 7.25 is not in [0, 1)"
    std::snprintf(primed_message, sizeof primed_message, "%s", kvb_last_error());
    REQUIRE(primed_message[0] != '\0', "priming kvb_last_error()");
    return;
  }
  kvb_config c;
  kvb_config_init(&c);
  c.num_blocks = 1;
  c.watermark = 7.25f;
  kvb_manager* x = nullptr;
  (void)kvb_manager_create(&c, &x);
}

void check_failure(kvb_status s, const char* what) {
  REQUIRE(s < 0 && s > KVB_ERR_INTERNAL, "%s: bad status %d", what, static_cast<int>(s));
  REQUIRE(kvb_last_error()[0] != '\0', "%s failed with %s but kvb_last_error() is empty", what,
          kvb_status_string(s));
  REQUIRE(std::strcmp(kvb_last_error(), primed_message) != 0, "%s failed with %s but left no message of its own",
          what, kvb_status_string(s));
}

// kvb_batch_append / kvb_batch_commit over up to 5 ids (any ids, repeats, NULL arrays), their statuses
// predicted by the model: the first bad id decides (unknown, swapped out, repeated), then over-commits;
// a batch append of valid ids succeeds or runs out of blocks. On success the model takes every
// sequence's token / commit, as for the per-sequence calls. (All-or-nothing is checked by the caller.)
kvb_status batch_decode_step(kvb_manager* m, Model& md, Reader& r, uint8_t b) {
  const bool append = b & 1;
  const size_t ns = r.u8() % 6;
  std::vector<int64_t> ids(ns + 1), tok(ns + 1);
  std::vector<size_t> counts(ns + 1);
  const uint8_t f = r.u8();
  for (size_t i = 0; i < ns; ++i) {
    ids[i] = pick_id(r);
    tok[i] = r.u8() % 9;
    auto it = md.seqs.find(ids[i]);
    const size_t unc = it == md.seqs.end() ? 0 : it->second.toks.size() - it->second.computed;
    const uint8_t c = r.u8();
    counts[i] = c >= 240 ? unc + 1 + c % 3 : (c & 1 ? unc : c % (unc + 1));
  }
  const bool null_ids = ns > 0 && (f & 0x0f) == 1, null_second = ns > 0 && (f & 0x0f) == 2;
  const bool all = !append && (f & 0x10);
  std::map<int64_t, std::vector<int32_t>> before;  // tables before a commit (a window may release blocks)
  kvb_status want = KVB_OK;
  if (null_ids || (append && null_second)) want = KVB_ERR_INVALID_ARGUMENT;
  std::vector<int64_t> seen;
  for (size_t i = 0; i < ns && want == KVB_OK; ++i) {
    auto it = md.seqs.find(ids[i]);
    if (it == md.seqs.end()) want = KVB_ERR_NO_SUCH_SEQUENCE;
    else if (it->second.swapped) want = KVB_ERR_BAD_STATE;
    else if (std::find(seen.begin(), seen.end(), ids[i]) != seen.end()) want = KVB_ERR_INVALID_ARGUMENT;
    seen.push_back(ids[i]);
    if (want == KVB_OK) before[ids[i]] = table_of(m, ids[i]);
  }
  if (!append && !all)
    for (size_t i = 0; i < ns && want == KVB_OK; ++i)
      if (counts[i] > md.seqs.at(ids[i]).toks.size() - md.seqs.at(ids[i]).computed) want = KVB_ERR_INVALID_ARGUMENT;
  prime_last_error();
  const int64_t* ip = null_ids ? nullptr : ids.data();
  kvb_status s = append ? kvb_batch_append(m, ip, null_second ? nullptr : tok.data(), ns)
                        : kvb_batch_commit(m, ip, all ? nullptr : counts.data(), ns);
  const char* name = append ? "batch_append" : "batch_commit";
  if (want != KVB_OK || !append) {
    REQUIRE(s == want, "%s: %s, model %s", name, kvb_status_string(s), kvb_status_string(want));
  } else {
    REQUIRE(s == KVB_OK || s == KVB_ERR_OUT_OF_BLOCKS, "%s: %s", name, kvb_status_string(s));
  }
  if (s != KVB_OK) return s;
  for (size_t i = 0; i < ns; ++i) {
    MSeq& q = md.seqs.at(ids[i]);
    if (append) {
      const std::vector<int32_t> t = table_of(m, ids[i]);
      for (size_t k = q.toks.size() / md.bs; k < t.size(); ++k)
        if (t[k] >= 0) md.content[t[k]] = 0;
      q.toks.push_back(tok[i]);
    } else {
      const uint64_t old = q.computed;
      q.computed = all ? q.toks.size() : q.computed + counts[i];
      const std::vector<int32_t>& t = before.at(ids[i]);
      std::vector<uint64_t> d = md.descriptors(q.toks, q.has_salt, q.salt, q.extra);
      for (uint64_t k = old / md.bs; k < q.computed / md.bs; ++k) {
        if (t[k] >= 0) md.kv[t[k]] = d[k];
        if (t[k] >= 0 && d[k]) md.content[t[k]] = d[k];
      }
    }
  }
  for (size_t i = 0; i < ns; ++i) check_info(m, md, ids[i]);
  return s;
}

enum Op {
  OP_ALLOCATE, OP_CAN_ALLOCATE, OP_COMMIT, OP_APPEND, OP_CAN_APPEND, OP_FREE, OP_TABLE, OP_HASH, OP_FORK,
  OP_DRAIN_COPIES, OP_ROLLBACK, OP_WINDOW, OP_SWAP_OUT, OP_SWAP_IN, OP_BATCH, OP_STATS, OP_EVENTS, OP_RESET,
  OP_EXTRA_KEY, OP_INFO, OP_NUM_FREE, OP_NULL_MANAGER, OP_DRAIN_HOST, OP_COUNT
};

const char* const kOpNames[OP_COUNT] = {"allocate", "can_allocate", "commit", "append", "can_append", "free",
                                        "block_table", "block_hash", "fork", "drain_copies", "rollback",
                                        "set_window", "swap_out", "swap_in", "batch_export", "get_stats",
                                        "drain_events", "reset_prefix_cache", "set_extra_key", "get_info",
                                        "num_free_blocks", "null_manager", "drain_host_transfers"};

template <class T>
std::unique_ptr<T[]> exact_buffer(size_t n) {  // exactly n elements, so ASan sees any overrun
  return std::unique_ptr<T[]>(new T[n]());
}

void run(const uint8_t* data, size_t size) {
  Reader r{data, size};
  Model md;
  static const bool trace = std::getenv("KVB_FUZZ_TRACE") != nullptr;  // replaying a crash: print the calls
  static const int64_t kNonCacheable[] = {7};

  // ---- configuration (an invalid one first, sometimes) ----
  uint8_t c0 = r.u8(), c1 = r.u8(), c2 = r.u8(), c3 = r.u8();
  kvb_config cfg;
  kvb_config_init(&cfg);
  static const uint32_t kBlockSizes[] = {1, 2, 4, 8, 16};
  static const float kWatermarks[] = {0.0f, 0.0f, 0.1f, 0.3f};
  cfg.block_size = kBlockSizes[c0 % 5];
  cfg.num_blocks = 1 + c1 % 40;
  cfg.num_host_blocks = (c2 & 3) ? c2 % 24 : 0;
  cfg.watermark = kWatermarks[(c0 >> 3) & 3];
  cfg.flags = (c3 & 1 ? KVB_CONFIG_KEYED_INDEX : 0) | (c3 & 2 ? KVB_CONFIG_EVENTS : 0);
  cfg.event_capacity = 1 + ((c3 >> 2) & 15);
  if (cfg.num_host_blocks > 0 && (c2 & 0x40)) {  // host blocks as a second prefix-cache level
    static const uint32_t kTwinPercents[] = {0, 1, 50, 100};
    cfg.flags |= KVB_CONFIG_HOST_CACHE;
    cfg.host_cache_twin_percent = kTwinPercents[c1 >> 6];
  }
  cfg.index_seed = 0x1234;
  if (c0 & 0x80) {
    cfg.non_cacheable_tokens = kNonCacheable;
    cfg.num_non_cacheable_tokens = 1;
  }
  if ((c2 & 0xf0) == 0xf0) {  // an invalid configuration must be refused cleanly
    kvb_config bad = cfg;
    kvb_manager* bm = reinterpret_cast<kvb_manager*>(&bad);  // must be overwritten with NULL
    const kvb_config* pass = &bad;
    switch (c3 >> 6) {
      case 0: bad.block_size = (c1 & 1) ? 0 : (1u << 17); break;
      case 1: bad.num_blocks = 0; bad.watermark = (c1 & 1) ? 1.0f : -0.5f; break;
      case 2:
        if (c1 & 2) {  // a host cache without host blocks, or a twin share over 100%
          bad.flags = KVB_CONFIG_HOST_CACHE;
          if (c1 & 4) bad.num_host_blocks = 0;
          else bad.host_cache_twin_percent = 101;
          break;
        }
        bad.flags = 0x80;
        bad.struct_size = (c1 & 1) ? 4 : bad.struct_size;
        break;
      default:
        if (c1 & 2) {  // KV cache groups that cannot run: a window of 0, sinks on a full group, NULL, host tier
          static kvb_group_spec specs[2];
          kvb_group_spec_init(&specs[0]);
          kvb_group_spec_init(&specs[1]);
          specs[1].kind = (c1 & 4) ? KVB_GROUP_WINDOW : 9;
          specs[0].sink_tokens = (c1 & 8) ? 3 : 0;
          bad.groups = (c1 & 16) ? nullptr : specs;
          bad.num_groups = 2;
        } else if (c1 & 1) {
          pass = nullptr;
        } else {
          bad.non_cacheable_tokens = nullptr;
          bad.num_non_cacheable_tokens = 3;
        }
        break;
    }
    prime_last_error();
    kvb_status s = kvb_manager_create(pass, &bm);
    check_failure(s, "manager_create(invalid)");
    REQUIRE(bm == nullptr, "failed manager_create left *out non-NULL");
  }
  kvb_manager* m = nullptr;
  kvb_status cs = kvb_manager_create(&cfg, &m);
  REQUIRE(cs == KVB_OK && m, "manager_create: %s", kvb_status_string(cs));
  md.bs = cfg.block_size;
  md.nblocks = cfg.num_blocks;
  md.nhost = cfg.num_host_blocks;
  md.noncache7 = cfg.num_non_cacheable_tokens > 0;
  md.content.assign(md.nblocks, 0);
  md.host_cache = (cfg.flags & KVB_CONFIG_HOST_CACHE) != 0;
  md.kv.assign(md.nblocks, 0);
  md.host_kv.assign(md.nhost, 0);
  if (trace)
    std::fprintf(stderr, "config: block_size %u, %u blocks, %u host, watermark %g, flags %u, non-cacheable %d, twins %u%%\n",
                 cfg.block_size, cfg.num_blocks, cfg.num_host_blocks, static_cast<double>(cfg.watermark), cfg.flags,
                 md.noncache7, cfg.host_cache_twin_percent);
  const uint32_t bs = md.bs;
  // Block hashes in the before/after snapshots cost one failing call per unhashed block: small pools only.
  kvbt_state_hashes = md.nblocks <= 8 || (c2 & 0x08);

  std::vector<int64_t> toks;
  kvbt_state before{}, after{};
  std::vector<int64_t> snap_ids;

  for (int step = 0; step < 256 && !r.empty(); ++step) {
    const Op op = static_cast<Op>(r.u8() % OP_COUNT);
    const char* what = kOpNames[op];
    // The forward step that wrote the K/V a commit reports ran after every pending transfer, and so does a
    // swap-in (kvblock.h's order): the engine drains them first.
    if (op == OP_COMMIT || op == OP_BATCH || op == OP_SWAP_IN) drain_host_all(m, md);
    snap_ids.clear();
    for (const auto& e : md.seqs) snap_ids.push_back(e.first);
    snap_ids.push_back(-1);
    kvbt_state_take(m, snap_ids.data(), snap_ids.size(), 0, &before);
    prime_last_error();
    kvb_status s = KVB_OK;
    bool predicted = false;  // the model checked the status itself
    int64_t touched = INT64_MIN;
    bool touched_valid = false;

    switch (op) {
      case OP_ALLOCATE:
      case OP_CAN_ALLOCATE: {
        int64_t id = pick_id(r);
        size_t n = pick_len(r, md);
        make_tokens(r, toks, n);
        uint8_t f = r.u8();
        kvb_seq_options o;
        kvb_seq_options_init(&o);
        uint32_t ekb[3];
        uint64_t ek[3];
        bool opts_valid = true;
        if (f & 1) {
          o.has_cache_salt = 1;
          o.cache_salt = r.u8() % 3;
        }
        if (f & 2) {
          o.num_extra_keys = 1 + (f >> 6) % 3;
          uint32_t base = r.u8() % 4;
          for (size_t i = 0; i < o.num_extra_keys; ++i) {
            ekb[i] = base + static_cast<uint32_t>(i) * (1 + (f >> 5 & 1));
            ek[i] = r.u8() % 3;
          }
          o.extra_key_blocks = ekb;
          o.extra_keys = ek;
          if ((f & 0x30) == 0x30) { ekb[0] = ekb[o.num_extra_keys - 1] + 1; opts_valid = o.num_extra_keys == 1; }
        }
        if (f & 4) {
          o.window_tokens = r.u8() % (4 * bs);
          o.sink_tokens = r.u8() % (2 * bs);
          if (o.window_tokens == 0 && o.sink_tokens != 0) opts_valid = false;
        }
        if ((f & 0x18) == 0x18) { o.has_cache_salt = 2; opts_valid = false; }
        if ((f & 0x18) == 0x10 && r.u8() < 32) { o.struct_size = 3; opts_valid = false; }
        const kvb_seq_options* po = (f & 7) ? &o : nullptr;
        if (!po) opts_valid = true;
        const int64_t* tp = (f & 0x08) && (f & 0x10) == 0 && r.u8() < 40 ? nullptr : toks.data();
        if (n == 0 && tp == toks.data() && (r.u8() & 1)) tp = nullptr;
        if (trace)
          std::fprintf(stderr, "  allocate id %" PRId64 " n %zu tokens %s opts %s salt %u extra %zu window %u sink %u size %u\n",
                       id, n, tp ? "set" : "NULL", po ? "set" : "NULL", o.has_cache_salt, o.num_extra_keys,
                       o.window_tokens, o.sink_tokens, o.struct_size);
        const bool args_valid = opts_valid && n > 0 && (tp || n == 0);
        size_t cached = SIZE_MAX, cached2 = SIZE_MAX;
        kvb_status cs2 = kvb_seq_can_allocate_ex(m, tp, n, po, &cached2);
        if (op == OP_CAN_ALLOCATE) {
          s = cs2;
          predicted = true;
          if (!args_valid) REQUIRE(s == KVB_ERR_INVALID_ARGUMENT, "can_allocate(invalid args): %s", kvb_status_string(s));
          else REQUIRE(s == KVB_OK || s == KVB_ERR_OUT_OF_BLOCKS, "can_allocate: %s", kvb_status_string(s));
          break;
        }
        prime_last_error();
        s = kvb_seq_allocate_ex(m, id, tp, n, po, (r.u8() & 1) ? &cached : nullptr);
        predicted = true;
        if (!args_valid) {
          REQUIRE(s == KVB_ERR_INVALID_ARGUMENT, "allocate(invalid args): %s", kvb_status_string(s));
        } else if (md.seqs.count(id)) {
          REQUIRE(s == KVB_ERR_SEQUENCE_EXISTS, "allocate(existing id): %s", kvb_status_string(s));
        } else {
          REQUIRE(s == KVB_OK || s == KVB_ERR_OUT_OF_BLOCKS, "allocate: %s", kvb_status_string(s));
          REQUIRE((s == KVB_OK) == (cs2 == KVB_OK), "allocate gave %s but can_allocate said %s",
                  kvb_status_string(s), kvb_status_string(cs2));
        }
        if (s != KVB_OK) break;
        MSeq q;
        q.toks = toks;
        q.has_salt = po && o.has_cache_salt;
        q.salt = o.cache_salt;
        if (po)
          for (size_t i = 0; i < o.num_extra_keys; ++i) q.extra[ekb[i]] = ek[i];
        q.window = po ? o.window_tokens : 0;
        kvb_seq_info info;
        kvb_seq_info_init(&info);
        REQUIRE(kvb_seq_get_info(m, id, &info) == KVB_OK, "get_info after allocate");
        const uint64_t hit = info.num_cached;
        if (cached != SIZE_MAX) REQUIRE(cached == hit, "allocate reported %zu cached, info %" PRIu64, cached, hit);
        REQUIRE(hit == cached2, "allocate hit %" PRIu64 " tokens, can_allocate predicted %zu", hit, cached2);
        REQUIRE(hit % bs == 0 && hit < n, "allocate: %" PRIu64 " cached tokens of %zu", hit, n);
        q.computed = hit;
        std::vector<int32_t> t = table_of(m, id);
        std::vector<uint64_t> d = md.descriptors(toks, q.has_salt, q.salt, q.extra);
        for (uint32_t i = 0; i < hit / bs; ++i) {
          if (t[i] < 0) continue;  // a hit the sequence's sliding window released at once
          REQUIRE(d[i] != 0, "allocate: hit on block %u of a prompt that is not cacheable there", i);
          if (md.host_cache && md.content[t[i]] != d[i]) {
            // A hit from the host level: its load is pending (and holds the block); checked once drained.
            md.unverified.emplace_back(t[i], d[i]);
            md.content[t[i]] = d[i];
            continue;
          }
          REQUIRE(md.content[t[i]] == d[i],
                  "allocate seq %" PRId64 ": prefix hit on block %d at index %u whose K/V is not the prompt's", id,
                  t[i], i);
        }
        for (size_t i = hit / bs; i < t.size(); ++i)
          if (t[i] >= 0) md.content[t[i]] = 0;
        md.seqs[id] = q;
        touched = id;
        touched_valid = true;
        break;
      }
      case OP_COMMIT: {
        int64_t id = pick_id(r);
        uint8_t b = r.u8();
        auto it = md.seqs.find(id);
        size_t n = b % (2 * bs + 1);
        if (it != md.seqs.end() && (b & 0x80)) n = it->second.toks.size() - it->second.computed;  // all
        // The table before the call: a window may release the blocks this very commit completes.
        std::vector<int32_t> t;
        if (it != md.seqs.end() && !it->second.swapped) t = table_of(m, id);
        s = kvb_seq_commit(m, id, n);
        predicted = true;
        if (it == md.seqs.end()) { REQUIRE(s == KVB_ERR_NO_SUCH_SEQUENCE, "commit(unknown): %s", kvb_status_string(s)); break; }
        MSeq& q = it->second;
        if (q.swapped) { REQUIRE(s == KVB_ERR_BAD_STATE, "commit(swapped): %s", kvb_status_string(s)); break; }
        if (n > q.toks.size() - q.computed) { REQUIRE(s == KVB_ERR_INVALID_ARGUMENT, "commit(too many): %s", kvb_status_string(s)); break; }
        REQUIRE(s == KVB_OK, "commit: %s", kvb_status_string(s));
        uint64_t old = q.computed;
        q.computed += n;
        std::vector<uint64_t> d = md.descriptors(q.toks, q.has_salt, q.salt, q.extra);
        for (uint64_t i = old / bs; i < q.computed / bs; ++i) {
          if (t[i] >= 0) md.kv[t[i]] = d[i];
          if (t[i] >= 0 && d[i]) md.content[t[i]] = d[i];
        }
        touched = id;
        touched_valid = true;
        break;
      }
      case OP_APPEND:
      case OP_CAN_APPEND: {
        int64_t id = pick_id(r);
        size_t n = r.u8() % (3 * bs + 2);
        make_tokens(r, toks, n);
        auto it = md.seqs.find(id);
        kvb_status ca = kvb_seq_can_append(m, id, n);
        if (op == OP_CAN_APPEND) {
          s = ca;
          predicted = true;
          if (it == md.seqs.end()) REQUIRE(s == KVB_ERR_NO_SUCH_SEQUENCE, "can_append(unknown): %s", kvb_status_string(s));
          else if (it->second.swapped) REQUIRE(s == KVB_ERR_BAD_STATE, "can_append(swapped): %s", kvb_status_string(s));
          else REQUIRE(s == KVB_OK || s == KVB_ERR_OUT_OF_BLOCKS, "can_append: %s", kvb_status_string(s));
          break;
        }
        const bool null_tokens = n > 0 && r.u8() < 20;
        const int64_t* tp = null_tokens ? nullptr : toks.data();
        std::vector<int32_t> old_t;
        if (it != md.seqs.end() && !it->second.swapped) old_t = table_of(m, id);
        prime_last_error();
        s = kvb_seq_append(m, id, tp, n);
        predicted = true;
        if (null_tokens) { REQUIRE(s == KVB_ERR_INVALID_ARGUMENT, "append(NULL tokens): %s", kvb_status_string(s)); break; }
        if (it == md.seqs.end()) { REQUIRE(s == KVB_ERR_NO_SUCH_SEQUENCE, "append(unknown): %s", kvb_status_string(s)); break; }
        MSeq& q = it->second;
        if (q.swapped) { REQUIRE(s == KVB_ERR_BAD_STATE, "append(swapped): %s", kvb_status_string(s)); break; }
        REQUIRE(s == KVB_OK || s == KVB_ERR_OUT_OF_BLOCKS, "append: %s", kvb_status_string(s));
        REQUIRE((s == KVB_OK) == (ca == KVB_OK), "append gave %s but can_append said %s", kvb_status_string(s),
                kvb_status_string(ca));
        if (s != KVB_OK) break;
        std::vector<int32_t> t = table_of(m, id);
        // Blocks written by this append: new or copied ones, and the partial last block written in place.
        size_t first_written = q.toks.size() / bs;
        if (n > 0)
          for (size_t i = first_written; i < t.size(); ++i)
            if (t[i] >= 0) md.content[t[i]] = 0;
        q.toks.insert(q.toks.end(), toks.begin(), toks.end());
        touched = id;
        touched_valid = true;
        break;
      }
      case OP_FREE: {
        int64_t id = pick_id(r);
        s = kvb_seq_free(m, id);
        predicted = true;
        if (md.seqs.erase(id)) REQUIRE(s == KVB_OK, "free: %s", kvb_status_string(s));
        else REQUIRE(s == KVB_ERR_NO_SUCH_SEQUENCE, "free(unknown or double): %s", kvb_status_string(s));
        break;
      }
      case OP_TABLE: {
        int64_t id = pick_id(r);
        uint8_t b = r.u8();
        size_t cap = b % 12;
        auto buf = exact_buffer<int32_t>(cap);
        size_t len = SIZE_MAX;
        const uint8_t g = r.u8();  // the group variant: group 0 is the table, other groups do not exist here
        if (g & 1)
          s = kvb_seq_block_table_group(m, id, g >> 6, (b & 0x40) ? nullptr : buf.get(), cap, (b & 0x80) ? nullptr : &len);
        else
          s = kvb_seq_block_table(m, id, (b & 0x40) ? nullptr : buf.get(), cap, (b & 0x80) ? nullptr : &len);
        if (s == KVB_OK) REQUIRE(len <= cap, "block_table: len %zu > capacity %zu", len, cap);
        REQUIRE(!((g & 1) && (g >> 6) > 0) || s == KVB_ERR_INVALID_ARGUMENT || s == KVB_ERR_NO_SUCH_SEQUENCE,
                "block_table_group: group %u of a manager without groups gave %s", g >> 6, kvb_status_string(s));
        break;
      }
      case OP_HASH: {
        uint8_t b = r.u8();
        int32_t block = b < 200 ? static_cast<int32_t>(b % (md.nblocks + 1)) : (b & 1 ? -1 : INT32_MAX);
        uint64_t h = 0;
        s = kvb_block_hash(m, block, (b & 0x40) && r.u8() < 30 ? nullptr : &h);
        break;
      }
      case OP_FORK: {
        int64_t parent = pick_id(r), child = pick_id(r);
        uint8_t b = r.u8();
        auto it = md.seqs.find(parent);
        size_t pos = b % (3 * bs + 1);
        if (it != md.seqs.end() && (b & 0x80)) pos = it->second.computed;
        if (b & 0x40) s = kvb_seq_fork(m, parent, child), pos = it != md.seqs.end() ? it->second.toks.size() : 0;
        else s = kvb_seq_fork_at(m, parent, child, pos);
        if (it == md.seqs.end()) { REQUIRE(s == KVB_ERR_NO_SUCH_SEQUENCE, "fork(unknown parent): %s", kvb_status_string(s)); predicted = true; break; }
        const MSeq& p = it->second;
        if (p.swapped) { REQUIRE(s == KVB_ERR_BAD_STATE, "fork(swapped parent): %s", kvb_status_string(s)); predicted = true; break; }
        if (child == parent || md.seqs.count(child)) { REQUIRE(s == KVB_ERR_SEQUENCE_EXISTS, "fork(existing child): %s", kvb_status_string(s)); predicted = true; break; }
        if (pos == 0 || pos > p.toks.size()) { REQUIRE(s == KVB_ERR_INVALID_ARGUMENT, "fork(bad position): %s", kvb_status_string(s)); predicted = true; break; }
        if (pos > p.computed) { REQUIRE(s == KVB_ERR_BAD_STATE, "fork(uncommitted): %s", kvb_status_string(s)); predicted = true; break; }
        // Otherwise OK, or BAD_STATE where the position reaches blocks released by a sliding window.
        if (s != KVB_OK) break;
        MSeq c = p;
        c.toks.resize(pos);
        c.computed = pos;
        std::map<uint32_t, uint64_t> ex = p.extra;
        c.extra = ex;
        md.seqs[child] = c;
        touched = child;
        touched_valid = true;
        break;
      }
      case OP_DRAIN_COPIES: {
        uint8_t b = r.u8();
        size_t cap = b % 8;
        auto buf = exact_buffer<int32_t>(2 * cap);
        size_t np = SIZE_MAX;
        s = kvb_drain_copies(m, (b & 0x40) ? nullptr : buf.get(), cap, (b & 0x80) ? nullptr : &np);
        if (s == KVB_OK)
          for (size_t i = 0; i < 2 * np; ++i)
            REQUIRE(buf[i] >= 0 && buf[i] < static_cast<int32_t>(md.nblocks), "drain_copies: block %d", buf[i]);
        break;
      }
      case OP_ROLLBACK: {
        int64_t id = pick_id(r);
        size_t n = r.u8() % (2 * bs + 2);
        auto it = md.seqs.find(id);
        bool released = false;
        if (it != md.seqs.end() && !it->second.swapped)
          for (int32_t b : table_of(m, id)) released = released || b < 0;
        s = kvb_seq_rollback(m, id, n);
        if (it == md.seqs.end()) { REQUIRE(s == KVB_ERR_NO_SUCH_SEQUENCE, "rollback(unknown): %s", kvb_status_string(s)); predicted = true; break; }
        MSeq& q = it->second;
        if (q.swapped) { REQUIRE(s == KVB_ERR_BAD_STATE, "rollback(swapped): %s", kvb_status_string(s)); predicted = true; break; }
        if (n > 0 && n >= q.toks.size()) { REQUIRE(s == KVB_ERR_INVALID_ARGUMENT, "rollback(all): %s", kvb_status_string(s)); predicted = true; break; }
        // Without released blocks (a window, even one switched off since, may have released some) it succeeds.
        if (!released) { REQUIRE(s == KVB_OK, "rollback: %s", kvb_status_string(s)); predicted = true; }
        if (s != KVB_OK) break;
        q.toks.resize(q.toks.size() - n);
        q.computed = std::min<uint64_t>(q.computed, q.toks.size());
        touched = id;
        touched_valid = true;
        break;
      }
      case OP_WINDOW: {
        int64_t id = pick_id(r);
        uint32_t w = r.u8() % (4 * bs), sink = r.u8() % (2 * bs);
        if (r.u8() & 1) sink = 0;
        s = kvb_seq_set_window(m, id, w, sink);
        auto it = md.seqs.find(id);
        predicted = true;
        if (it == md.seqs.end()) { REQUIRE(s == KVB_ERR_NO_SUCH_SEQUENCE, "set_window(unknown): %s", kvb_status_string(s)); break; }
        if (it->second.swapped) { REQUIRE(s == KVB_ERR_BAD_STATE, "set_window(swapped): %s", kvb_status_string(s)); break; }
        if (w == 0 && sink != 0) { REQUIRE(s == KVB_ERR_INVALID_ARGUMENT, "set_window(sink, no window): %s", kvb_status_string(s)); break; }
        // Turning a window off after it released blocks may be refused (BAD_STATE).
        REQUIRE(s == KVB_OK || (w == 0 && s == KVB_ERR_BAD_STATE), "set_window: %s", kvb_status_string(s));
        if (s == KVB_OK) it->second.window = w;
        touched = id;
        touched_valid = s == KVB_OK;
        break;
      }
      case OP_SWAP_OUT:
      case OP_SWAP_IN: {
        int64_t id = pick_id(r);
        uint8_t b = r.u8();
        size_t cap = (b & 0x20) ? (b % 5) : 4096;
        auto buf = exact_buffer<int32_t>(2 * cap);
        size_t np = SIZE_MAX;
        kvb_availability av = KVB_AVAIL_NEVER;
        kvb_status cs2;
        std::vector<int32_t> old_t;
        auto it = md.seqs.find(id);
        if (op == OP_SWAP_OUT) {
          cs2 = kvb_seq_can_swap_out(m, id, (b & 0x40) && r.u8() < 40 ? nullptr : &av);
          prime_last_error();
          if (it != md.seqs.end() && !it->second.swapped) old_t = table_of(m, id);
          s = kvb_seq_swap_out(m, id, (b & 0x80) ? nullptr : buf.get(), cap, (b & 0x10) && r.u8() < 40 ? nullptr : &np);
        } else {
          cs2 = kvb_seq_can_swap_in(m, id, (b & 0x40) && r.u8() < 40 ? nullptr : &av);
          prime_last_error();
          s = kvb_seq_swap_in(m, id, (b & 0x80) ? nullptr : buf.get(), cap, (b & 0x10) && r.u8() < 40 ? nullptr : &np);
        }
        (void)cs2;
        if (it == md.seqs.end()) { REQUIRE(s == KVB_ERR_NO_SUCH_SEQUENCE || s == KVB_ERR_INVALID_ARGUMENT, "swap(unknown): %s", kvb_status_string(s)); predicted = s == KVB_ERR_NO_SUCH_SEQUENCE; break; }
        if (s != KVB_OK) break;
        REQUIRE(np <= cap, "swap: %zu pairs > capacity %zu", np, cap);
        MSeq& q = it->second;
        if (op == OP_SWAP_OUT) {
          REQUIRE(!q.swapped, "swap_out of a swapped sequence succeeded");
          for (size_t i = 0; i < np; ++i) {
            REQUIRE(buf[2 * i] >= 0 && buf[2 * i] < static_cast<int32_t>(md.nblocks), "swap_out: device block %d", buf[2 * i]);
            REQUIRE(buf[2 * i + 1] >= 0 && buf[2 * i + 1] < static_cast<int32_t>(md.nhost), "swap_out: host block %d", buf[2 * i + 1]);
          }
          for (size_t i = 0; i < np; ++i) md.host_kv[buf[2 * i + 1]] = md.kv[buf[2 * i]];  // run the pairs
          q.swapped = true;
        } else {
          REQUIRE(q.swapped, "swap_in of a sequence on device succeeded");
          q.swapped = false;
          for (size_t i = 0; i < np; ++i) {
            REQUIRE(buf[2 * i] >= 0 && buf[2 * i] < static_cast<int32_t>(md.nhost), "swap_in: host block %d", buf[2 * i]);
            REQUIRE(buf[2 * i + 1] >= 0 && buf[2 * i + 1] < static_cast<int32_t>(md.nblocks), "swap_in: device block %d", buf[2 * i + 1]);
          }
          // Offloads of blocks this swap-in evicted run before its pairs overwrite them.
          drain_host_all(m, md);
          for (size_t i = 0; i < np; ++i) md.kv[buf[2 * i + 1]] = md.host_kv[buf[2 * i]];
          // The swapped-in blocks hold what was swapped out (kv: the store's bytes, rewritten only by a
          // commit): the committed full blocks, and also a block that a fork_at child shares partially
          // but that its parent had filled and committed (its K/V and hash travel with it, so the
          // manager may index it again).
          std::vector<int32_t> t = table_of(m, id);
          std::vector<uint64_t> d = md.descriptors(q.toks, q.has_salt, q.salt, q.extra);
          for (size_t i = 0; i < t.size(); ++i) {
            if (t[i] < 0) continue;
            if (i < q.computed / bs) REQUIRE(md.kv[t[i]] == d[i], "swap_in: block %zu lost its K/V", i);
            md.content[t[i]] = md.kv[t[i]];
          }
        }
        touched = id;
        touched_valid = true;
        break;
      }
      case OP_BATCH: {
        uint8_t b = r.u8();
        if (b >= 200) {  // the batched decode calls instead of batch_export
          what = (b & 1) ? "batch_append" : "batch_commit";
          s = batch_decode_step(m, md, r, b);
          predicted = true;
          break;
        }
        size_t ns = b % 5;
        std::vector<int64_t> ids(ns + 1);
        for (size_t i = 0; i < ns; ++i) ids[i] = pick_id(r);
        uint8_t f = r.u8();
        kvb_batch batch;
        kvb_batch_init(&batch);
        batch.max_blocks_per_seq = r.u8() % 10;
        batch.slot_capacity = r.u8() % 40;
        auto bt = exact_buffer<int32_t>(ns * batch.max_blocks_per_seq);
        auto sl = exact_buffer<int32_t>(ns);
        auto qs = exact_buffer<int32_t>(ns + 1);
        auto sm = exact_buffer<int64_t>(batch.slot_capacity);
        batch.block_tables = (f & 1) ? bt.get() : nullptr;
        batch.seq_lens = (f & 2) ? sl.get() : nullptr;
        batch.query_start = (f & 4) ? qs.get() : nullptr;
        batch.slot_mapping = (f & 8) ? sm.get() : nullptr;
        if ((f & 0x30) == 0x30) batch.struct_size = 8;
        const uint32_t group = (f & 0x30) == 0x20 ? 1 : 0;  // KV cache group (this manager has none)
        batch.group = group;
        s = kvb_batch_export(m, (f & 0x40) && ns ? nullptr : ids.data(), ns, (f & 0x80) && r.u8() < 40 ? nullptr : &batch);
        REQUIRE(s != KVB_OK || group == 0, "batch: group 1 of a manager without groups was accepted");
        for (size_t i = 0; i < ns; ++i)
          for (size_t j = 0; j < i; ++j)
            REQUIRE(s != KVB_OK || ids[i] != ids[j], "batch: seq %" PRId64 " listed twice was accepted", ids[i]);
        if (s == KVB_OK && batch.slot_mapping)
          for (size_t i = 0; i < batch.num_slots; ++i)
            REQUIRE(sm[i] >= 0 && sm[i] < static_cast<int64_t>(md.nblocks) * bs, "batch: slot %" PRId64, sm[i]);
        break;
      }
      case OP_STATS: {
        uint8_t b = r.u8();
        kvb_stats st;
        kvb_stats_init(&st);
        if (b & 1) st.struct_size = b & 2 ? 0 : 8;
        s = kvb_get_stats(m, (b & 4) && (b & 8) ? nullptr : &st);
        if (s == KVB_OK) {
          REQUIRE(st.free_blocks + st.used_blocks == md.nblocks, "stats: free + used != num_blocks");
          REQUIRE(st.num_seqs == md.seqs.size(), "stats: %" PRIu64 " seqs, model %zu", st.num_seqs, md.seqs.size());
          REQUIRE(st.cached_free_blocks <= st.free_blocks, "stats: cached free > free");
          REQUIRE(st.free_host_blocks <= md.nhost, "stats: free host blocks");
          if (!(b & 1)) {  // the host cache's fields are covered by the full struct size
            REQUIRE(st.free_host_blocks + st.cached_host_blocks <= md.nhost, "stats: free + cached host blocks");
            REQUIRE(st.device_hit_tokens + st.host_hit_tokens == st.hit_tokens, "stats: device + host hits != hits");
            REQUIRE(md.host_cache || (st.host_hit_tokens == 0 && st.offloaded_blocks == 0 && st.loaded_blocks == 0 &&
                                      st.cached_host_blocks == 0),
                    "stats: host cache activity without KVB_CONFIG_HOST_CACHE");
          }
        }
        break;
      }
      case OP_EVENTS: {
        uint8_t b = r.u8();
        size_t cap = b % 6, tcap = r.u8() % (3 * bs + 1);
        auto ev = exact_buffer<kvb_event>(cap);
        auto tk = exact_buffer<int64_t>(tcap);
        size_t ne = SIZE_MAX;
        uint64_t dropped = 0;
        const uint8_t v = r.u8();  // the group variant, with or without the groups array
        auto grp = exact_buffer<uint32_t>(cap);
        if (v & 1)
          s = kvb_drain_events_group(m, (b & 0x40) ? nullptr : ev.get(), (v & 2) ? nullptr : grp.get(), cap,
                                     (b & 0x80) ? nullptr : tk.get(), tcap, (b & 0x20) && r.u8() < 40 ? nullptr : &ne,
                                     (b & 0x10) ? nullptr : &dropped);
        else
          s = kvb_drain_events(m, (b & 0x40) ? nullptr : ev.get(), cap, (b & 0x80) ? nullptr : tk.get(), tcap,
                               (b & 0x20) && r.u8() < 40 ? nullptr : &ne, (b & 0x10) ? nullptr : &dropped);
        if (s == KVB_OK)
          for (size_t i = 0; i < ne; ++i) {
            REQUIRE(ev[i].token_offset + ev[i].num_tokens <= tcap, "drain_events: tokens beyond capacity");
            REQUIRE(!(v & 1) || (v & 2) || grp[i] == 0, "drain_events_group: group %u without groups", grp[i]);
          }
        break;
      }
      case OP_RESET: {
        s = kvb_reset_prefix_cache(m);
        predicted = true;
        size_t nf = 0;
        kvb_num_free_blocks(m, &nf);
        if (s == KVB_OK) {
          for (auto& e : md.seqs) REQUIRE(e.second.swapped, "reset_prefix_cache succeeded with a sequence on device");
          std::fill(md.content.begin(), md.content.end(), 0);
        } else {
          REQUIRE(s == KVB_ERR_BAD_STATE, "reset_prefix_cache: %s", kvb_status_string(s));
        }
        break;
      }
      case OP_EXTRA_KEY: {
        int64_t id = pick_id(r);
        uint32_t bi = r.u8() % 6;
        uint64_t key = r.u8() % 3;
        s = kvb_seq_set_extra_key(m, id, bi, key);
        auto it = md.seqs.find(id);
        if (it == md.seqs.end()) { REQUIRE(s == KVB_ERR_NO_SUCH_SEQUENCE, "set_extra_key(unknown): %s", kvb_status_string(s)); predicted = true; break; }
        if (s == KVB_OK) {
          it->second.extra[bi] = key;
          touched = id;
          touched_valid = true;
        }
        break;
      }
      case OP_INFO: {
        int64_t id = pick_id(r);
        uint8_t b = r.u8();
        kvb_seq_info info;
        kvb_seq_info_init(&info);
        if (b & 1) info.struct_size = 4;
        s = kvb_seq_get_info(m, id, (b & 2) && (b & 4) ? nullptr : &info);
        break;
      }
      case OP_NUM_FREE: {
        size_t nf = 0;
        s = kvb_num_free_blocks(m, (r.u8() & 1) ? nullptr : &nf);
        break;
      }
      case OP_NULL_MANAGER: {
        size_t x = 0;
        int32_t buf[4];
        switch (r.u8() % 6) {
          case 0: s = kvb_seq_allocate(nullptr, 0, toks.data(), toks.size(), &x); break;
          case 1: s = kvb_seq_commit(nullptr, 0, 1); break;
          case 2: s = kvb_seq_free(nullptr, 0); break;
          case 3: s = kvb_seq_block_table(nullptr, 0, buf, 4, &x); break;
          case 4: s = kvb_drain_copies(nullptr, buf, 2, &x); break;
          default: s = kvb_check_invariants(nullptr); break;
        }
        REQUIRE(s == KVB_ERR_INVALID_ARGUMENT, "NULL manager: %s", kvb_status_string(s));
        predicted = true;
        break;
      }
      case OP_DRAIN_HOST: {  // capacities too small or NULL are refused and drain nothing
        uint8_t b = r.u8();
        size_t oc = (b & 0x10) ? b % 3 : 4096, lc = (b & 0x20) ? (b >> 2) % 3 : 4096;
        s = drain_host(m, md, oc, lc, (b & 0x40) && r.u8() < 60, (b & 0x80) && r.u8() < 60);
        break;
      }
      case OP_COUNT: break;
    }
    (void)predicted;
    if (trace) {
      std::fprintf(stderr, "step %d: %s -> %s\n", step, what, kvb_status_string(s));
      for (const auto& e : md.seqs) {
        std::fprintf(stderr, "    seq %" PRId64 ": %zu tokens, %" PRIu64 " computed, window %u%s, table", e.first,
                     e.second.toks.size(), e.second.computed, e.second.window, e.second.swapped ? ", swapped" : "");
        if (!e.second.swapped)
          for (int32_t b : table_of(m, e.first)) std::fprintf(stderr, " %d", b);
        std::fprintf(stderr, "\n");
      }
    }

    kvb_status inv = kvb_check_invariants(m);
    REQUIRE(inv == KVB_OK, "after %s (%s): invariants: %s", what, kvb_status_string(s), kvb_last_error());
    if (s != KVB_OK) {
      check_failure(s, what);
      kvbt_state_take(m, snap_ids.data(), snap_ids.size(), 0, &after);
      long d = kvbt_state_diff(&before, &after);
      REQUIRE(d < 0, "failed %s (%s) changed the manager (snapshot byte %ld)", what, kvb_status_string(s), d);
    }
    if (touched_valid && md.seqs.count(touched)) check_info(m, md, touched);
  }

  for (const auto& e : md.seqs) check_info(m, md, e.first);
  drain_host_all(m, md);  // a pending load holds its device block
  // The block accounting balances once every sequence is gone.
  for (const auto& e : md.seqs) REQUIRE(kvb_seq_free(m, e.first) == KVB_OK, "final free");
  kvb_stats st;
  kvb_stats_init(&st);
  REQUIRE(kvb_get_stats(m, &st) == KVB_OK, "final stats");
  if (trace)
    std::fprintf(stderr, "final: %" PRIu64 " hit tokens (%" PRIu64 " from host), %" PRIu64 " offloads, %" PRIu64
                 " loads, %" PRIu64 " host evictions\n", st.hit_tokens, st.host_hit_tokens, st.offloaded_blocks,
                 st.loaded_blocks, st.host_evictions);
  REQUIRE(st.free_blocks == md.nblocks && st.used_blocks == 0 && st.num_seqs == 0 &&
              st.free_host_blocks + st.cached_host_blocks == md.nhost,
          "final accounting: %" PRIu64 " free of %u, %" PRIu64 " used, %" PRIu64 " host free of %u", st.free_blocks,
          md.nblocks, st.used_blocks, st.free_host_blocks, md.nhost);
  REQUIRE(kvb_check_invariants(m) == KVB_OK, "final invariants: %s", kvb_last_error());
  kvb_manager_destroy(m);
  kvbt_state_free(&before);
  kvbt_state_free(&after);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  run(data, size);
  return 0;
}
