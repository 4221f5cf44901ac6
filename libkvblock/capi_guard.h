// The one place where C++ exceptions stop: every exported function runs its body through guarded(),
// which maps kvb::Error, std::bad_alloc and anything else to a kvb_status plus kvb_last_error() text.
#pragma once
#include <new>

#include "../abi/kvblock.h"
#include "error.h"

namespace kvb {

template <class Body>
kvb_status guarded(Body&& body) noexcept {
  try {
    body();
    return KVB_OK;
  } catch (const Error& e) {
    set_last_error(e.what());
    return static_cast<kvb_status>(e.code());
  } catch (const std::bad_alloc&) {
    set_last_error("out of host memory");
    return KVB_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_last_error(e.what());
    return KVB_ERR_INTERNAL;
  } catch (...) {
    set_last_error("unknown C++ exception");
    return KVB_ERR_INTERNAL;
  }
}

// Argument checks shared by every entry point.
#define KVB_REQUIRE_ARG(cond, ...) \
  do {                             \
    if (!(cond)) ::kvb::fail(::kvb::Code::invalid_argument, __VA_ARGS__); \
  } while (0)

}  // namespace kvb
