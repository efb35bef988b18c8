// The loop every ISA version of the block dot products shares (block_dot_avx2.cpp,
// block_dot_avx512*.cpp): a block's 16 channels, a few rows a pass, each unit's levels unpacked
// once for all the pass's rows.
//
// `Isa` covers the 16 channels in kParts registers of kPartChannels lanes and supplies: levels<L>
// (a unit's 8 steps of unsigned levels), dot<L> (the exact int32 sums of some steps with a row's
// int8 levels), scales (16 int8 as int32 lanes), int16_pairs (two int32 lanes' low halves as one
// lane's int16 pair) and pair_products (acc + lo * lo' + hi * hi' of int16 pairs: vpmaddwd, VNNI's
// vpdpwssd), and the float and integer operations below.
// Internal linkage on purpose, so each file compiles its own copy for its own instruction set.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <utility>

#include "blocks/block_dot.h"
#include "common/lanes.h"

namespace minivllm {
namespace {

// Two sub-blocks' level sums as one lane's int16 pair (|bsum| <= 32 * 127 fits int16), for pair_products.
inline int32_t bsum_pair(const int32_t* bsum) {
  return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint16_t>(bsum[0])) | static_cast<uint32_t>(bsum[1]) << 16);
}

template <LevelBits L, int S, int Sub, bool Minimum>
struct Shape {
  static constexpr int kUnits = S / 32, kSubs = S / Sub, kHalves = 32 / Sub, kStepsPerSub = Sub / 4;
  static constexpr int64_t kUnitBytes = unit_bytes(L);
  static constexpr int64_t kScales = kUnits * kUnitBytes, kMins = kScales + kSubs * kBlockChannels;
  static constexpr int64_t kD = kMins + (Minimum ? kSubs * kBlockChannels : 0), kDmin = kD + 2 * kBlockChannels;
  static constexpr int64_t kBytes = kD + 2 * kBlockChannels * (Minimum ? 2 : 1);
};

template <class Isa, LevelBits L, int S, int Sub, bool Minimum, int Rows>
void block_rows(const ActivationBlocks& x, int offset, const uint8_t* block, int64_t prefetch, float* out, int64_t out_stride,
                int64_t channels) {
  using F = typename Isa::F;
  using I = typename Isa::I;
  using Sh = Shape<L, S, Sub, Minimum>;
  const int64_t K = x.K, blocks = K / S, subs_per_row = K / Sub;
  // an offset type's sum(sc * offset * bsum) once a super-block and row, from int16 pairs of scales,
  // rather than offset * bsum off every sub-block's dot (the same exact int32 isum)
  constexpr bool kOffsetPairs = !Minimum && Sh::kSubs % 2 == 0;
  F acc[Rows][Isa::kParts];
  for (int r = 0; r < Rows; ++r)
    for (int part = 0; part < Isa::kParts; ++part) acc[r][part] = Isa::fzero();
  for (int64_t sb = 0; sb < blocks; ++sb) {
    const uint8_t* p = block + sb * Sh::kBytes;
    if (prefetch)
      for (int64_t line = 0; line < Sh::kBytes; line += 64) _mm_prefetch(reinterpret_cast<const char*>(p + prefetch + line), _MM_HINT_T0);
    const int8_t* sc = reinterpret_cast<const int8_t*>(p + Sh::kScales);
    for (int part = 0; part < Isa::kParts; ++part) {
      I isum[Rows];
      for (int r = 0; r < Rows; ++r) isum[r] = Isa::izero();
      for (int u = 0; u < Sh::kUnits; ++u) {
        const auto steps = Isa::template levels<L>(p + u * Sh::kUnitBytes, part);  // each unpack feeds every row
        for (int h = 0; h < Sh::kHalves; ++h) {
          const int j = u * Sh::kHalves + h;
          const I scale = Isa::scales(sc + j * kBlockChannels, part);
          for (int r = 0; r < Rows; ++r) {
            const int8_t* q = x.q + r * K + sb * S + u * 32 + h * Sub;
            I dot = Isa::template dot<L>(steps, h * Sh::kStepsPerSub, Sh::kStepsPerSub, q);
            if constexpr (!Minimum && !kOffsetPairs) dot = Isa::sub(dot, Isa::iset1(offset * x.bsum[r * subs_per_row + sb * Sh::kSubs + j]));
            isum[r] = Isa::add(isum[r], Isa::mullo(dot, scale));
          }
        }
      }
      if constexpr (kOffsetPairs) {
        if (offset) {
          I scs[Sh::kSubs / 2];
          for (int j = 0; j < Sh::kSubs / 2; ++j) scs[j] = Isa::int16_pairs(Isa::scales(sc + 2 * j * kBlockChannels, part), Isa::scales(sc + (2 * j + 1) * kBlockChannels, part));
          const I off = Isa::iset1(offset);
          for (int r = 0; r < Rows; ++r) {
            const int32_t* bsum = x.bsum + r * subs_per_row + sb * Sh::kSubs;
            I osum = Isa::izero();
            for (int j = 0; j < Sh::kSubs / 2; ++j) osum = Isa::pair_products(osum, scs[j], Isa::iset1(bsum_pair(bsum + 2 * j)));
            isum[r] = Isa::sub(isum[r], Isa::mullo(osum, off));
          }
        }
      }
      const F d = Isa::halfs(p + Sh::kD, part);
      // minimum types: two sub-blocks' minimums a lane as int16 pairs, built once for every row, so a
      // row's msum is one int16 pair product a two sub-blocks (exact: |bsum| <= 32 * 127, mn < 64)
      constexpr int kPairs = Minimum && Sh::kSubs % 2 == 0 ? Sh::kSubs / 2 : 0;
      const int8_t* mn = reinterpret_cast<const int8_t*>(p + Sh::kMins);
      I mins[kPairs > 0 ? kPairs : 1];
      for (int j = 0; j < kPairs; ++j) mins[j] = Isa::int16_pairs(Isa::scales(mn + 2 * j * kBlockChannels, part), Isa::scales(mn + (2 * j + 1) * kBlockChannels, part));
      const F dmin = Minimum ? Isa::halfs(p + Sh::kDmin, part) : Isa::fzero();
      for (int r = 0; r < Rows; ++r) {
        const F dx = Isa::fset1(x.scale[r * blocks + sb]);
        acc[r][part] = Isa::fma(Isa::to_float(isum[r]), Isa::mul(d, dx), acc[r][part]);
        if constexpr (Minimum) {
          const int32_t* bsum = x.bsum + r * subs_per_row + sb * Sh::kSubs;
          I msum = Isa::izero();
          if constexpr (kPairs > 0) {
            for (int j = 0; j < kPairs; ++j)
              msum = Isa::pair_products(msum, mins[j], Isa::iset1(bsum_pair(bsum + 2 * j)));
          } else {
            for (int j = 0; j < Sh::kSubs; ++j) msum = Isa::add(msum, Isa::mullo(Isa::scales(mn + j * kBlockChannels, part), Isa::iset1(bsum[j])));
          }
          acc[r][part] = Isa::fnmadd(Isa::to_float(msum), Isa::mul(dmin, dx), acc[r][part]);
        }
      }
    }
  }
  for (int r = 0; r < Rows; ++r)
    for (int part = 0; part < Isa::kParts; ++part)
      Isa::store(acc[r][part], out + r * out_stride + part * Isa::kPartChannels, channels - part * Isa::kPartChannels);
}

