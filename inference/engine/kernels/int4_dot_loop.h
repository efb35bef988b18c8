// The loop both ISA versions of the 4-bit dot products share (int4_dot_avx2.cpp, _avx512.cpp).
//
// `Isa` supplies 16 float lanes (`F`), 32 int16 lanes (`I`) and the operations below; internal
// linkage on purpose, so each file compiles its own copy for its own instruction set.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "int4_dot.h"

namespace minivllm {
namespace {

// The last three steps of int4_dot.h's tree, over lanes i + (i + 8) already added.
inline float sum8_tree(__m256 s8) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

template <class Isa, int64_t Count, bool TwoRows>
void int4_block(const int16_t* x0, const int16_t* x1, const float* xs0, const float* xs1, const uint8_t* block, int64_t K,
                int64_t prefetch, float* out0, float* out1) {
  using F = typename Isa::F;
  using I = typename Isa::I;
  const int64_t G = K / kInt4Group, padded = int4_padded_groups(K);
  // The block's scales and minimums as float32, minimums zero-padded to whole 16-group vectors.
  alignas(64) float scales[Count][kInt4MaxK / kInt4Group];
  alignas(64) float minimums[Count][kInt4MaxK / kInt4Group + kInt4Lanes];
  const uint16_t* halves = reinterpret_cast<const uint16_t*>(block + Count * K / 2);
  for (int64_t c = 0; c < Count; ++c) {
    Isa::halves_to_floats(halves + 2 * c * G, G, scales[c]);
    Isa::halves_to_floats(halves + 2 * c * G + G, G, minimums[c]);
    for (int64_t g = G; g < padded; ++g) minimums[c][g] = 0.0f;
  }
  F a0[Count], a1[Count];
  for (int64_t c = 0; c < Count; ++c) a0[c] = a1[c] = Isa::zero();
  for (int64_t g = 0; g < G; ++g) {
    const uint8_t* nibbles = block + int4_nibbles_offset(g, 0, Count);
    if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(nibbles + prefetch), _MM_HINT_T0);  // a group of 4 channels: one line
    const I xv0 = Isa::load_x(x0 + g * kInt4Group);
    const I xv1 = TwoRows ? Isa::load_x(x1 + g * kInt4Group) : xv0;
    for (int64_t c = 0; c < Count; ++c) {
      const I q = Isa::unpack(nibbles + c * (kInt4Group / 2));  // each unpack feeds both rows
      a0[c] = Isa::fma_group(a0[c], xv0, q, scales[c][g]);
      if (TwoRows) a1[c] = Isa::fma_group(a1[c], xv1, q, scales[c][g]);
    }
  }
  for (int64_t c = 0; c < Count; ++c) {
    for (int64_t g = 0; g < padded; g += kInt4Lanes) {
      a0[c] = Isa::fma_lanes(minimums[c] + g, xs0 + g, a0[c]);
      if (TwoRows) a1[c] = Isa::fma_lanes(minimums[c] + g, xs1 + g, a1[c]);
    }
    out0[c] = Isa::tree_sum(a0[c]);
    if (TwoRows) out1[c] = Isa::tree_sum(a1[c]);
  }
}

template <class Isa, bool TwoRows>
void int4_channels(const int16_t* x0, const int16_t* x1, const float* xs0, const float* xs1, const uint8_t* block, int64_t K,
                   int64_t count, int64_t prefetch, float* out0, float* out1) {
  switch (count) {  // a compile-time channel count keeps the accumulators in registers
    case 4: return int4_block<Isa, 4, TwoRows>(x0, x1, xs0, xs1, block, K, prefetch, out0, out1);
    case 3: return int4_block<Isa, 3, TwoRows>(x0, x1, xs0, xs1, block, K, prefetch, out0, out1);
    case 2: return int4_block<Isa, 2, TwoRows>(x0, x1, xs0, xs1, block, K, prefetch, out0, out1);
    default: return int4_block<Isa, 1, TwoRows>(x0, x1, xs0, xs1, block, K, prefetch, out0, out1);
  }
}

template <class Isa>
void int4_any(const int16_t* x0, const int16_t* x1, const float* xs0, const float* xs1, const uint8_t* block, int64_t K,
              int64_t count, int64_t prefetch, float* out0, float* out1) {
  if (x1) return int4_channels<Isa, true>(x0, x1, xs0, xs1, block, K, count, prefetch, out0, out1);
  int4_channels<Isa, false>(x0, x1, xs0, xs1, block, K, count, prefetch, out0, out1);
}

}  // namespace
}  // namespace minivllm
