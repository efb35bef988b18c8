// AVX-512BW version of the grouped dot products (group_dot.h), for CPUs without VNNI:
// vpmaddubsw multiplies a step's unsigned levels by the row's signed bytes and adds pairs into
// int16, which cannot saturate for 4-bit levels (8 steps of pairs: at most 8 * 2 * 15 * 127 =
// 30480); 8-bit levels go as their two nibbles, 16 * high + low. vpmaddwd then adds the int16
// into the same exact int32 sums VNNI makes, so the bits are the VNNI version's.
#include <immintrin.h>

#include <cstdint>

#include "groups/group_dot.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx2,fma,f16c")
#include "groups/group_dot_avx512_lanes.h"
#include "groups/group_dot_loop.h"

namespace minivllm {
namespace {

struct PairSums {
  static __m512i nibble_sums(const __m512i* steps, int shift, const int8_t* x) {
    const __m512i low = _mm512_set1_epi8(15);
    __m512i pairs = _mm512_setzero_si512();
    for (int s = 0; s < kGroupSteps; ++s) {
      const __m512i levels = shift ? _mm512_and_si512(_mm512_srli_epi16(steps[s], shift), low) : steps[s];
      pairs = _mm512_add_epi16(pairs, _mm512_maddubs_epi16(levels, _mm512_set1_epi32(four_bytes(x + 4 * s))));
    }
    return _mm512_madd_epi16(pairs, _mm512_set1_epi16(1));
  }
  template <int Bits>
  static __m512i of(const Avx512Steps& l, const int8_t* x) {
    if constexpr (Bits == 4) {
      return nibble_sums(l.step, 0, x);
    } else {
      Avx512Steps low;
      for (int s = 0; s < kGroupSteps; ++s) low.step[s] = _mm512_and_si512(l.step[s], _mm512_set1_epi8(15));
      return _mm512_add_epi32(nibble_sums(low.step, 0, x), _mm512_slli_epi32(nibble_sums(l.step, 4, x), 4));
    }
  }
};

}  // namespace

void group_dot_avx512bw(const ActivationGroups& x, int64_t rows, const uint8_t* block, int64_t bits, int64_t prefetch, float* out,
                        int64_t out_stride, int64_t channels) {
  group_dot<Avx512Group<PairSums>>(x, rows, block, bits, prefetch, out, out_stride, channels);
}

}  // namespace minivllm
#pragma GCC pop_options
