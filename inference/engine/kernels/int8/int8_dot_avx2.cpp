// AVX2 version of the int8 dot products (int8_dot.h): vpmaddwd over 16 elements at a time.
#include <immintrin.h>

#include "int8/int8_dot_loop.h"

namespace minivllm {
namespace {

struct Avx2 {
  using Acc = __m256i;
  static constexpr int64_t kWidth = 16;
  static Acc zero() { return _mm256_setzero_si256(); }
  static Acc load_x(const int16_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static Acc load_w(const int8_t* p) { return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static Acc multiply_add(Acc acc, Acc x, Acc w) { return _mm256_add_epi32(acc, _mm256_madd_epi16(x, w)); }
  static int64_t lanes_sum(Acc v) {
    alignas(32) int32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), v);
    int64_t sum = 0;
    for (int32_t lane : lanes) sum += lane;
    return sum;
  }
};

}  // namespace

void int8_dot_avx2(const int16_t* x0, const int16_t* x1, const int8_t* w, int64_t K, int64_t count, int64_t prefetch, int64_t* out0,
                   int64_t* out1) {
  dot_any<Avx2>(x0, x1, w, K, count, prefetch, out0, out1);
}

}  // namespace minivllm