template <class Isa, LevelBits L, int S, int Sub, bool Minimum, size_t... Rows>
void block_remainder(std::index_sequence<Rows...>, int64_t rows, const ActivationBlocks& x, int offset, const uint8_t* block,
                     int64_t prefetch, float* out, int64_t out_stride, int64_t channels) {
  // a compile-time row count keeps the accumulators in registers
  ((rows == static_cast<int64_t>(Rows) + 1 ? block_rows<Isa, L, S, Sub, Minimum, Rows + 1>(x, offset, block, prefetch, out, out_stride, channels)
                                           : void()),
   ...);
}

template <class Isa, LevelBits L, int S, int Sub, bool Minimum>
void block_any(const ActivationBlocks& x, int offset, int64_t rows, const uint8_t* block, int64_t prefetch, float* out,
               int64_t out_stride, int64_t channels) {
  const int64_t K = x.K;
  auto from = [&](int64_t r) { return ActivationBlocks{x.q + r * K, x.scale + r * (K / S), x.bsum + r * (K / Sub), K}; };
  int64_t r = 0;
  for (; r + Isa::kMaxRows <= rows; r += Isa::kMaxRows)
    block_rows<Isa, L, S, Sub, Minimum, Isa::kMaxRows>(from(r), offset, block, prefetch, out + r * out_stride, out_stride, channels);
  if (r < rows)
    block_remainder<Isa, L, S, Sub, Minimum>(std::make_index_sequence<Isa::kMaxRows - 1>(), rows - r, from(r), offset, block, prefetch,
                                              out + r * out_stride, out_stride, channels);
}

// One instantiation per type's shape.
template <class Isa>
void block_dot(BlockType type, const ActivationBlocks& x, int64_t rows, const uint8_t* block, int64_t prefetch, float* out,
               int64_t out_stride, int64_t channels) {
  const int offset = traits(type).offset;
  switch (type) {
    case BlockType::Q5_0: return block_any<Isa, LevelBits::Nibble1, 32, 32, false>(x, offset, rows, block, prefetch, out, out_stride, channels);
    case BlockType::Q5_1: return block_any<Isa, LevelBits::Nibble1, 32, 32, true>(x, offset, rows, block, prefetch, out, out_stride, channels);
    case BlockType::IQ4_NL: return block_any<Isa, LevelBits::NibbleTable, 32, 32, false>(x, offset, rows, block, prefetch, out, out_stride, channels);
    case BlockType::Q2_K: return block_any<Isa, LevelBits::Nibble, 256, 16, true>(x, offset, rows, block, prefetch, out, out_stride, channels);
    case BlockType::Q3_K: return block_any<Isa, LevelBits::Nibble, 256, 16, false>(x, offset, rows, block, prefetch, out, out_stride, channels);
    case BlockType::Q4_K: return block_any<Isa, LevelBits::Nibble, 256, 32, true>(x, offset, rows, block, prefetch, out, out_stride, channels);
    case BlockType::Q5_K: return block_any<Isa, LevelBits::Nibble1, 256, 32, true>(x, offset, rows, block, prefetch, out, out_stride, channels);
    case BlockType::Q6_K: return block_any<Isa, LevelBits::Nibble2, 256, 16, false>(x, offset, rows, block, prefetch, out, out_stride, channels);
    case BlockType::IQ4_XS: return block_any<Isa, LevelBits::NibbleTable, 256, 32, false>(x, offset, rows, block, prefetch, out, out_stride, channels);
    default: return;  // Q4_0, Q4_1, Q8_0: the group kernel's (groups/); block_linear refuses them
  }
}

}  // namespace
}  // namespace minivllm
