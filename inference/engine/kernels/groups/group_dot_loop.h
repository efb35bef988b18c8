// The loop every ISA version of the grouped dot products shares (group_dot_avx2.cpp,
// group_dot_avx512*.cpp): a block's 16 channels, a few rows a pass, each group's levels unpacked
// once for all the pass's rows; the block's bytes, read from memory by the first pass, serve the
// others from L1.
//
// `Isa` covers the 16 channels in kParts registers of kPartChannels float lanes and supplies the
// operations below. Internal linkage on purpose, so each file compiles its own copy for its own
// instruction set.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <utility>

#include "common/lanes.h"
#include "groups/group_dot.h"

namespace minivllm {
namespace {

template <class Isa, int Bits, int Rows>
void group_rows(const ActivationGroups& x, const uint8_t* block, int64_t prefetch, float* out, int64_t out_stride, int64_t channels) {
  using F = typename Isa::F;
  constexpr int64_t kBytes = group_bytes(Bits), kLevelBytes = group_level_bytes(Bits);
  const int64_t groups = x.groups;
  F acc[Rows][Isa::kParts];
  for (int r = 0; r < Rows; ++r)
    for (int part = 0; part < Isa::kParts; ++part) acc[r][part] = Isa::zero();
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* group = block + g * kBytes;
    if (prefetch)
      for (int64_t line = 0; line < kBytes; line += 64) _mm_prefetch(reinterpret_cast<const char*>(group + prefetch + line), _MM_HINT_T0);
    for (int part = 0; part < Isa::kParts; ++part) {
      const auto levels = Isa::template levels<Bits>(group, part);  // each unpack feeds every row
      const F scale = Isa::halfs(group + kLevelBytes, part), minimum = Isa::halfs(group + kLevelBytes + 2 * kGroupChannels, part);
      for (int r = 0; r < Rows; ++r) {
        const int64_t at = r * groups + g;
        const int8_t* q = x.q + at * 2 * kGroup;
        const F sums = Isa::to_float(Isa::add_levels(Isa::template sums<Bits>(levels, q), Isa::template sums<Bits>(levels, q + kGroup)));
        acc[r][part] = Isa::fma(sums, Isa::mul(scale, Isa::set1(x.scale[at])), acc[r][part]);
        acc[r][part] = Isa::fma(minimum, Isa::set1(x.scaled_sum[at]), acc[r][part]);
      }
    }
  }
  for (int r = 0; r < Rows; ++r)
    for (int part = 0; part < Isa::kParts; ++part)
      Isa::store(acc[r][part], out + r * out_stride + part * Isa::kPartChannels, channels - part * Isa::kPartChannels);
}

template <class Isa, int Bits, size_t... Rows>
void group_remainder(std::index_sequence<Rows...>, int64_t rows, const ActivationGroups& x, const uint8_t* block, int64_t prefetch,
                     float* out, int64_t out_stride, int64_t channels) {
  // a compile-time row count keeps the accumulators in registers
  ((rows == static_cast<int64_t>(Rows) + 1 ? group_rows<Isa, Bits, Rows + 1>(x, block, prefetch, out, out_stride, channels) : void()), ...);
}

template <class Isa, int Bits>
void group_any(const ActivationGroups& x, int64_t rows, const uint8_t* block, int64_t prefetch, float* out, int64_t out_stride,
               int64_t channels) {
  auto from = [&](int64_t r) { return ActivationGroups{x.q + r * x.groups * 2 * kGroup, x.scale + r * x.groups, x.scaled_sum + r * x.groups, x.groups}; };
  int64_t r = 0;
  for (; r + Isa::kMaxRows <= rows; r += Isa::kMaxRows)
    group_rows<Isa, Bits, Isa::kMaxRows>(from(r), block, prefetch, out + r * out_stride, out_stride, channels);
  if (r < rows)
    group_remainder<Isa, Bits>(std::make_index_sequence<Isa::kMaxRows - 1>(), rows - r, from(r), block, prefetch, out + r * out_stride,
                               out_stride, channels);
}

template <class Isa>
void group_dot(const ActivationGroups& x, int64_t rows, const uint8_t* block, int64_t bits, int64_t prefetch, float* out,
               int64_t out_stride, int64_t channels) {
  if (bits == 4) return group_any<Isa, 4>(x, rows, block, prefetch, out, out_stride, channels);
  group_any<Isa, 8>(x, rows, block, prefetch, out, out_stride, channels);
}

}  // namespace
}  // namespace minivllm
