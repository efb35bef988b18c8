// What the two AVX-512 versions of the 4-bit dot products share (int4_dot.h): a block's 4
// channels in one register, up to 4 rows a pass. Each version supplies `Sums`, the exact integer
// sums of a group's four level vectors with the row (pmaddwd and add, or VNNI's vpdpwssd).
//
// Include it after a target pragma that enables AVX-512BW: internal linkage on purpose, so each
// file compiles its own copy for its own instruction set (as int4_dot_loop.h does).
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace minivllm {
namespace {

struct Avx512Levels { __m512i a, b, c, d; };

// A quarter of a group's permuted row (8 int16), repeated for each of the 4 channels.
inline __m512i x_quarter(const int16_t* x) { return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x))); }

template <class Sums>
struct Avx512Int4 {
  static constexpr int kParts = 1, kPartChannels = 4, kMaxRows = 4;
  using F = __m512;
  using Levels = Avx512Levels;
  struct Scales { __m512 scale, minimum; };
  static F zero() { return _mm512_setzero_ps(); }
  static Levels unpack(const uint8_t* group, int) {
    const __m512i words = _mm512_loadu_si512(group);
    const __m512i low = _mm512_set1_epi16(15);
    return {_mm512_and_si512(words, low), _mm512_and_si512(_mm512_srli_epi16(words, 4), low),
            _mm512_and_si512(_mm512_srli_epi16(words, 8), low), _mm512_srli_epi16(words, 12)};
  }
  static Scales scales(const uint8_t* group, int) {
    const __m512 both = _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(group + 64))));
    const __m512i channel = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    return {_mm512_permutexvar_ps(channel, both), _mm512_permutexvar_ps(_mm512_add_epi32(channel, _mm512_set1_epi32(4)), both)};
  }
  static F accumulate(F acc, const Levels& q, const Scales& s, const int16_t* x, const float* xs) {
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(Sums::of(q, x)), s.scale, acc);
    return _mm512_fmadd_ps(_mm512_broadcast_f32x4(_mm_loadu_ps(xs)), s.minimum, acc);
  }
  static void totals(F acc, float* out) {
    const __m512 pairs = _mm512_add_ps(acc, _mm512_permute_ps(acc, 0b10110001));        // lane0 + lane1, lane2 + lane3
    const __m512 total = _mm512_add_ps(pairs, _mm512_permute_ps(pairs, 0b01001110));  // (0 + 1) + (2 + 3)
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, total);
    for (int c = 0; c < 4; ++c) out[c] = lanes[4 * c];
  }
};

}  // namespace
}  // namespace minivllm
