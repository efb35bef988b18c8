// Activation rows rounded to int16, what the int8 and 4-bit kernels multiply weights by.
#include "common/activation_rows.h"

#include <immintrin.h>

namespace minivllm {

constexpr float kInt16Max = 32767.0f;

float quantize_row_int16(const float* x, int64_t K, int16_t* out) {
  __m256 amax = _mm256_setzero_ps();
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t k = 0; k < K; k += 8) amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + k)));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, amax);
  float top = 0.0f;
  for (float lane : lanes) top = lane > top ? lane : top;
  const float inverse = top > 0.0f ? kInt16Max / top : 0.0f;
  const __m256 iv = _mm256_set1_ps(inverse);
  for (int64_t k = 0; k < K; k += 8) {
    __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + k), iv));  // |q| <= 32767 by construction
    __m128i packed = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + k), packed);
  }
  return top / kInt16Max;
}

}  // namespace minivllm
