// AVX2 version of the 4-bit dot products (int4_dot.h): a block's 4 channels in two registers of 2.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

#include "int4_dot_loop.h"

namespace minivllm {
namespace {

struct Avx2Int4 {
  static constexpr int kParts = 2, kPartChannels = 2, kMaxRows = 2;  // 16 ymm registers: more rows would spill
  using F = __m256;
  struct Levels { __m256i a, b, c, d; };
  struct Scales { __m256 scale, minimum; };
  static F zero() { return _mm256_setzero_ps(); }
  static Levels unpack(const uint8_t* group, int part) {
    const __m256i words = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(group + 32 * part));
    const __m256i low = _mm256_set1_epi16(15);
    return {_mm256_and_si256(words, low), _mm256_and_si256(_mm256_srli_epi16(words, 4), low),
            _mm256_and_si256(_mm256_srli_epi16(words, 8), low), _mm256_srli_epi16(words, 12)};
  }
  static Scales scales(const uint8_t* group, int part) {
    const __m256 both = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(group + 64)));  // 4 scales, 4 minimums
    const __m256i first = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    const __m256i channel = _mm256_add_epi32(first, _mm256_set1_epi32(2 * part));
    return {_mm256_permutevar8x32_ps(both, channel), _mm256_permutevar8x32_ps(both, _mm256_add_epi32(channel, _mm256_set1_epi32(4)))};
  }
  static __m256i x_quarter(const int16_t* x) { return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x))); }
  static F accumulate(F acc, const Levels& q, const Scales& s, const int16_t* x, const float* xs) {
    const __m256i sums = _mm256_add_epi32(_mm256_add_epi32(_mm256_madd_epi16(q.a, x_quarter(x)), _mm256_madd_epi16(q.b, x_quarter(x + 8))),
                                          _mm256_add_epi32(_mm256_madd_epi16(q.c, x_quarter(x + 16)), _mm256_madd_epi16(q.d, x_quarter(x + 24))));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), s.scale, acc);
    return _mm256_fmadd_ps(_mm256_broadcast_ps(reinterpret_cast<const __m128*>(xs)), s.minimum, acc);
  }
  static void totals(F acc, float* out) {
    const __m256 pairs = _mm256_add_ps(acc, _mm256_permute_ps(acc, 0b10110001));         // lane0 + lane1, lane2 + lane3
    const __m256 total = _mm256_add_ps(pairs, _mm256_permute_ps(pairs, 0b01001110));   // (0 + 1) + (2 + 3)
    out[0] = _mm256_cvtss_f32(total);
    out[1] = _mm_cvtss_f32(_mm256_extractf128_ps(total, 1));
  }
};

}  // namespace

void int4_dot_avx2(const int16_t* x, const float* xs, int64_t rows, const uint8_t* block, int64_t groups, int64_t prefetch,
                   float* out) {
  int4_any<Avx2Int4>(x, xs, rows, block, groups, prefetch, out);
}

}  // namespace minivllm
#pragma GCC pop_options
