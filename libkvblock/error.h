// Errors of the C++ core: an exception carrying a status code and a message. The C boundary
// (capi_guard.h) turns it into a kvb_status and the thread-local kvb_last_error() text.
#pragma once
#include <exception>
#include <string>

namespace kvb {

// Mirrors kvb_status; kept separate so the core does not depend on the public header.
enum class Code : int {
  ok = 0,
  invalid_argument = -1,
  out_of_blocks = -2,
  no_such_sequence = -3,
  sequence_exists = -4,
  bad_state = -5,
  out_of_memory = -6,
  device = -7,
  unsupported = -8,
  buffer_too_small = -9,
  internal = -10,
};

class Error : public std::exception {
 public:
  Error(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  Code code() const noexcept { return code_; }
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  Code code_;
  std::string message_;
};

// Counts in messages agree with their noun: "%zu block%s", n, plural_s(n) -> "1 block", "3 blocks".
inline const char* plural_s(unsigned long long n) { return n == 1 ? "" : "s"; }
inline const char* is_are(unsigned long long n) { return n == 1 ? "is" : "are"; }

// Throws Error(code, printf-style message).
[[noreturn]] void fail(Code code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// Throws Error(out_of_memory) naming what could not be allocated and how much, where a std::bad_alloc is
// caught: fail_alloc("the event queue", bytes, "%u events of %zu bytes", ...) gives "cannot allocate the
// event queue: 32.0 GiB (65536 events of 524344 bytes)".
[[noreturn]] void fail_alloc(const char* what, unsigned long long bytes, const char* detail_fmt, ...)
    __attribute__((format(printf, 3, 4)));

// Thread-local message behind kvb_last_error().
void set_last_error(const char* message) noexcept;
const char* last_error() noexcept;

}  // namespace kvb
