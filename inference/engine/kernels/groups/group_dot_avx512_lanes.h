// What the two AVX-512 versions of the grouped dot products share (group_dot.h): a block's 16
// channels in one register, up to 12 rows a pass (8 ran ~25% slower at 32 rows on a Zen 4 EPYC).
// Each version supplies `Sums`, the exact integer sums of a group's 8 steps with a row (VNNI's
// vpdpbusd, or vpmaddubsw and vpmaddwd).
//
// Include it after a target pragma that enables AVX-512BW: internal linkage on purpose, as
// group_dot_loop.h.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "groups/group_dot.h"

namespace minivllm {
namespace {

struct Avx512Steps { __m512i step[kGroupSteps]; };

template <class Sums>
struct Avx512Group {
  static constexpr int kParts = 1, kPartChannels = 16, kMaxRows = 12;
  using F = __m512;
  static F zero() { return _mm512_setzero_ps(); }
  static F set1(float v) { return _mm512_set1_ps(v); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F to_float(__m512i v) { return _mm512_cvtepi32_ps(v); }
  static __m512i add_levels(__m512i first, __m512i second) { return _mm512_add_epi32(_mm512_slli_epi32(first, 7), second); }
  static F halfs(const uint8_t* p, int) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  template <int Bits>
  static Avx512Steps levels(const uint8_t* group, int) {
    Avx512Steps l;
    if constexpr (Bits == 8) {
      for (int s = 0; s < kGroupSteps; ++s) l.step[s] = _mm512_loadu_si512(group + 64 * s);
    } else {
      const __m512i low = _mm512_set1_epi8(15);
      for (int p = 0; p < kGroupSteps / 2; ++p) {
        const __m512i v = _mm512_loadu_si512(group + 64 * p);
        l.step[p] = _mm512_and_si512(v, low);
        l.step[p + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
      }
    }
    return l;
  }
  template <int Bits>
  static __m512i sums(const Avx512Steps& l, const int8_t* x) { return Sums::template of<Bits>(l, x); }
  static void store(F v, float* out, int64_t channels) {
    if (channels <= 0) return;
    _mm512_mask_storeu_ps(out, channels >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << channels) - 1), v);
  }
};

}  // namespace
}  // namespace minivllm
