// C boundary of the batched decode calls (kvb_batch_append, kvb_batch_commit): argument checks only;
// the behaviour is Manager::batch_append / batch_commit.
#include "capi_manager.h"

using kvb::Code;
using kvb::fail;
using kvb::with_manager;

extern "C" {

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
