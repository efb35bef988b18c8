// AVX-512 version of the 4-bit dot products (int4_dot.h): a block's 4 channels in one register.
//
// Nothing after the target pragma runs unless int4_linear_isa() says so, and no torch header is
// included, as in the int8 versions.
#include <immintrin.h>

#include <cstdint>

#include "int4_dot.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx2,fma,f16c")
#include "int4_dot_loop.h"

namespace minivllm {
namespace {

struct Avx512Int4 {
  static constexpr int kParts = 1, kPartChannels = 4;
  using F = __m512;
  struct Levels { __m512i a, b, c, d; };
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
  static __m512i x_quarter(const int16_t* x) { return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x))); }
  static F accumulate(F acc, const Levels& q, const Scales& s, const int16_t* x, const float* xs) {
    const __m512i sums = _mm512_add_epi32(_mm512_add_epi32(_mm512_madd_epi16(q.a, x_quarter(x)), _mm512_madd_epi16(q.b, x_quarter(x + 8))),
                                          _mm512_add_epi32(_mm512_madd_epi16(q.c, x_quarter(x + 16)), _mm512_madd_epi16(q.d, x_quarter(x + 24))));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), s.scale, acc);
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

void int4_dot_avx512(const int16_t* x0, const int16_t* x1, const float* xs0, const float* xs1, const uint8_t* block, int64_t groups,
                     int64_t prefetch, float* out0, float* out1) {
  int4_any<Avx512Int4>(x0, x1, xs0, xs1, block, groups, prefetch, out0, out1);
}

}  // namespace minivllm
#pragma GCC pop_options
