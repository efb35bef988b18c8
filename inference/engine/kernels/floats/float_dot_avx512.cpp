// AVX-512 version of the float-weight dot products (float_dot.h): a step's 16 channels in one
// register, up to 8 rows a pass (two accumulators a row).
#include <immintrin.h>

#include <cstdint>

#include "floats/float_dot.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx2,fma,f16c")
#include "floats/float_dot_loop.h"

namespace minivllm {
namespace {

struct Avx512Floats {
  static constexpr int kParts = 1, kPartChannels = 16, kMaxRows = 8;
  using F = __m512;
  static F zero() { return _mm512_setzero_ps(); }
  static F set1(float v) { return _mm512_set1_ps(v); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  template <FloatWeight W>
  static F load(const uint8_t* p, int) {
    if constexpr (W == FloatWeight::F32) return _mm512_loadu_ps(p);
    const __m256i halves = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    if constexpr (W == FloatWeight::F16) return _mm512_cvtph_ps(halves);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(halves), 16));  // bf16: the float's top half
  }
  static void store(F v, float* out, int64_t channels) {
    if (channels <= 0) return;
    _mm512_mask_storeu_ps(out, channels >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << channels) - 1), v);
  }
};

}  // namespace

void float_dot_avx512(FloatWeight weight, const float* x, int64_t rows, int64_t K, const uint8_t* block, float* out,
                      int64_t out_stride, int64_t channels) {
  float_dot<Avx512Floats>(weight, x, rows, K, block, out, out_stride, channels);
}

}  // namespace minivllm
#pragma GCC pop_options
