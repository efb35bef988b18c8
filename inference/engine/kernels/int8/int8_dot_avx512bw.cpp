// AVX-512BW version of the int8 dot products (int8_dot.h), for CPUs with AVX-512 but no VNNI
// (Skylake-SP Xeons, still common in clouds): vpmaddwd then vpaddd over 32 elements at a time,
// twice the width of the AVX2 version. vpmaddwd adds the same pairs that VNNI's vpdpwssd adds,
// so the sums, and the bits, are the same as every other version's.
//
// As in int8_dot_avx512.cpp, nothing after the target pragma runs unless cpu_has_avx512bw()
// says so, and no torch header is included.
#include <immintrin.h>

#include <cstdint>

#include "int8/int8_dot.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw")
#include "int8/int8_dot_avx512_lanes.h"
#include "int8/int8_dot_loop.h"

namespace minivllm {
namespace {

struct Avx512Bw : Avx512Lanes {
  static Acc multiply_add(Acc acc, Acc x, Acc w) { return _mm512_add_epi32(acc, _mm512_madd_epi16(x, w)); }
};

}  // namespace

void int8_dot_avx512bw(const int16_t* x0, const int16_t* x1, const int8_t* w, int64_t K, int64_t count, int64_t prefetch, int64_t* out0,
                       int64_t* out1) {
  dot_any<Avx512Bw>(x0, x1, w, K, count, prefetch, out0, out1);
}

}  // namespace minivllm
#pragma GCC pop_options
