// The fuzz target's plumbing (tests/fuzz/fuzz_capi.cpp): failing with the input saved, reading the input,
// and checking that a failed call leaves a message of its own. Included only by fuzz_capi.cpp.
#pragma once
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "kvblock.h"

namespace kvbfuzz {

[[noreturn]] inline void die(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::fputs("fuzz_capi: ", stderr);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, " (last error: \"%s\")\n", kvb_last_error());
  std::abort();
}

#define REQUIRE(cond, ...) \
  do {                     \
    if (!(cond)) die(__VA_ARGS__); \
  } while (0)

struct Reader {
  const uint8_t* p;
  size_t n;
  bool empty() const { return n == 0; }
  uint8_t u8() {
    if (!n) return 0;
    --n;
    return *p++;
  }
  uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }
  uint32_t u32() { return u16() | (static_cast<uint32_t>(u16()) << 16); }
  uint64_t u64() { return u32() | (static_cast<uint64_t>(u32()) << 32); }
};

inline char primed_message[512];

// Leave a message that no call of the harness produces otherwise, so that a stale message cannot pass
// the check below.
inline void prime_last_error() {
  if (!primed_message[0]) {
    kvb_config c;
    kvb_config_init(&c);
    c.num_blocks = 1;
    c.watermark = 7.25f;
    kvb_manager* x = nullptr;
    (void)kvb_manager_create(&c, &x);  // "watermark 7.25 is not in [0, 1)"
    std::snprintf(primed_message, sizeof primed_message, "%s", kvb_last_error());
    REQUIRE(primed_message[0] != '\0', "priming kvb_last_error()");
    return;
  }
  kvb_config c;
  kvb_config_init(&c);
  c.num_blocks = 1;
  c.watermark = 7.25f;
  kvb_manager* x = nullptr;
  (void)kvb_manager_create(&c, &x);
}

inline void check_failure(kvb_status s, const char* what) {
  REQUIRE(s < 0 && s > KVB_ERR_INTERNAL, "%s: bad status %d", what, static_cast<int>(s));
  REQUIRE(kvb_last_error()[0] != '\0', "%s failed with %s but kvb_last_error() is empty", what,
          kvb_status_string(s));
  REQUIRE(std::strcmp(kvb_last_error(), primed_message) != 0, "%s failed with %s but left no message of its own",
          what, kvb_status_string(s));
}

template <class T>
inline std::unique_ptr<T[]> exact_buffer(size_t n) {  // exactly n elements, so ASan sees any overrun
  return std::unique_ptr<T[]>(new T[n]());
}

}  // namespace kvbfuzz
