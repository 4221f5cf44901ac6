// The opaque kvb_manager handle: a Manager plus its lock. with_manager() is how every manager entry
// point runs its body: NULL check, lock, exception-to-status translation.
#pragma once
#include <mutex>

#include "../abi/kvblock.h"
#include "capi_guard.h"
#include "manager.h"

struct kvb_manager {
  explicit kvb_manager(const kvb::ManagerConfig& cfg) : impl(cfg) {}
  std::mutex mu;
  kvb::Manager impl;
};

namespace kvb {

template <class Body>
kvb_status with_manager(kvb_manager* m, Body&& body, const char* fn = __builtin_FUNCTION()) {
  return guarded(
      [&] {
        if (!m) fail(Code::invalid_argument, "manager is NULL");
        std::lock_guard<std::mutex> lock(m->mu);
        body(m->impl);
      },
      fn);
}

}  // namespace kvb
