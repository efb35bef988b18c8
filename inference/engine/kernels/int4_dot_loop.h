// The loop every ISA version of the 4-bit dot products shares (int4_dot_avx2.cpp, _avx512*.cpp).
//
// `Isa` covers a block's 4 channels in kParts registers of 4 float lanes per channel and supplies
// the operations below; internal linkage on purpose, so each file compiles its own copy for its
// own instruction set.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "int4_dot.h"

namespace minivllm {
namespace {

template <class Isa, int Rows>
void int4_rows(const int16_t* x, const float* xs, const uint8_t* block, int64_t groups, int64_t prefetch, float* out) {
  using F = typename Isa::F;
  const int64_t K = groups * kInt4Group;
  F acc[Rows][Isa::kParts];
  for (int r = 0; r < Rows; ++r)
    for (int part = 0; part < Isa::kParts; ++part) acc[r][part] = Isa::zero();
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* group = block + g * kInt4GroupBytes;
    if (prefetch) {  // 80 bytes a group: two lines ahead keep every line asked for
      _mm_prefetch(reinterpret_cast<const char*>(group + prefetch), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(group + prefetch + 64), _MM_HINT_T0);
    }
    for (int part = 0; part < Isa::kParts; ++part) {
      const auto levels = Isa::unpack(group, part);  // each unpack feeds every row
      const auto scales = Isa::scales(group, part);
      for (int r = 0; r < Rows; ++r)
        acc[r][part] = Isa::accumulate(acc[r][part], levels, scales, x + r * K + g * kInt4Group, xs + (r * groups + g) * 4);
    }
  }
  for (int r = 0; r < Rows; ++r)
    for (int part = 0; part < Isa::kParts; ++part) Isa::totals(acc[r][part], out + r * kInt4Channels + part * Isa::kPartChannels);
}

template <class Isa>
void int4_any(const int16_t* x, const float* xs, int64_t rows, const uint8_t* block, int64_t groups, int64_t prefetch, float* out) {
  const int64_t K = groups * kInt4Group;
  int64_t r = 0;
  for (; r + Isa::kMaxRows <= rows; r += Isa::kMaxRows)
    int4_rows<Isa, Isa::kMaxRows>(x + r * K, xs + r * groups * 4, block, groups, prefetch, out + r * kInt4Channels);
  x += r * K, xs += r * groups * 4, out += r * kInt4Channels;
  switch (rows - r) {  // a compile-time row count keeps the accumulators in registers
    case 3: return int4_rows<Isa, 3>(x, xs, block, groups, prefetch, out);
    case 2: return int4_rows<Isa, 2>(x, xs, block, groups, prefetch, out);
    case 1: return int4_rows<Isa, 1>(x, xs, block, groups, prefetch, out);
    default: return;
  }
}

}  // namespace
}  // namespace minivllm
