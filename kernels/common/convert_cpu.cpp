#include "convert_cpu.h"

#include <vector>

namespace kvb {
namespace kern {
namespace cpu {

const float* half_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t i = 0; i < 65536; ++i) t[i] = half_to_float(uint16_t(i));
    return t;
  }();
  return table.data();
}

const float* fp8_table(Dtype d) {
  struct Tables {
    float e4m3[256], e5m2[256];
  };
  static const Tables tables = [] {
    Tables t;
    for (uint32_t i = 0; i < 256; ++i) {
      t.e4m3[i] = fp8::e4m3_to_float(uint8_t(i));
      t.e5m2[i] = fp8::e5m2_to_float(uint8_t(i));
    }
    return t;
  }();
  return d == Dtype::e5m2 ? tables.e5m2 : tables.e4m3;
}

}  // namespace cpu
}  // namespace kern
}  // namespace kvb
