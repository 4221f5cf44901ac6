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

void fail_alloc(const char* what, unsigned long long bytes, const char* detail_fmt, ...) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  char size[32];
  if (bytes < 1024) {
    std::snprintf(size, sizeof size, "%llu byte%s", bytes, plural_s(bytes));
  } else {
    double v = static_cast<double>(bytes) / 1024;
    int u = 0;
    while (v >= 1024 && u < 5) v /= 1024, ++u;
    std::snprintf(size, sizeof size, "%.1f %s", v, kUnits[u]);
  }
  char detail[320];
  va_list ap;
  va_start(ap, detail_fmt);
  std::vsnprintf(detail, sizeof detail, detail_fmt, ap);
  va_end(ap);
  fail(Code::out_of_memory, "cannot allocate %s: %s (%s)", what, size, detail);
}

void set_last_error(const char* message) noexcept {
  std::snprintf(tls_message, sizeof tls_message, "%s", message ? message : "");
}

const char* last_error() noexcept { return tls_message; }

}  // namespace kvb
