// Differential test of the block manager, the model (model.h): the batched decode calls. kvblock.h
// defines them as the per-sequence calls in order, all-or-nothing: the ids are checked first (each on
// the device, none twice), then the calls run in order on a copy of the model, which replaces the model
// only if every one succeeded.
#pragma once

#include "model.h"

namespace {

kvb_status Model::check_batch_ids(const std::vector<int64_t>& ids) {
  std::set<int64_t> seen;
  for (int64_t id : ids) {
    MSeq* s = find(id);
    if (!s) return KVB_ERR_NO_SUCH_SEQUENCE;
    if (s->swapped) return KVB_ERR_BAD_STATE;
    if (!seen.insert(id).second) return KVB_ERR_INVALID_ARGUMENT;
  }
  return KVB_OK;
}

// A pending token tree refuses the whole batch before any count or block is looked at.
static bool any_tree(Model& m, const std::vector<int64_t>& ids) {
  for (int64_t id : ids)
    if (!m.find(id)->tree.empty()) return true;
  return false;
}

kvb_status Model::batch_append(const std::vector<int64_t>& ids, const std::vector<int64_t>& toks) {
  if (kvb_status st = check_batch_ids(ids)) return st;
  if (any_tree(*this, ids)) return KVB_ERR_BAD_STATE;
  Model trial = *this;
  for (size_t i = 0; i < ids.size(); ++i)
    if (kvb_status st = trial.append(ids[i], {toks[i]})) return st;
  *this = std::move(trial);
  return KVB_OK;
}

kvb_status Model::batch_commit(const std::vector<int64_t>& ids, const std::vector<size_t>& counts) {
  if (kvb_status st = check_batch_ids(ids)) return st;
  if (any_tree(*this, ids)) return KVB_ERR_BAD_STATE;
  Model trial = *this;
  for (size_t i = 0; i < ids.size(); ++i)
    if (kvb_status st = trial.commit(ids[i], counts[i])) return st;
  *this = std::move(trial);
  return KVB_OK;
}

}  // namespace
