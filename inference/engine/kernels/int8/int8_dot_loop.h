// The loop both ISA versions of the int8 dot products share (int8_dot_avx2.cpp, _avx512.cpp).
//
// `Isa` supplies an int32-lane accumulator type and four operations on it. Everything here
// has internal linkage on purpose: each file compiles its own copy for its own instruction set.
#pragma once
#include <cstdint>
#include <immintrin.h>

#include "int8/int8_dot.h"

namespace minivllm {
namespace {

// Reads one packed block (int8_dot.h) front to back, a group of kGroup elements per channel at
// a time; an ISA narrower than a group takes it in several steps.
template <class Isa, int64_t Count, bool TwoRows>
void dot_rows(const int16_t* x0, const int16_t* x1, const int8_t* w, int64_t K, int64_t prefetch, int64_t* out0,
              int64_t* out1) {
  using Acc = typename Isa::Acc;
  static_assert(kGroup % Isa::kWidth == 0 && kExactChunk % kGroup == 0, "a group is whole vectors; a chunk whole groups");
  int64_t t0[Count] = {}, t1[Count] = {};
  const int64_t grouped = K - K % kGroup;
  for (int64_t chunk = 0; chunk < grouped; chunk += kExactChunk) {  // int32 lanes, emptied into int64 per chunk
    const int64_t end = chunk + kExactChunk < grouped ? chunk + kExactChunk : grouped;
    Acc a0[Count], a1[Count];
    for (int64_t c = 0; c < Count; ++c) a0[c] = a1[c] = Isa::zero();
    for (int64_t k = chunk; k < end; k += kGroup) {
      if (prefetch)  // the lines `prefetch` bytes ahead of this group's
        for (int64_t line = 0; line < Count * kGroup; line += kCacheLine)
          _mm_prefetch(reinterpret_cast<const char*>(w + packed_group_offset(k, 0, Count) + line + prefetch), _MM_HINT_T0);
      for (int64_t step = 0; step < kGroup; step += Isa::kWidth) {
        const Acc xv0 = Isa::load_x(x0 + k + step);
        const Acc xv1 = TwoRows ? Isa::load_x(x1 + k + step) : xv0;
        for (int64_t c = 0; c < Count; ++c) {
          const Acc wv = Isa::load_w(w + packed_group_offset(k, c, Count) + step);  // each weight load feeds both rows
          a0[c] = Isa::multiply_add(a0[c], xv0, wv);
          if (TwoRows) a1[c] = Isa::multiply_add(a1[c], xv1, wv);
        }
      }
    }
    for (int64_t c = 0; c < Count; ++c) {
      t0[c] += Isa::lanes_sum(a0[c]);
      if (TwoRows) t1[c] += Isa::lanes_sum(a1[c]);
    }
  }
  for (int64_t c = 0; c < Count; ++c) {
    for (int64_t k = grouped; k < K; ++k) {
      const int64_t weight = w[packed_tail_offset(K, k, c, Count)];
      t0[c] += x0[k] * weight;
      if (TwoRows) t1[c] += x1[k] * weight;
    }
    out0[c] = t0[c];
    if (TwoRows) out1[c] = t1[c];
  }
}

// A compile-time channel count keeps the accumulators in registers.
template <class Isa, bool TwoRows>
void dot_channels(const int16_t* x0, const int16_t* x1, const int8_t* w, int64_t K, int64_t count, int64_t prefetch, int64_t* out0,
                  int64_t* out1) {
  switch (count) {
    case 4: return dot_rows<Isa, 4, TwoRows>(x0, x1, w, K, prefetch, out0, out1);
    case 3: return dot_rows<Isa, 3, TwoRows>(x0, x1, w, K, prefetch, out0, out1);
    case 2: return dot_rows<Isa, 2, TwoRows>(x0, x1, w, K, prefetch, out0, out1);
    default: return dot_rows<Isa, 1, TwoRows>(x0, x1, w, K, prefetch, out0, out1);
  }
}

template <class Isa>
void dot_any(const int16_t* x0, const int16_t* x1, const int8_t* w, int64_t K, int64_t count, int64_t prefetch, int64_t* out0,
             int64_t* out1) {
  if (x1) return dot_channels<Isa, true>(x0, x1, w, K, count, prefetch, out0, out1);
  dot_channels<Isa, false>(x0, x1, w, K, count, prefetch, out0, out1);
}

}  // namespace
}  // namespace minivllm
