// Differential test of the block manager: the in-memory store the store configurations register
// (kvb_store, kvblock.h "Store tier"). It keeps each put block's bytes (the token ids the simulated host
// KV holds) by store key, and misbehaves when the test tells it to, so that the model can predict the
// manager's answer: puts refused, a failing lookup, gets that are refused at once, find their key gone,
// or read corrupted bytes (reported as a failed completion, as a checksum would), completions reported
// in a shuffled order, and a poll that gives up on every get in flight (the store vanished).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "kvblock.h"
#include "model.h"
#include "util.h"

namespace {

// The namespace the test registers: fp16, 2 layers, 1 KV head, head_dim 4: K and V bytes per token.
constexpr uint32_t kStoreLayers = 2, kStoreHeads = 1, kStoreHeadDim = 4;
constexpr uint64_t kStoreTokenBytes = 2ull * 2 * kStoreLayers * kStoreHeads * kStoreHeadDim;

struct MemStore {
  size_t bs = 0;
  std::vector<int64_t>* host = nullptr;  // the simulated host KV: token id per host slot
  Rng* rng = nullptr;                    // shuffles the completions
  std::map<std::pair<uint64_t, uint64_t>, std::vector<int64_t>> data;
  bool refuse_puts = false, lookup_fails = false, give_up = false;  // set by the test, step by step
  std::vector<MGetOutcome> plan;                                    // outcome of each next get, in order
  size_t next_plan = 0;
  std::vector<kvb_store_completion> queued, reported;
  std::vector<std::pair<int32_t, std::vector<int64_t>>> put_log;  // host block, the bytes read from it

  static MemStore& of(void* user) { return *static_cast<MemStore*>(user); }
  static std::pair<uint64_t, uint64_t> id(const kvb_store_key* k) { return {k->lo, k->hi}; }
  int64_t* slot(int32_t h) { return host->data() + static_cast<size_t>(h) * bs; }

  static int lookup(void* user, const kvb_store_key* keys, size_t n, size_t* found) {
    MemStore& s = of(user);
    if (s.lookup_fails) return 5;
    size_t k = 0;
    while (k < n && s.data.count(id(&keys[k]))) ++k;
    *found = k;
    return 0;
  }
  static int put(void* user, const kvb_store_key* key, int32_t h) {
    MemStore& s = of(user);
    if (s.refuse_puts) return 7;
    std::vector<int64_t> bytes(s.slot(h), s.slot(h) + s.bs);
    s.data[id(key)] = bytes;
    s.put_log.emplace_back(h, bytes);
    return 0;
  }
  static int get(void* user, const kvb_store_key* key, int32_t h, uint64_t ticket) {
    MemStore& s = of(user);
    const MGetOutcome out = s.next_plan < s.plan.size() ? s.plan[s.next_plan] : kGetOk;
    ++s.next_plan;
    if (out == kGetRefused) return 3;
    int32_t status = 0;
    auto it = s.data.find(id(key));
    if (out == kGetMissing) {
      if (it != s.data.end()) s.data.erase(it);
      status = 1;
    } else if (out == kGetCorrupt || it == s.data.end()) {
      std::fill(s.slot(h), s.slot(h) + s.bs, -666);  // garbage that a checksum rejects
      status = 2;
    } else {
      std::copy(it->second.begin(), it->second.end(), s.slot(h));
    }
    s.queued.push_back(kvb_store_completion{ticket, status, 0});
    return 0;
  }
  static int poll(void* user, kvb_store_completion* done, size_t cap, size_t* n) {
    MemStore& s = of(user);
    if (s.give_up) {
      s.give_up = false;
      s.queued.clear();
      return 9;
    }
    for (size_t i = s.queued.size(); i > 1; --i) std::swap(s.queued[i - 1], s.queued[s.rng->below(i)]);
    *n = std::min(cap, s.queued.size());
    std::copy(s.queued.begin(), s.queued.begin() + static_cast<long>(*n), done);
    s.reported.insert(s.reported.end(), s.queued.begin(), s.queued.begin() + static_cast<long>(*n));
    s.queued.erase(s.queued.begin(), s.queued.begin() + static_cast<long>(*n));
    return 0;
  }

  kvb_store table(bool write_through) {
    kvb_store t;
    kvb_store_init(&t);
    t.flags = write_through ? KVB_STORE_WRITE_THROUGH : 0;
    t.user = this;
    t.lookup = lookup;
    t.put = put;
    t.get = get;
    t.poll = poll;
    return t;
  }
};

}  // namespace
