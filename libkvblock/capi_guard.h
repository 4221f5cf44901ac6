// The one place where C++ exceptions stop: every exported function runs its body through guarded(),
// which maps kvb::Error, std::bad_alloc and anything else to a kvb_status plus kvb_last_error() text.
// Large allocations (pools, indexes, tables, the event queue, block tables) catch their own bad_alloc
// and say what and how much (fail_alloc); a bare bad_alloc reaching the guard comes from a small
// structure growing, and the message names the call.
#pragma once
#include <cstdio>
#include <new>

#include "../abi/kvblock.h"
#include "error.h"

namespace kvb {

// fn: the exported function (the caller's name by default).
template <class Body>
kvb_status guarded(Body&& body, const char* fn = __builtin_FUNCTION()) noexcept {
  try {
    body();
    return KVB_OK;
  } catch (const Error& e) {
    set_last_error(e.what());
    return static_cast<kvb_status>(e.code());
  } catch (const std::bad_alloc&) {
    char msg[256];
    std::snprintf(msg, sizeof msg, "out of host memory in %.80s (a structure that grows with the work, such as the "
                  "sequences, their tables or the pending copies, could not grow)", fn);
    set_last_error(msg);
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
