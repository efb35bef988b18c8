// AVX2 version of the grouped dot products (group_dot.h): a block's 16 channels in two registers
// of 8, two rows a pass (16 ymm registers: more would spill). The integer sums are the AVX-512BW
// version's (vpmaddubsw, vpmaddwd), so the bits are every other version's.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

#include "groups/group_dot_loop.h"

namespace minivllm {
namespace {

struct Avx2Steps { __m256i step[kGroupSteps]; };

struct Avx2Group {
  static constexpr int kParts = 2, kPartChannels = 8, kMaxRows = 2;
  using F = __m256;
  static F zero() { return _mm256_setzero_ps(); }
  static F set1(float v) { return _mm256_set1_ps(v); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F to_float(__m256i v) { return _mm256_cvtepi32_ps(v); }
  static __m256i add_levels(__m256i first, __m256i second) { return _mm256_add_epi32(_mm256_slli_epi32(first, 7), second); }
  static F halfs(const uint8_t* p, int part) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * kPartChannels * part)));
  }
  template <int Bits>
  static Avx2Steps levels(const uint8_t* group, int part) {
    Avx2Steps l;
    if constexpr (Bits == 8) {
      for (int s = 0; s < kGroupSteps; ++s) l.step[s] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(group + 64 * s + 32 * part));
    } else {
      const __m256i low = _mm256_set1_epi8(15);
      for (int p = 0; p < kGroupSteps / 2; ++p) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(group + 64 * p + 32 * part));
        l.step[p] = _mm256_and_si256(v, low);
        l.step[p + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
      }
    }
    return l;
  }
  static __m256i nibble_sums(const __m256i* steps, int shift, const int8_t* x) {
    const __m256i low = _mm256_set1_epi8(15);
    __m256i pairs = _mm256_setzero_si256();
    for (int s = 0; s < kGroupSteps; ++s) {
      const __m256i levels = shift ? _mm256_and_si256(_mm256_srli_epi16(steps[s], shift), low) : steps[s];
      pairs = _mm256_add_epi16(pairs, _mm256_maddubs_epi16(levels, _mm256_set1_epi32(four_bytes(x + 4 * s))));
    }
    return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
  }
  template <int Bits>
  static __m256i sums(const Avx2Steps& l, const int8_t* x) {
    if constexpr (Bits == 4) {
      return nibble_sums(l.step, 0, x);
    } else {
      Avx2Steps low;
      for (int s = 0; s < kGroupSteps; ++s) low.step[s] = _mm256_and_si256(l.step[s], _mm256_set1_epi8(15));
      return _mm256_add_epi32(nibble_sums(low.step, 0, x), _mm256_slli_epi32(nibble_sums(l.step, 4, x), 4));
    }
  }
  static void store(F v, float* out, int64_t channels) { store_lanes(v, out, channels); }
};

}  // namespace

void group_dot_avx2(const ActivationGroups& x, int64_t rows, const uint8_t* block, int64_t bits, int64_t prefetch, float* out,
                    int64_t out_stride, int64_t channels) {
  group_dot<Avx2Group>(x, rows, block, bits, prefetch, out, out_stride, channels);
}

}  // namespace minivllm
#pragma GCC pop_options
