// AVX2 helpers shared by the kernels.
#pragma once
#include <immintrin.h>
#include <cstdint>

namespace minivllm {

// Sums the 8 lanes in one fixed order, so equal inputs always give equal bits.
inline float horizontal_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The 8 lane sums of 8 vectors at once, [sum(v[0]), ..., sum(v[7])]: one hadd tree instead of
// eight horizontal sums. Each vector's lanes are added in one fixed order.
inline __m256 horizontal_sums(const __m256 v[8]) {
  const __m256 s0123 = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
  const __m256 s4567 = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20), _mm256_permute2f128_ps(s0123, s4567, 0x31));
}

// 8 int8 weights as 8 floats (exact).
inline __m256 load_int8x8(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// dot(a, b) over n floats, n a multiple of 8.
inline float dot(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  return horizontal_sum(acc);
}

}  // namespace minivllm
