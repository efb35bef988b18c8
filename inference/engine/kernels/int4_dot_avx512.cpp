// AVX-512 version of the 4-bit dot products (int4_dot.h): the 16 float lanes in one register.
//
// Nothing after the target pragma runs unless cpu_has_avx512bw() says so (int8_dot_avx512bw.cpp),
// and no torch header is included, as in the int8 versions.
#include <immintrin.h>

#include <cstdint>

#include "int4_dot.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx2,fma,f16c")
#include "int4_dot_loop.h"

namespace minivllm {
namespace {

struct Avx512Int4 {
  using F = __m512;
  using I = __m512i;
  static F zero() { return _mm512_setzero_ps(); }
  static I load_x(const int16_t* p) { return _mm512_loadu_si512(p); }
  static I unpack(const uint8_t* p) {
    const __m256i bytes = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256i low = _mm256_and_si256(bytes, _mm256_set1_epi16(0x0F));
    return _mm512_inserti64x4(_mm512_castsi256_si512(low), _mm256_srli_epi16(bytes, 4), 1);
  }
  static F fma_group(F acc, I x, I q, float scale) {
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_madd_epi16(x, q)), _mm512_set1_ps(scale), acc);
  }
  static F fma_lanes(const float* a, const float* b, F acc) { return _mm512_fmadd_ps(_mm512_loadu_ps(a), _mm512_loadu_ps(b), acc); }
  static float tree_sum(F v) {
    const __m256 lo = _mm512_castps512_ps256(v);
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    const __m256 s8 = _mm256_add_ps(lo, hi);
    return sum8_tree(s8);
  }
  static void halves_to_floats(const uint16_t* from, int64_t n, float* to) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(to + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(from + i))));
    for (; i < n; ++i) to[i] = _cvtsh_ss(from[i]);
  }
};

}  // namespace

void int4_dot_avx512(const int16_t* x0, const int16_t* x1, const float* xs0, const float* xs1, const uint8_t* block, int64_t K,
                     int64_t count, int64_t prefetch, float* out0, float* out1) {
  int4_any<Avx512Int4>(x0, x1, xs0, xs1, block, K, count, prefetch, out0, out1);
}

}  // namespace minivllm
#pragma GCC pop_options
