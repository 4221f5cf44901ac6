#include "error.h"

#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace kvb {

namespace {
// Fixed-size so that recording an error can never itself fail to allocate.
thread_local char tls_message[512];
}  // namespace

void fail(Code code, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  throw Error(code, buf);
}

void set_last_error(const char* message) noexcept {
  std::snprintf(tls_message, sizeof tls_message, "%s", message ? message : "");
}

const char* last_error() noexcept { return tls_message; }

}  // namespace kvb
