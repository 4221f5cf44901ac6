// The store tier (abi/kvblock.h, "Store tier"): a third prefix-cache level below the host cache. The
// manager moves no bytes: it asks the store which keys exist (one batched lookup per allocation), tells it
// which host block to read on a put and which to fill on a get, and turns good gets into ordinary host ->
// device loads. The rules that keep a wrong byte from ever being attended:
//  - a store hit's device block is held by its sequence but not indexed until its get ends good, so no
//    other sequence can match it early;
//  - a sequence with gets in flight is "filling": device_seq() refuses it, so it is never exported,
//    committed, extended, forked or swapped;
//  - a failed get cuts the sequence's computed tokens back to that block, so the engine recomputes from it;
//  - a staging host block stays reserved until the store reports its get, however late (a slow store
//    writes into it after its sequence is gone), then until its load is drained.
#include <algorithm>
#include <cinttypes>

#include "error.h"
#include "manager.h"

namespace kvb {

#define KVB_INVARIANT(cond, ...) \
  do {                           \
    if (!(cond)) fail(Code::internal, "invariant violated: " __VA_ARGS__); \
  } while (0)

Manager::~Manager() { release_store(this); }

void Manager::store_abandon_gets() {
  // The store is never called again: its gets fail as a failed poll fails them, and their host blocks are
  // empty again at once (kvblock.h: the store writes into none of them afterwards).
  store_.abandoned_gets += store_.gets.size();
  while (!store_.gets.empty()) store_complete(store_.gets.size() - 1, -1);
}

void Manager::set_store(const kvb_store* ops, const Key128& ns, uint64_t block_bytes) {
  if (!ops) {
    release_store(this);
    store_abandon_gets();
    store_.on = false;
    return;
  }
  // Allocations and the claim first: a refusal changes nothing. The staging states outlive a store: a
  // block whose get completed good stays staged until its load is drained, whichever store is registered.
  std::vector<uint8_t> staging;
  if (store_.staging.size() != cfg_.num_host_blocks) staging.assign(cfg_.num_host_blocks, 0);
  std::vector<kvb_store_completion> done(64);
  const bool through = (ops->flags & KVB_STORE_WRITE_THROUGH) != 0;
  std::vector<int32_t> through_list;
  through_list.reserve(through ? cfg_.num_host_blocks : 0);
  std::vector<uint8_t> through_pending(cfg_.num_host_blocks, 0), written(cfg_.num_host_blocks, 0);
  scratch_.store_hosts.reserve(cfg_.num_blocks);
  claim_store(this, *ops);
  store_abandon_gets();
  if (!staging.empty()) store_.staging.swap(staging);
  store_.done.swap(done);
  store_.write_through = through;
  store_.through.swap(through_list);
  store_.through_pending.swap(through_pending);
  store_.written.swap(written);
  store_.ops = *ops;
  store_.ns = ns;
  store_.block_bytes = block_bytes;
  store_.on = true;
}

uint32_t Manager::store_lookup(const int64_t* tokens, uint32_t from, uint32_t num_blocks, ChainLink chain,
                               const SeqOptions& opts, uint32_t host_hits) {
  // A window releases blocks as it goes, which a block waiting for its get must not be (phase 1: none).
  if (opts.window || from + 1 >= num_blocks) return 0;
  // Each hit needs a staging host block that allocate can take: an empty one or an evictable cached one
  // that is not one of this lookup's host hits (those are pinned first).
  const size_t takeable = host_available() - host_hits;
  const uint32_t most = static_cast<uint32_t>(std::min<size_t>(num_blocks - 1 - from, takeable));
  store_.keys.clear();
  ExtraKeyCursor extras(opts);
  for (uint32_t i = from; i < from + most; ++i) {
    const int64_t* blk = tokens + static_cast<size_t>(i) * bs_;
    const ExtraKey extra = extras.at(i);
    if (!is_cacheable(blk, bs_, extra)) break;
    ChainLink next;
    next.kind = ChainLink::parent;
    keys_.hasher.hash_and_key(chain, blk, bs_, extra, &next.hash, &next.key);
    const Key128 k = fold_store_key(next.key, store_.ns);
    store_.keys.push_back(kvb_store_key{k.lo, k.hi});
    chain = next;
  }
  if (store_.keys.empty()) return 0;
  size_t found = 0;
  if (store_.ops.lookup(store_.ops.user, store_.keys.data(), store_.keys.size(), &found) != 0 ||
      found > store_.keys.size())
    found = 0;  // a failing (or confused) store has nothing
  store_.keys.resize(found);
  return static_cast<uint32_t>(found);
}

int32_t Manager::take_store_staging() {
  int32_t h = take_host_block();
  if (h < 0) fail(Code::internal, "no host block for a store get, though the lookup counted one");
  BlockMeta& m = host_.pool.meta(h);
  m.ref = 1;  // held by its get
  m.has_hash = 0;
  store_.staging[h] = 1;
  ++store_.staged;
  return h;
}

void Manager::store_start_gets(Sequence& s, uint32_t first, uint32_t count) {
  s.store_serial = store_.next_serial++;
  store_.hit_tokens += static_cast<uint64_t>(count) * bs_;
  const uint64_t first_ticket = store_.next_ticket;
  for (uint32_t j = 0; j < count; ++j) {  // capacity reserved by allocate
    store_.gets.push_back(StoreGet{store_.next_ticket++, s.store_serial, s.id, first + j, scratch_.store_hosts[j], s.groups[0].table[first + j]});
    ++s.store_filling;
  }
  // Started after the bookkeeping: a get refused at once ends like a failed completion.
  for (uint32_t j = 0; j < count; ++j) {
    const kvb_store_key key = store_.keys[j];
    const uint64_t ticket = first_ticket + j;
    if (store_.ops.get(store_.ops.user, &key, scratch_.store_hosts[j], ticket) == 0) continue;
    for (size_t k = 0; k < store_.gets.size(); ++k)
      if (store_.gets[k].ticket == ticket) {
        store_complete(k, -1);
        break;
      }
  }
}

void Manager::store_release_staging(int32_t h) {
  BlockMeta& m = host_.pool.meta(h);
  m.ref = 0;
  m.has_hash = 0;
  store_.staging[h] = 0;
  --store_.staged;
  host_blocks_.empty.push_back(h);  // capacity is num_host_blocks
}

void Manager::store_complete(size_t k, int32_t status) {
  const StoreGet g = store_.gets[k];
  store_.gets[k] = store_.gets.back();
  store_.gets.pop_back();
  Sequence* s = find_seq(g.seq_id);
  if (s && s->store_serial != g.serial) s = nullptr;  // its sequence was freed (the id may be reused)
  if (status == 0) ++store_.get_blocks;
  else ++store_.get_failures;
  if (!s) {
    store_release_staging(g.host);
    return;
  }
  --s->store_filling;
  const uint64_t start = static_cast<uint64_t>(g.index) * bs_;
  if (status != 0 && start < s->num_computed) {  // recompute from this block on
    store_.recomputed_tokens += s->num_computed - start;
    s->num_computed = start;
  }
  if (status == 0 && start < s->num_computed) {
    // A later failure of an earlier block may still cut this one: its load then runs before the step
    // that rewrites the block, or after it with the same bytes (a good get holds this key's K/V).
    store_.staging[g.host] = 2;
    ++device_.pool.meta(g.device).ref;  // held by the load until drained, like a host load's destination
    pending_.loads.push_back(BlockPair{g.host, g.device});  // capacity num_blocks: destinations are unique
    ++counters_.loaded;
  } else {
    store_release_staging(g.host);
  }
  if (s->store_filling == 0)  // the good store blocks enter the index
    for (GroupTable& t : s->groups) hash_committed_blocks(*s, t);
}

void Manager::store_through_offloaded() {
  if (!store_.on || !store_.write_through) return;
  // Entries that no longer count (their host block was taken since) go first, so that the list stays in
  // the order the offloads were handed out: a block offloaded again is put in its new place, not in a
  // stale entry's (the put order, and so the STORED events' order, does not depend on the list's capacity).
  size_t k = 0;
  for (int32_t x : store_.through)
    if (store_.through_pending[x]) store_.through[k++] = x;
  store_.through.resize(k);
  for (const BlockPair& p : pending_.offloads) {
    const int32_t h = p.second;
    if (store_.through_pending[h]) continue;
    store_.through_pending[h] = 1;
    store_.through.push_back(h);  // at most one counting entry per host block: fits num_host_blocks
  }
}

size_t Manager::store_poll() {
  if (!store_.on) return store_.gets.size();
  if (store_.write_through) {  // the offloads drained before have run: their bytes are in host memory
    for (int32_t h : store_.through) {
      if (!store_.through_pending[h]) continue;
      store_.through_pending[h] = 0;
      if (host_.pool.meta(h).indexed && !store_.written[h]) store_put(h);
    }
    store_.through.clear();
  }
  const size_t cap = store_.done.size();
  for (;;) {
    size_t n = 0;
    if (store_.ops.poll(store_.ops.user, store_.done.data(), cap, &n) != 0) {
      // The store gave up (kvblock.h: it then writes into none of their host blocks): every get in flight
      // failed, so no sequence waits for a store that is gone.
      while (!store_.gets.empty()) store_complete(store_.gets.size() - 1, -1);
      break;
    }
    n = std::min(n, cap);
    for (size_t i = 0; i < n; ++i) {
      const kvb_store_completion& c = store_.done[i];
      for (size_t k = 0; k < store_.gets.size(); ++k)  // an unknown ticket is the store's bug: ignored
        if (store_.gets[k].ticket == c.ticket) {
          store_complete(k, c.status);
          break;
        }
    }
    if (n < cap) break;
  }
  return store_.gets.size();
}

void Manager::seq_store_state(int64_t id, size_t* num_computed, size_t* num_filling) {
  const Sequence& s = seq(id);
  *num_computed = s.num_computed;
  *num_filling = s.store_filling;
}

void Manager::store_put(int32_t h) {
  const Key128 k = fold_store_key(host_.pool.meta(h).key, store_.ns);
  const kvb_store_key key{k.lo, k.hi};
  if (store_.ops.put(store_.ops.user, &key, h) != 0) {
    ++store_.put_failures;
    return;
  }
  ++store_.put_blocks;
  store_.written[h] = 1;
  emit_store(h);
}

void Manager::emit_store(int32_t h) {
  if (!events_.enabled()) return;
  Event e;
  e.type = 1;  // KVB_EVENT_BLOCK_STORED
  e.block = h;
  e.medium = 2;  // KVB_MEDIUM_STORE
  const BlockMeta& m = host_.pool.meta(h);
  e.hash = m.hash;
  e.parent_kind = host_.parents[h].kind;
  e.parent_hash = host_.parents[h].hash;
  e.has_extra = m.has_extra;
  e.extra = m.extra;
  e.num_tokens = bs_;
  events_.push(e, host_.pool.tokens(h));
}

// host_refs[h]: the references on host block h that the store accounts for (its get's); the host check
// adds them to the swap holds and load pins.
void Manager::check_store_invariants(std::vector<int32_t>& host_refs) const {
  size_t staged = 0;
  for (size_t h = 0; h < store_.staging.size(); ++h) {
    KVB_INVARIANT(store_.staging[h] <= 2, "host block %zu: staging state %u", h, store_.staging[h]);
    staged += store_.staging[h] != 0;
  }
  KVB_INVARIANT(staged == store_.staged, "%zu host blocks staged, counter says %zu", staged, store_.staged);
  std::vector<uint32_t> filling(seqs_.pool.size(), 0);
  for (const StoreGet& g : store_.gets) {
    KVB_INVARIANT(g.host >= 0 && static_cast<size_t>(g.host) < store_.staging.size() && store_.staging[g.host] == 1 &&
                      host_refs[g.host] == 0,
                  "get %" PRIu64 ": host block %d is not staged for it alone", g.ticket, g.host);
    host_refs[g.host] = 1;
    KVB_INVARIANT(!host_.pool.meta(g.host).indexed, "get %" PRIu64 ": staging host block %d is indexed", g.ticket, g.host);
    const Sequence* s = find_seq_const(g.seq_id);
    if (!s || s->store_serial != g.serial) continue;
    ++filling[static_cast<size_t>(s - seqs_.pool.data())];
    KVB_INVARIANT(g.index < s->num_blocks() && s->groups[0].table[g.index] == g.device && device_.pool.meta(g.device).ref > 0 &&
                      !device_.pool.meta(g.device).indexed && g.index >= s->groups[0].num_hashed,
                  "seq %" PRId64 ": block %u (device %d) filling from the store is not held, or is indexed", s->id,
                  g.index, g.device);
  }
  for (size_t i = 0; i < seqs_.pool.size(); ++i)
    if (seqs_.pool[i].live)
      KVB_INVARIANT(seqs_.pool[i].store_filling == filling[i], "seq %" PRId64 ": %u gets counted, %u in flight", seqs_.pool[i].id,
                    seqs_.pool[i].store_filling, filling[i]);
  for (size_t h = 0; h < store_.staging.size(); ++h)
    if (store_.staging[h] == 1) KVB_INVARIANT(host_refs[h] == 1, "host block %zu staged for no get", h);
}

}  // namespace kvb
