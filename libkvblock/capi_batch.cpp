// C boundary, kvblock.h section 9 "Batch export for kernels": kvb_batch_export (with its prefix groups),
// and the batched decode calls kvb_batch_append / kvb_batch_commit. Argument checks only; the behaviour
// is Manager::batch_export / batch_append / batch_commit.
#include <cstring>

#include "capi_manager.h"
#include "capi_struct.h"

using kvb::Code;
using kvb::fail;
using kvb::with_manager;

namespace {

// Checks the caller's struct and buffers, copies them into `out` (sizes start as the caller's, so a
// call that fails before sizing leaves them unchanged) and returns &out.
kvb::PrefixGroupsOut* read_prefix_groups_out(const kvb_prefix_groups* pg, kvb::PrefixGroupsOut& out) {
  kvb::require_struct(pg, offsetof(kvb_prefix_groups, num_members) + sizeof(uint32_t), "kvb_prefix_groups");
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

}  // namespace

extern "C" {

void kvb_prefix_groups_init(kvb_prefix_groups* groups) {
  if (!kvb::init_struct(groups)) return;
  groups->min_shared_blocks = 2;
}

void kvb_batch_init(kvb_batch* batch) {
  kvb::init_struct(batch);
}

// kvb_batch grew tree_mask after KVB_0.2 (abi/ABI.md, "Symbol versions"): a binary linked against an
// earlier version binds this one, which writes the layout up to prefix_groups. (A name outside kvb_*, so
// that only its versioned alias is exported.)
static constexpr size_t kBatchSize01 = offsetof(kvb_batch, tree_mask);
KVB_API void kvbv01_batch_init(kvb_batch* batch) {
  kvb::init_struct(batch, kBatchSize01);
}
__asm__(".symver kvbv01_batch_init, kvb_batch_init@KVB_0.1");

kvb_status kvb_batch_export(kvb_manager* m, const int64_t* seq_ids, size_t num_seqs, kvb_batch* batch) {
  return with_manager(m, [&](kvb::Manager& mg) {
    kvb::require_struct(batch, offsetof(kvb_batch, max_blocks_needed) + sizeof(uint32_t), "kvb_batch");
    if (!seq_ids && num_seqs > 0) fail(Code::invalid_argument, "seq_ids is NULL but num_seqs is %zu", num_seqs);
    kvb::BatchOut out;
    out.max_blocks_per_seq = batch->max_blocks_per_seq;
    out.block_tables = batch->block_tables;
    out.seq_lens = batch->seq_lens;
    out.query_start = batch->query_start;
    out.slot_mapping = batch->slot_mapping;
    out.slot_capacity = batch->slot_capacity;
    out.num_slots = batch->num_slots;  // unchanged unless sizes were computed (success or too small)
    out.max_blocks_needed = batch->max_blocks_needed;
    if (KVB_COVERS(batch, kvb_batch, group)) out.group = batch->group;
    kvb::PrefixGroupsOut groups;
    kvb_prefix_groups* pg = KVB_COVERS(batch, kvb_batch, prefix_groups) ? batch->prefix_groups : nullptr;
    if (pg) out.prefix_groups = read_prefix_groups_out(pg, groups);
    if (KVB_COVERS(batch, kvb_batch, tree_mask)) out.tree_mask = batch->tree_mask;
    struct Report {  // sizes are reported also when the call fails for a buffer that is too small
      kvb_batch* b;
      kvb::BatchOut& o;
      kvb_prefix_groups* pg;
      ~Report() {
        b->num_slots = o.num_slots;
        b->max_blocks_needed = o.max_blocks_needed;
        if (pg) {
          pg->num_groups = o.prefix_groups->num_groups;
          pg->num_members = o.prefix_groups->num_members;
        }
      }
    } report{batch, out, pg};
    mg.batch_export(seq_ids, num_seqs, out);
  });
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
