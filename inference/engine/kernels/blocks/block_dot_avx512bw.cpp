// AVX-512BW version of the block dot products (block_dot.h), for CPUs without VNNI: vpmaddubsw
// multiplies a step's unsigned levels by the row's signed bytes and adds pairs into int16, as
// many steps as cannot saturate (block_pair_sums.h); vpmaddwd then adds the int16 into the
// same exact int32 sums VNNI makes, so the bits are the VNNI version's.
#include <immintrin.h>

#include <cstdint>

#include "blocks/block_dot.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx2,fma,f16c")
#include "blocks/block_dot_avx512_lanes.h"
#include "blocks/block_dot_loop.h"
#include "blocks/block_pair_sums.h"

namespace minivllm {
namespace {

struct Avx512PairOps {
  using V = __m512i;
  static V zero() { return _mm512_setzero_si512(); }
  static V low_nibbles(V v) { return _mm512_and_si512(v, _mm512_set1_epi8(15)); }
  static V high_nibbles(V v) { return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(15)); }
  static V pairs(V levels, const int8_t* q) { return _mm512_maddubs_epi16(levels, _mm512_set1_epi32(four_bytes(q))); }
  static V add16(V a, V b) { return _mm512_add_epi16(a, b); }
  static V add32(V a, V b) { return _mm512_add_epi32(a, b); }
  static V widen(V pairs) { return _mm512_madd_epi16(pairs, _mm512_set1_epi16(1)); }
  static V times16(V v) { return _mm512_slli_epi32(v, 4); }
};

struct PairSums {
  template <LevelBits L>
  static __m512i of(const Avx512Steps& l, int first, int count, const int8_t* q) {
    return pair_sums<Avx512PairOps, L>(l.step + first, count, q);
  }
  static __m512i pair_products(__m512i acc, __m512i a, __m512i b) { return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b)); }
};

}  // namespace

void block_dot_avx512bw(BlockType type, const ActivationBlocks& x, int64_t rows, const uint8_t* block, int64_t prefetch, float* out,
                        int64_t out_stride, int64_t channels) {
  block_dot<Avx512Block<PairSums>>(type, x, rows, block, prefetch, out, out_stride, channels);
}

}  // namespace minivllm
#pragma GCC pop_options
