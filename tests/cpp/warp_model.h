// An emulated warp for the CUDA tile-layout tests (run on the CPU): shared memory as one value per
// 16-bit element, ldmatrix.x4 (plain and .trans) and mma m16n8k16 per the PTX ISA fragment layouts.
#pragma once
#include <cstdint>
#include <vector>

namespace emu {

struct Warp {
  std::vector<float> smem;       // element i = bytes [2i, 2i + 2)
  typedef float Regs[32][4][2];  // [lane][register][half]

  void ldsm(const uint32_t (&addr)[32], bool trans, Regs& out) const {
    for (int j = 0; j < 4; ++j) {
      float m[8][8];
      for (int i = 0; i < 8; ++i)
        for (int x = 0; x < 8; ++x) m[i][x] = smem[addr[8 * j + i] / 2 + uint32_t(x)];
      for (int t = 0; t < 32; ++t)
        for (int h = 0; h < 2; ++h)
          out[t][j][h] = trans ? m[2 * (t & 3) + h][t >> 2] : m[t >> 2][2 * (t & 3) + h];
    }
  }
  // c[lane][0..3] += A B for one m16n8k16 (a: 4 registers per lane, b0 / b1: registers rb0 / rb1 of b).
  static void mma(float (&c)[32][4], const Regs& a, const Regs& b, int rb0, int rb1) {
    double A[16][16], B[16][8];
    for (int t = 0; t < 32; ++t) {
      const int g = t >> 2, q = t & 3;
      for (int h = 0; h < 2; ++h) {
        A[g][2 * q + h] = a[t][0][h];
        A[g + 8][2 * q + h] = a[t][1][h];
        A[g][2 * q + 8 + h] = a[t][2][h];
        A[g + 8][2 * q + 8 + h] = a[t][3][h];
        B[2 * q + h][g] = b[t][rb0][h];
        B[2 * q + 8 + h][g] = b[t][rb1][h];
      }
    }
    for (int t = 0; t < 32; ++t)
      for (int e = 0; e < 4; ++e) {
        const int row = (t >> 2) + (e >> 1) * 8, col = 2 * (t & 3) + (e & 1);
        double acc = 0;
        for (int k = 0; k < 16; ++k) acc += A[row][k] * B[k][col];
        c[t][e] += float(acc);
      }
  }
};

}  // namespace emu
