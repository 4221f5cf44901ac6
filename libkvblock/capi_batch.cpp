// C boundary of the batched decode calls (kvb_batch_append, kvb_batch_commit): argument checks only;
// the behaviour is Manager::batch_append / batch_commit.
#include <cstring>

#include "capi_manager.h"
#include "capi_prefix_groups.h"
#include "capi_struct.h"

using kvb::Code;
using kvb::fail;
using kvb::with_manager;

namespace kvb {

PrefixGroupsOut* read_prefix_groups_out(const kvb_prefix_groups* pg, PrefixGroupsOut& out) {
  require_struct(pg, offsetof(kvb_prefix_groups, num_members) + sizeof(uint32_t), "kvb_prefix_groups");
  if (!pg->group_start) fail(Code::invalid_argument, "prefix_groups: group_start is NULL (it holds at least 1 entry)");
  if (!pg->shared_blocks && pg->group_capacity > 0)
    fail(Code::invalid_argument, "prefix_groups: shared_blocks is NULL but group_capacity is %u", pg->group_capacity);
  if (!pg->members && pg->member_capacity > 0)
    fail(Code::invalid_argument, "prefix_groups: members is NULL but member_capacity is %u", pg->member_capacity);
  out.min_shared = pg->min_shared_blocks > 0 ? pg->min_shared_blocks : 1;
  out.group_capacity = pg->group_capacity;
  out.member_capacity = pg->member_capacity;
  out.group_start = pg->group_start;
  out.members = pg->members;
  out.shared_blocks = pg->shared_blocks;
  out.num_groups = pg->num_groups;
  out.num_members = pg->num_members;
  return &out;
}

}  // namespace kvb

extern "C" {

void kvb_prefix_groups_init(kvb_prefix_groups* groups) {
  if (!groups) return;
  std::memset(static_cast<void*>(groups), 0, sizeof *groups);
  groups->struct_size = sizeof *groups;
  groups->min_shared_blocks = 2;
}


kvb_status kvb_batch_append(kvb_manager* m, const int64_t* seq_ids, const int64_t* tokens, size_t num_seqs) {
  return with_manager(m, [&](kvb::Manager& mg) {
    if (!seq_ids && num_seqs > 0) fail(Code::invalid_argument, "seq_ids is NULL but num_seqs is %zu", num_seqs);
    if (!tokens && num_seqs > 0) fail(Code::invalid_argument, "tokens is NULL but num_seqs is %zu", num_seqs);
    mg.batch_append(seq_ids, tokens, num_seqs);
  });
}

kvb_status kvb_batch_commit(kvb_manager* m, const int64_t* seq_ids, const size_t* num_tokens, size_t num_seqs) {
  return with_manager(m, [&](kvb::Manager& mg) {
    if (!seq_ids && num_seqs > 0) fail(Code::invalid_argument, "seq_ids is NULL but num_seqs is %zu", num_seqs);
    mg.batch_commit(seq_ids, num_tokens, num_seqs);
  });
}

}  // extern "C"
