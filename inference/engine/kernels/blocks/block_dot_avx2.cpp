// AVX2 version of the block dot products (block_dot.h): a block's 16 channels in two registers
// of 8, two rows a pass (16 ymm registers: more would spill). The integer sums are the
// AVX-512BW version's (block_pair_sums.h), so the bits are every other version's.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

#include "blocks/block_dot_loop.h"
#include "blocks/block_pair_sums.h"

namespace minivllm {
namespace {

struct Avx2Steps { __m256i step[8]; };

struct Avx2PairOps {
  using V = __m256i;
  static V zero() { return _mm256_setzero_si256(); }
  static V low_nibbles(V v) { return _mm256_and_si256(v, _mm256_set1_epi8(15)); }
  static V high_nibbles(V v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(15)); }
  static V pairs(V levels, const int8_t* q) { return _mm256_maddubs_epi16(levels, _mm256_set1_epi32(four_bytes(q))); }
  static V add16(V a, V b) { return _mm256_add_epi16(a, b); }
  static V add32(V a, V b) { return _mm256_add_epi32(a, b); }
  static V widen(V pairs) { return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)); }
  static V times16(V v) { return _mm256_slli_epi32(v, 4); }
};

struct Avx2Block {
  static constexpr int kParts = 2, kPartChannels = 8, kMaxRows = 2;
  using F = __m256;
  using I = __m256i;
  static F fzero() { return _mm256_setzero_ps(); }
  static F fset1(float v) { return _mm256_set1_ps(v); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F fnmadd(F a, F b, F c) { return _mm256_fnmadd_ps(a, b, c); }
  static F to_float(I v) { return _mm256_cvtepi32_ps(v); }
  static I izero() { return _mm256_setzero_si256(); }
  static I iset1(int32_t v) { return _mm256_set1_epi32(v); }
  static I add(I a, I b) { return _mm256_add_epi32(a, b); }
  static I sub(I a, I b) { return _mm256_sub_epi32(a, b); }
  static I mullo(I a, I b) { return _mm256_mullo_epi32(a, b); }
  static I int16_pairs(I low, I high) { return _mm256_or_si256(_mm256_and_si256(low, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(high, 16)); }
  static I pair_products(I acc, I a, I b) { return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)); }
  static I scales(const int8_t* p, int part) {
    return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + kPartChannels * part)));
  }
  static F halfs(const uint8_t* p, int part) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * kPartChannels * part)));
  }
  static __m256i load(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

  template <LevelBits L>
  static Avx2Steps levels(const uint8_t* unit, int part) {
    const __m256i low = _mm256_set1_epi8(15);
    const uint8_t* u = unit + 32 * part;  // channels 8 * part .. 8 * part + 7 of every 64-byte vector
    Avx2Steps l;
    for (int p = 0; p < 4; ++p) {
      const __m256i v = load(u + 64 * p);
      l.step[p] = _mm256_and_si256(v, low);
      l.step[p + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
    }
    if constexpr (L == LevelBits::NibbleTable) {
      const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Levels)));
      for (int s = 0; s < 8; ++s) l.step[s] = _mm256_shuffle_epi8(table, l.step[s]);
    } else if constexpr (L == LevelBits::Nibble1) {
      const __m256i high = load(u + 256), one = _mm256_set1_epi8(1);
      for (int s = 0; s < 8; ++s)
        l.step[s] = _mm256_or_si256(l.step[s], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, s), one), 4));
    } else if constexpr (L == LevelBits::Nibble2) {
      const __m256i three = _mm256_set1_epi8(3);
      for (int h = 0; h < 2; ++h) {
        const __m256i high = load(u + 256 + 64 * h);
        for (int t = 0; t < 4; ++t)
          l.step[4 * h + t] =
              _mm256_or_si256(l.step[4 * h + t], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 2 * t), three), 4));
      }
    }
    return l;
  }
  template <LevelBits L>
  static I dot(const Avx2Steps& l, int first, int count, const int8_t* q) { return pair_sums<Avx2PairOps, L>(l.step + first, count, q); }
  static void store(F v, float* out, int64_t channels) { store_lanes(v, out, channels); }
};

}  // namespace

void block_dot_avx2(BlockType type, const ActivationBlocks& x, int64_t rows, const uint8_t* block, int64_t prefetch, float* out,
                    int64_t out_stride, int64_t channels) {
  block_dot<Avx2Block>(type, x, rows, block, prefetch, out, out_stride, channels);
}

}  // namespace minivllm
#pragma GCC pop_options
