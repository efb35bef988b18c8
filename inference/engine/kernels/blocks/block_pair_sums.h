// The exact int32 sums of a few steps of unsigned levels with a row's int8 levels, through
// vpmaddubsw (pairs of products into int16, saturating) and vpmaddwd: the AVX2 and AVX-512BW
// versions' stand-in for VNNI's vpdpbusd. As many steps go into one int16 sum as cannot saturate
// for the type's largest level (2 * level * 127 a step); IQ4's table levels (up to 241) go as
// their two nibbles, 16 * high + low.
//
// `Ops` names the vector operations of one width. Internal linkage, as block_dot_loop.h.
#pragma once
#include <cstdint>

#include "blocks/block_types.h"

namespace minivllm {
namespace {

template <class Ops>
typename Ops::V chunked_pair_sums(const typename Ops::V* steps, int count, const int8_t* q, int chunk) {
  using V = typename Ops::V;
  V sums = Ops::zero();
  for (int s = 0; s < count; s += chunk) {
    V pairs = Ops::zero();
    for (int i = s; i < s + chunk && i < count; ++i) pairs = Ops::add16(pairs, Ops::pairs(steps[i], q + 4 * i));
    sums = Ops::add32(sums, Ops::widen(pairs));
  }
  return sums;
}

template <class Ops, LevelBits L>
typename Ops::V pair_sums(const typename Ops::V* steps, int count, const int8_t* q) {
  using V = typename Ops::V;
  if constexpr (L == LevelBits::NibbleTable) {
    V low[8], high[8];
    for (int i = 0; i < count; ++i) {
      low[i] = Ops::low_nibbles(steps[i]);
      high[i] = Ops::high_nibbles(steps[i]);
    }
    return Ops::add32(chunked_pair_sums<Ops>(low, count, q, 8), Ops::times16(chunked_pair_sums<Ops>(high, count, q, 8)));
  } else {
    // 8 * 2 * 15 * 127 = 30480, 4 * 2 * 31 * 127 = 31496, 2 * 2 * 63 * 127 = 32004: all below 32768
    constexpr int chunk = L == LevelBits::Nibble ? 8 : L == LevelBits::Nibble1 ? 4 : 2;
    return chunked_pair_sums<Ops>(steps, count, q, chunk);
  }
}

}  // namespace
}  // namespace minivllm
