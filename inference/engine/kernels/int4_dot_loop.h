// The loop both ISA versions of the 4-bit dot products share (int4_dot_avx2.cpp, _avx512.cpp).
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

template <class Isa, bool TwoRows>
void int4_block(const int16_t* x0, const int16_t* x1, const float* xs0, const float* xs1, const uint8_t* block, int64_t groups,
                int64_t prefetch, float* out0, float* out1) {
  using F = typename Isa::F;
  F a0[Isa::kParts], a1[Isa::kParts];
  for (int part = 0; part < Isa::kParts; ++part) a0[part] = a1[part] = Isa::zero();
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* group = block + g * kInt4GroupBytes;
    if (prefetch) {  // 80 bytes a group: two lines ahead keep every line asked for
      _mm_prefetch(reinterpret_cast<const char*>(group + prefetch), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(group + prefetch + 64), _MM_HINT_T0);
    }
    for (int part = 0; part < Isa::kParts; ++part) {
      const auto levels = Isa::unpack(group, part);  // each unpack feeds both rows
      const auto scales = Isa::scales(group, part);
      a0[part] = Isa::accumulate(a0[part], levels, scales, x0 + g * kInt4Group, xs0 + g * 4);
      if (TwoRows) a1[part] = Isa::accumulate(a1[part], levels, scales, x1 + g * kInt4Group, xs1 + g * 4);
    }
  }
  for (int part = 0; part < Isa::kParts; ++part) {
    Isa::totals(a0[part], out0 + part * Isa::kPartChannels);
    if (TwoRows) Isa::totals(a1[part], out1 + part * Isa::kPartChannels);
  }
}

template <class Isa>
void int4_any(const int16_t* x0, const int16_t* x1, const float* xs0, const float* xs1, const uint8_t* block, int64_t groups,
              int64_t prefetch, float* out0, float* out1) {
  if (x1) return int4_block<Isa, true>(x0, x1, xs0, xs1, block, groups, prefetch, out0, out1);
  int4_block<Isa, false>(x0, x1, xs0, xs1, block, groups, prefetch, out0, out1);
}

}  // namespace
}  // namespace minivllm
