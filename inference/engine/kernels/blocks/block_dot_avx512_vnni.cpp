// AVX-512 VNNI version of the block dot products (block_dot.h): one vpdpbusd a step, 16
// channels x 4 weights x one row's 4 broadcast activations.
//
// Nothing after the target pragma runs unless cpu_isa.h says so, and no torch header is
// included, as in the group versions.
#include <immintrin.h>

#include <cstdint>

#include "blocks/block_dot.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vnni,avx2,fma,f16c")
#include "blocks/block_dot_avx512_lanes.h"
#include "blocks/block_dot_loop.h"

namespace minivllm {
namespace {

struct VnniSums {
  template <LevelBits>
  static __m512i of(const Avx512Steps& l, int first, int count, const int8_t* q) {
    __m512i sums = _mm512_setzero_si512();
    for (int s = 0; s < count; ++s) sums = _mm512_dpbusd_epi32(sums, l.step[first + s], _mm512_set1_epi32(four_bytes(q + 4 * s)));
    return sums;
  }
  static __m512i pair_products(__m512i acc, __m512i a, __m512i b) { return _mm512_dpwssd_epi32(acc, a, b); }
};

}  // namespace

void block_dot_avx512_vnni(BlockType type, const ActivationBlocks& x, int64_t rows, const uint8_t* block, int64_t prefetch,
                           float* out, int64_t out_stride, int64_t channels) {
  block_dot<Avx512Block<VnniSums>>(type, x, rows, block, prefetch, out, out_stride, channels);
}

}  // namespace minivllm
#pragma GCC pop_options
