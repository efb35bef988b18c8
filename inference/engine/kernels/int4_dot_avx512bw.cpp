// AVX-512BW version of the 4-bit dot products (int4_dot.h): pmaddwd, then integer adds.
//
// Nothing after the target pragma runs unless cpu_isa.h says so, and no torch header is
// included, as in the int8 versions.
#include <immintrin.h>

#include <cstdint>

#include "int4_dot.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx2,fma,f16c")
#include "int4_dot_avx512_lanes.h"
#include "int4_dot_loop.h"

namespace minivllm {
namespace {

struct MaddSums {
  static __m512i of(const Avx512Levels& q, const int16_t* x) {
    return _mm512_add_epi32(_mm512_add_epi32(_mm512_madd_epi16(q.a, x_quarter(x)), _mm512_madd_epi16(q.b, x_quarter(x + 8))),
                            _mm512_add_epi32(_mm512_madd_epi16(q.c, x_quarter(x + 16)), _mm512_madd_epi16(q.d, x_quarter(x + 24))));
  }
};

}  // namespace

void int4_dot_avx512bw(const int16_t* x, const float* xs, int64_t rows, const uint8_t* block, int64_t groups, int64_t prefetch,
                       float* out) {
  int4_any<Avx512Int4<MaddSums>>(x, xs, rows, block, groups, prefetch, out);
}

}  // namespace minivllm
#pragma GCC pop_options
