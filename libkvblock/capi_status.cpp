// C boundary, kvblock.h section 1 "Status, version": status names, the last error, the version.
#include "../abi/kvblock.h"
#include "error.h"

extern "C" {

const char* kvb_status_string(kvb_status s) {
  switch (s) {
    case KVB_OK: return "KVB_OK";
    case KVB_ERR_INVALID_ARGUMENT: return "KVB_ERR_INVALID_ARGUMENT";
    case KVB_ERR_OUT_OF_BLOCKS: return "KVB_ERR_OUT_OF_BLOCKS";
    case KVB_ERR_NO_SUCH_SEQUENCE: return "KVB_ERR_NO_SUCH_SEQUENCE";
    case KVB_ERR_SEQUENCE_EXISTS: return "KVB_ERR_SEQUENCE_EXISTS";
    case KVB_ERR_BAD_STATE: return "KVB_ERR_BAD_STATE";
    case KVB_ERR_OUT_OF_MEMORY: return "KVB_ERR_OUT_OF_MEMORY";
    case KVB_ERR_DEVICE: return "KVB_ERR_DEVICE";
    case KVB_ERR_UNSUPPORTED: return "KVB_ERR_UNSUPPORTED";
    case KVB_ERR_BUFFER_TOO_SMALL: return "KVB_ERR_BUFFER_TOO_SMALL";
    case KVB_ERR_INTERNAL: return "KVB_ERR_INTERNAL";
  }
  return "KVB_UNKNOWN_STATUS";
}

const char* kvb_last_error(void) { return kvb::last_error(); }

uint32_t kvb_version(void) { return KVB_VERSION_MAJOR * 10000 + KVB_VERSION_MINOR * 100 + KVB_VERSION_PATCH; }

#define KVB_STR2(x) #x
#define KVB_STR(x) KVB_STR2(x)
const char* kvb_version_string(void) {
  return KVB_STR(KVB_VERSION_MAJOR) "." KVB_STR(KVB_VERSION_MINOR) "." KVB_STR(KVB_VERSION_PATCH);
}

}  // extern "C"
