// AVX2 version of the 4-bit dot products (int4_dot.h): the 16 float lanes as two halves of 8.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

#include "int4_dot_loop.h"

namespace minivllm {
namespace {

struct Avx2Int4 {
  struct F { __m256 lo, hi; };   // lanes 0-7, 8-15
  struct I { __m256i lo, hi; };  // a group's elements 0-15, 16-31
  static F zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static I load_x(const int16_t* p) {
    return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16))};
  }
  static I unpack(const uint8_t* p) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i low = _mm_set1_epi8(0x0F);
    return {_mm256_cvtepu8_epi16(_mm_and_si128(bytes, low)), _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(bytes, 4), low))};
  }
  static F fma_group(F acc, const I& x, const I& q, float scale) {
    const __m256 d = _mm256_set1_ps(scale);
    return {_mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(x.lo, q.lo)), d, acc.lo),
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(x.hi, q.hi)), d, acc.hi)};
  }
  static F fma_lanes(const float* a, const float* b, F acc) {
    return {_mm256_fmadd_ps(_mm256_loadu_ps(a), _mm256_loadu_ps(b), acc.lo),
            _mm256_fmadd_ps(_mm256_loadu_ps(a + 8), _mm256_loadu_ps(b + 8), acc.hi)};
  }
  static float tree_sum(F v) {
    const __m256 s8 = _mm256_add_ps(v.lo, v.hi);
    return sum8_tree(s8);
  }
  static void halves_to_floats(const uint16_t* from, int64_t n, float* to) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(to + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i))));
    for (; i < n; ++i) to[i] = _cvtsh_ss(from[i]);
  }
};

}  // namespace

void int4_dot_avx2(const int16_t* x0, const int16_t* x1, const float* xs0, const float* xs1, const uint8_t* block, int64_t K,
                   int64_t count, int64_t prefetch, float* out0, float* out1) {
  int4_any<Avx2Int4>(x0, x1, xs0, xs1, block, K, count, prefetch, out0, out1);
}

}  // namespace minivllm
#pragma GCC pop_options
