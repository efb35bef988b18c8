// What the two AVX-512 versions of the int8 dot products share: 32 int16 lanes per vector,
// loads, and the sum of a 16 x int32 accumulator. Each version adds its own multiply_add.
//
// Include it after a target pragma that enables AVX-512BW: it has internal linkage on purpose,
// so each file compiles its own copy for its own instruction set (as int8_dot_loop.h does).
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace minivllm {
namespace {

struct Avx512Lanes {
  using Acc = __m512i;
  static constexpr int64_t kWidth = 32;
  static Acc zero() { return _mm512_setzero_si512(); }
  static Acc load_x(const int16_t* p) { return _mm512_loadu_si512(p); }
  static Acc load_w(const int8_t* p) { return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static int64_t lanes_sum(Acc v) {
    alignas(64) int32_t lanes[16];
    _mm512_store_si512(lanes, v);
    int64_t sum = 0;
    for (int32_t lane : lanes) sum += lane;
    return sum;
  }
};

}  // namespace
}  // namespace minivllm
