// What the two AVX-512 versions of the block dot products share (block_dot.h): a block's 16
// channels in one register, up to 12 rows a pass (8 were ~10% slower at 128 rows of Q4_K). Each
// version supplies `Sums`, the exact integer sums of some steps' levels with a row's int8 levels
// (VNNI's vpdpbusd, or vpmaddubsw and vpmaddwd), and of int16 pairs (vpdpwssd, or vpmaddwd).
//
// Include it after a target pragma that enables AVX-512BW: internal linkage on purpose, as
// block_dot_loop.h.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "blocks/block_dot.h"

namespace minivllm {
namespace {

struct Avx512Steps { __m512i step[8]; };

template <class Sums>
struct Avx512Block {
  static constexpr int kParts = 1, kPartChannels = 16, kMaxRows = 12;
  using F = __m512;
  using I = __m512i;
  static F fzero() { return _mm512_setzero_ps(); }
  static F fset1(float v) { return _mm512_set1_ps(v); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F fnmadd(F a, F b, F c) { return _mm512_fnmadd_ps(a, b, c); }
  static F to_float(I v) { return _mm512_cvtepi32_ps(v); }
  static I izero() { return _mm512_setzero_si512(); }
  static I iset1(int32_t v) { return _mm512_set1_epi32(v); }
  static I add(I a, I b) { return _mm512_add_epi32(a, b); }
  static I sub(I a, I b) { return _mm512_sub_epi32(a, b); }
  static I mullo(I a, I b) { return _mm512_mullo_epi32(a, b); }
  static I int16_pairs(I low, I high) { return _mm512_or_si512(_mm512_and_si512(low, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(high, 16)); }
  static I pair_products(I acc, I a, I b) { return Sums::pair_products(acc, a, b); }
  static I scales(const int8_t* p, int) { return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static F halfs(const uint8_t* p, int) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }

  template <LevelBits L>
  static Avx512Steps levels(const uint8_t* unit, int) {
    const __m512i low = _mm512_set1_epi8(15);
    Avx512Steps l;
    for (int p = 0; p < 4; ++p) {
      const __m512i v = _mm512_loadu_si512(unit + 64 * p);
      l.step[p] = _mm512_and_si512(v, low);
      l.step[p + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
    }
    if constexpr (L == LevelBits::NibbleTable) {
      const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Levels)));
      for (int s = 0; s < 8; ++s) l.step[s] = _mm512_shuffle_epi8(table, l.step[s]);
    } else if constexpr (L == LevelBits::Nibble1) {
      // bit s of each high byte moved to bit 4 (as for Nibble2 below) and or-ed in
      const __m512i high = _mm512_loadu_si512(unit + 256), bit4 = _mm512_set1_epi8(0x10);
      const __m512i moved[8] = {_mm512_slli_epi16(high, 4), _mm512_slli_epi16(high, 3), _mm512_slli_epi16(high, 2),
                                _mm512_slli_epi16(high, 1), high, _mm512_srli_epi16(high, 1), _mm512_srli_epi16(high, 2),
                                _mm512_srli_epi16(high, 3)};
      for (int s = 0; s < 8; ++s) l.step[s] = _mm512_ternarylogic_epi32(l.step[s], moved[s], bit4, 0xF8);  // a | (b & c)
    } else if constexpr (L == LevelBits::Nibble2) {
      // bits 2t, 2t + 1 of each high byte moved to bits 4-5 (16-bit shifts: what crosses a byte is
      // masked off) and or-ed in: one shift and one ternary logic a step
      const __m512i bits45 = _mm512_set1_epi8(0x30);
      for (int h = 0; h < 2; ++h) {
        const __m512i high = _mm512_loadu_si512(unit + 256 + 64 * h);
        const __m512i moved[4] = {_mm512_slli_epi16(high, 4), _mm512_slli_epi16(high, 2), high, _mm512_srli_epi16(high, 2)};
        for (int t = 0; t < 4; ++t) l.step[4 * h + t] = _mm512_ternarylogic_epi32(l.step[4 * h + t], moved[t], bits45, 0xF8);  // a | (b & c)
      }
    }
    return l;
  }
  template <LevelBits L>
  static I dot(const Avx512Steps& l, int first, int count, const int8_t* q) { return Sums::template of<L>(l, first, count, q); }
  static void store(F v, float* out, int64_t channels) {
    if (channels <= 0) return;
    _mm512_mask_storeu_ps(out, channels >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << channels) - 1), v);
  }
};

}  // namespace
}  // namespace minivllm
