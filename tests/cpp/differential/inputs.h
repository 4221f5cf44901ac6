// Differential test of the block manager: random inputs (prompts over shared prefixes, caller-chosen ids,
// per-sequence options). A new per-sequence option gets generated in gen_opts and passed on in to_c.
#pragma once

#include <algorithm>
#include <cinttypes>
#include <map>
#include <string>
#include <vector>

#include "run.h"

namespace {

int64_t Run::gen_token() {
  if (cfg_.nc && rng_.chance(0.04)) return kNC + static_cast<int64_t>(rng_.below(2));
  return static_cast<int64_t>(rng_.below(static_cast<size_t>(cfg_.vocab)));
}

std::vector<int64_t> Run::gen_tokens(size_t n) {
  std::vector<int64_t> t(n);
  for (auto& x : t) x = gen_token();
  return t;
}

int64_t Run::new_id() {  // caller-chosen ids: negative and large ones too
  int64_t k = next_id_++;
  switch (k % 3) {
    case 0: return k;
    case 1: return -k - 1;
    default: return k * 1000003LL + (INT64_C(1) << 40);
  }
}

int64_t Run::unknown_id() {
  for (;;) {
    int64_t id = rng_.chance(0.5) ? static_cast<int64_t>(rng_.below(100)) - 50 : static_cast<int64_t>(rng_.next());
    if (!model_.find(id)) return id;
  }
}

bool Run::pick(int64_t* id, int which) {  // which: 0 any, 1 device, 2 swapped
  std::vector<int64_t> c;
  for (const auto& kv : model_.seqs)
    if (which == 0 || (which == 1) == !kv.second.swapped) c.push_back(kv.first);
  if (c.empty()) return false;
  *id = c[rng_.below(c.size())];
  return true;
}

uint64_t Run::extra_key_for(const int64_t* t) {  // mostly a content hash (so equal images match)
  if (rng_.chance(0.2)) return 7 + rng_.below(2);
  uint64_t h = 0;
  for (uint32_t i = 0; i < cfg_.bs; ++i) h = h * 31 + static_cast<uint64_t>(t[i]);
  return h % 5;
}

std::vector<int64_t> Run::gen_prompt() {
  std::vector<int64_t> t;
  double r = static_cast<double>(rng_.below(100)) / 100.0;
  if (r < 0.15 && !model_.seqs.empty()) {  // an existing sequence's tokens (or a prefix of them)
    auto it = model_.seqs.begin();
    std::advance(it, static_cast<long>(rng_.below(model_.seqs.size())));
    t = it->second.tokens;
    if (rng_.chance(0.5)) t.resize(rng_.range(1, t.size()));
    else for (size_t k = rng_.below(3); k-- > 0;) t.push_back(gen_token());
  } else if (r < 0.4 && (host_cache() || cfg_.groups) && !past_.empty()) {
    // An earlier prompt again: by now its blocks are often evicted from the device to the host level,
    // or some groups' blocks evicted and others' still cached.
    t = past_[rng_.below(past_.size())];
    for (size_t k = rng_.below(2 * cfg_.bs); k-- > 0;) t.push_back(gen_token());
  } else {
    t = prefixes_[rng_.below(prefixes_.size())];
    size_t tail = rng_.below(3 * cfg_.bs + 1);
    for (size_t k = 0; k < tail; ++k) t.push_back(gen_token());
  }
  if (cfg_.N >= 1000 && rng_.chance(0.2)) {  // large pools: some long prompts
    size_t more = rng_.below(20 * cfg_.bs);
    for (size_t k = 0; k < more; ++k) t.push_back(gen_token());
  }
  if (t.empty()) t.push_back(gen_token());
  if (host_cache() || cfg_.groups) {
    if (past_.size() < 16) past_.push_back(t);
    else past_[rng_.below(past_.size())] = t;
  }
  return t;
}

Opts Run::gen_opts(const std::vector<int64_t>& t) {
  Opts o;
  if (rng_.chance(0.3)) {
    o.has_salt = true;
    o.salt = 1 + rng_.below(2);
  }
  if (rng_.chance(0.3)) {
    size_t nb = model_.nblocks(t.size());
    for (uint32_t i = 0; i < nb; ++i) {
      bool full = (i + 1) * cfg_.bs <= t.size();
      bool has_nc = false;
      if (full)
        for (uint32_t k = 0; k < cfg_.bs; ++k) has_nc |= t[i * cfg_.bs + k] >= kNC;
      if ((has_nc && rng_.chance(0.7)) || rng_.chance(0.1)) {
        o.ek_blocks.push_back(i);
        o.ek_vals.push_back(full ? extra_key_for(&t[i * cfg_.bs]) : 9);
      }
    }
  }
  // With KV cache groups a per-sequence window is refused: rarely tried there.
  if (rng_.chance(cfg_.groups ? 0.03 : 0.15)) {
    o.window = static_cast<uint32_t>(rng_.range(1, 4 * cfg_.bs));
    o.sink = rng_.chance(0.5) ? static_cast<uint32_t>(rng_.below(2 * cfg_.bs + 1)) : 0;
  }
  return o;
}

// static
kvb_seq_options Run::to_c(const Opts& o) {
  kvb_seq_options so;
  kvb_seq_options_init(&so);
  so.has_cache_salt = o.has_salt;
  so.cache_salt = o.salt;
  so.extra_key_blocks = o.ek_blocks.empty() ? nullptr : o.ek_blocks.data();
  so.extra_keys = o.ek_vals.empty() ? nullptr : o.ek_vals.data();
  so.num_extra_keys = o.ek_blocks.size();
  so.window_tokens = o.window;
  so.sink_tokens = o.sink;
  return so;
}

// static
std::string Run::opts_str(const Opts& o) {
  std::string s;
  if (o.has_salt) s += fmt(" salt=%" PRIu64, o.salt);
  for (size_t i = 0; i < o.ek_blocks.size(); ++i) s += fmt(" ek[%u]=%" PRIu64, o.ek_blocks[i], o.ek_vals[i]);
  if (o.window) s += fmt(" window=%u sink=%u", o.window, o.sink);
  return s;
}


}  // namespace
