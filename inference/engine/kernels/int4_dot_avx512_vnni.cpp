// AVX-512 VNNI version of the 4-bit dot products (int4_dot.h): vpdpwssd adds the same pairs as
// pmaddwd into the running sum, one instruction instead of two; the integers, and so the bits,
// are the AVX-512BW version's.
//
// Nothing after the target pragma runs unless cpu_isa.h says so, and no torch header is
// included, as in the int8 versions.
#include <immintrin.h>

#include <cstdint>

#include "int4_dot.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vnni,avx2,fma,f16c")
#include "int4_dot_avx512_lanes.h"
#include "int4_dot_loop.h"

namespace minivllm {
namespace {

struct VnniSums {
  static __m512i of(const Avx512Levels& q, const int16_t* x) {
    __m512i sums = _mm512_madd_epi16(q.a, x_quarter(x));
    sums = _mm512_dpwssd_epi32(sums, q.b, x_quarter(x + 8));
    sums = _mm512_dpwssd_epi32(sums, q.c, x_quarter(x + 16));
    return _mm512_dpwssd_epi32(sums, q.d, x_quarter(x + 24));
  }
};

}  // namespace

void int4_dot_avx512_vnni(const int16_t* x, const float* xs, int64_t rows, const uint8_t* block, int64_t groups, int64_t prefetch,
                          float* out) {
  int4_any<Avx512Int4<VnniSums>>(x, xs, rows, block, groups, prefetch, out);
}

}  // namespace minivllm
#pragma GCC pop_options
