// AVX-512 VNNI version of the grouped dot products (group_dot.h): one vpdpbusd a step, 16
// channels x 4 weights x one row's 4 broadcast activations.
//
// Nothing after the target pragma runs unless cpu_isa.h says so, and no torch header is
// included, as in the int8 versions.
#include <immintrin.h>

#include <cstdint>

#include "groups/group_dot.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vnni,avx2,fma,f16c")
#include "groups/group_dot_avx512_lanes.h"
#include "groups/group_dot_loop.h"

namespace minivllm {
namespace {

struct VnniSums {
  template <int Bits>
  static __m512i of(const Avx512Steps& l, const int8_t* x) {
    __m512i sums = _mm512_setzero_si512();
    for (int s = 0; s < kGroupSteps; ++s) sums = _mm512_dpbusd_epi32(sums, l.step[s], _mm512_set1_epi32(four_bytes(x + 4 * s)));
    return sums;
  }
};

}  // namespace

void group_dot_avx512_vnni(const ActivationGroups& x, int64_t rows, const uint8_t* block, int64_t bits, int64_t prefetch,
                           float* out, int64_t out_stride, int64_t channels) {
  group_dot<Avx512Group<VnniSums>>(x, rows, block, bits, prefetch, out, out_stride, channels);
}

}  // namespace minivllm
#pragma GCC pop_options
