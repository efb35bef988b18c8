// AVX2 version of the float-weight dot products (float_dot.h): a step's 16 channels in two
// registers of 8, up to 2 rows a pass (two accumulators a row): the AVX-512 version's sums, lane by lane.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

#include "common/lanes.h"
#include "floats/float_dot_loop.h"

namespace minivllm {
namespace {

struct Avx2Floats {
  static constexpr int kParts = 2, kPartChannels = 8, kMaxRows = 2;
  using F = __m256;
  static F zero() { return _mm256_setzero_ps(); }
  static F set1(float v) { return _mm256_set1_ps(v); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  template <FloatWeight W>
  static F load(const uint8_t* p, int part) {
    if constexpr (W == FloatWeight::F32) return _mm256_loadu_ps(reinterpret_cast<const float*>(p) + kPartChannels * part);
    const __m128i halves = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * kPartChannels * part));
    if constexpr (W == FloatWeight::F16) return _mm256_cvtph_ps(halves);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(halves), 16));
  }
  static void store(F v, float* out, int64_t channels) { store_lanes(v, out, channels); }
};

}  // namespace

void float_dot_avx2(FloatWeight weight, const float* x, int64_t rows, int64_t K, const uint8_t* block, float* out,
                    int64_t out_stride, int64_t channels) {
  float_dot<Avx2Floats>(weight, x, rows, K, block, out, out_stride, channels);
}

}  // namespace minivllm
#pragma GCC pop_options
