// C boundary, kvblock.h sections 4 and 5 "Sequences": the core flow (allocate, commit, append, free,
// block tables, invariants) and the per-sequence options, extra keys and state.
#include <cinttypes>
#include <cstring>

#include "capi_manager.h"
#include "capi_struct.h"

using kvb::Code;
using kvb::fail;
using kvb::with_manager;

namespace {

void require_tokens(const int64_t* tokens, size_t n) {
  if (!tokens && n > 0) fail(Code::invalid_argument, "tokens is NULL but n is %zu", n);
}

kvb::SeqOptions read_options(const kvb_seq_options* o) {
  kvb::SeqOptions opts;
  if (!o) return opts;
  kvb::require_struct(o, offsetof(kvb_seq_options, sink_tokens) + sizeof(uint32_t), "kvb_seq_options");
  if (o->has_cache_salt > 1) fail(Code::invalid_argument, "has_cache_salt must be 0 or 1, got %u", o->has_cache_salt);
  opts.has_salt = o->has_cache_salt != 0;
  opts.salt = o->cache_salt;
  opts.extra_key_blocks = o->extra_key_blocks;
  opts.extra_keys = o->extra_keys;
  opts.num_extra_keys = o->num_extra_keys;
  opts.window = o->window_tokens;
  opts.sink = o->sink_tokens;
  return opts;
}

}  // namespace

extern "C" {

kvb_status kvb_seq_can_allocate_ex(kvb_manager* m, const int64_t* tokens, size_t n, const kvb_seq_options* opts,
                                   size_t* num_cached_tokens) {
  return with_manager(m, [&](kvb::Manager& mg) {
    if (!num_cached_tokens) fail(Code::invalid_argument, "num_cached_tokens is NULL");
    require_tokens(tokens, n);
    kvb::SeqOptions o = read_options(opts);
    size_t cached = 0;
    bool ok = mg.can_allocate(tokens, n, o, &cached);
    *num_cached_tokens = cached;
    if (!ok)
      fail(Code::out_of_blocks, "not enough free blocks for a prompt of %zu token%s (%zu cached)", n, kvb::plural_s(n),
           cached);
  });
}

kvb_status kvb_seq_can_allocate(kvb_manager* m, const int64_t* tokens, size_t n, size_t* num_cached_tokens) {
  return kvb_seq_can_allocate_ex(m, tokens, n, nullptr, num_cached_tokens);
}

kvb_status kvb_seq_allocate_ex(kvb_manager* m, int64_t seq_id, const int64_t* tokens, size_t n,
                               const kvb_seq_options* opts, size_t* num_cached_tokens) {
  return with_manager(m, [&](kvb::Manager& mg) {
    require_tokens(tokens, n);
    kvb::SeqOptions o = read_options(opts);
    size_t cached = mg.allocate(seq_id, tokens, n, o);
    if (num_cached_tokens) *num_cached_tokens = cached;
  });
}

kvb_status kvb_seq_allocate(kvb_manager* m, int64_t seq_id, const int64_t* tokens, size_t n, size_t* num_cached_tokens) {
  return kvb_seq_allocate_ex(m, seq_id, tokens, n, nullptr, num_cached_tokens);
}

kvb_status kvb_seq_commit(kvb_manager* m, int64_t seq_id, size_t num_tokens) {
  return with_manager(m, [&](kvb::Manager& mg) { mg.commit(seq_id, num_tokens); });
}

kvb_status kvb_seq_can_append(kvb_manager* m, int64_t seq_id, size_t num_tokens) {
  return with_manager(m, [&](kvb::Manager& mg) {
    if (!mg.can_append(seq_id, num_tokens))
      fail(Code::out_of_blocks, "seq %" PRId64 ": not enough free blocks to append %zu token%s", seq_id, num_tokens,
           kvb::plural_s(num_tokens));
  });
}

kvb_status kvb_seq_append(kvb_manager* m, int64_t seq_id, const int64_t* tokens, size_t n) {
  return with_manager(m, [&](kvb::Manager& mg) {
    require_tokens(tokens, n);
    mg.append(seq_id, tokens, n);
  });
}

kvb_status kvb_seq_free(kvb_manager* m, int64_t seq_id) {
  return with_manager(m, [&](kvb::Manager& mg) { mg.free_seq(seq_id); });
}

kvb_status kvb_seq_block_table(kvb_manager* m, int64_t seq_id, int32_t* out, size_t capacity, size_t* len) {
  return kvb_seq_block_table_group(m, seq_id, 0, out, capacity, len);
}

kvb_status kvb_seq_block_table_group(kvb_manager* m, int64_t seq_id, uint32_t group, int32_t* out, size_t capacity,
                                     size_t* len) {
  return with_manager(m, [&](kvb::Manager& mg) {
    if (!len) fail(Code::invalid_argument, "len is NULL");
    const std::vector<int32_t>& t = mg.block_table(seq_id, group);
    *len = t.size();
    if (capacity < t.size())
      fail(Code::buffer_too_small, "seq %" PRId64 ": block table has %zu entr%s, capacity is %zu", seq_id, t.size(),
           t.size() == 1 ? "y" : "ies",
           capacity);
    if (!out) fail(Code::invalid_argument, "out is NULL");
    std::memcpy(out, t.data(), t.size() * sizeof(int32_t));
  });
}

kvb_status kvb_num_free_blocks(kvb_manager* m, size_t* n) {
  return with_manager(m, [&](kvb::Manager& mg) {
    if (!n) fail(Code::invalid_argument, "n is NULL");
    *n = mg.num_free();
  });
}

kvb_status kvb_check_invariants(kvb_manager* m) {
  return with_manager(m, [&](kvb::Manager& mg) { mg.check_invariants(); });
}

void kvb_seq_options_init(kvb_seq_options* opts) {
  kvb::init_struct(opts);
}

kvb_status kvb_seq_set_extra_key(kvb_manager* m, int64_t seq_id, uint32_t block_index, uint64_t key) {
  return with_manager(m, [&](kvb::Manager& mg) { mg.set_extra_key(seq_id, block_index, key); });
}

void kvb_seq_info_init(kvb_seq_info* info) {
  kvb::init_struct(info);
}

kvb_status kvb_seq_get_info(kvb_manager* m, int64_t seq_id, kvb_seq_info* info) {
  return with_manager(m, [&](kvb::Manager& mg) {
    kvb::require_struct(info, offsetof(kvb_seq_info, sink_tokens) + sizeof(uint32_t), "kvb_seq_info");
    const kvb::Sequence& s = mg.sequence(seq_id);
    kvb_seq_info r;
    kvb_seq_info_init(&r);
    r.location = s.swapped ? KVB_SEQ_SWAPPED_OUT : KVB_SEQ_ON_DEVICE;
    r.num_tokens = s.num_tokens;
    r.num_computed = s.num_computed;
    r.num_cached = s.num_cached;
    r.num_blocks = s.num_blocks();
    uint64_t held = 0;
    for (const kvb::GroupTable& g : s.groups)  // every KV cache group (they swap together)
      for (int32_t b : s.swapped ? g.host_table : g.table) held += b >= 0;
    r.num_held_blocks = held;
    r.window_tokens = s.groups[0].window;
    r.sink_tokens = s.groups[0].sink;
    kvb::write_versioned(info, r);
  });
}

}  // extern "C"
