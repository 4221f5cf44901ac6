// Which manager holds which store, process-wide (kvblock.h, "One store, one host cache, one manager"). A
// store's callbacks get host_block ids of one manager's host cache, so a second manager registering the
// same store would have it write that manager's blocks' bytes from (or into) the first one's memory.
#include <mutex>
#include <utility>
#include <vector>

#include "error.h"
#include "store.h"

namespace kvb {

namespace {

using PutFn = int (*)(void*, const kvb_store_key*, int32_t);

struct Holder {
  const void* owner;
  void* user;
  PutFn put;
};

std::mutex& registry_mutex() {
  static std::mutex mu;
  return mu;
}

std::vector<Holder>& registry() {
  static std::vector<Holder> holders;  // one per manager with a store: a handful
  return holders;
}

}  // namespace

void claim_store(const void* owner, const kvb_store& ops) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::vector<Holder>& r = registry();
  Holder* mine = nullptr;
  for (Holder& h : r) {
    if (h.owner == owner) mine = &h;
    else if (h.user == ops.user && h.put == ops.put)
      fail(Code::bad_state,
           "this store (user %p) is registered with another manager (%p): its host_block ids name one host "
           "cache's blocks; give each manager its own store over its own host cache, or remove it there first",
           ops.user, h.owner);
  }
  if (mine) {
    mine->user = ops.user;
    mine->put = ops.put;
  } else {
    r.push_back(Holder{owner, ops.user, ops.put});
  }
}

void release_store(const void* owner) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::vector<Holder>& r = registry();
  for (size_t i = 0; i < r.size(); ++i)
    if (r[i].owner == owner) {
      r[i] = r.back();
      r.pop_back();
      return;
    }
}

}  // namespace kvb
