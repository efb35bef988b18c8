// The loop both ISA versions of the float-weight dot products share (float_dot.h). `Isa` covers
// the 16 channels in kParts registers and loads a step's weights of each kind as float32.
// Internal linkage on purpose, so each file compiles its own copy for its own instruction set.
#pragma once
#include <cstdint>
#include <utility>

#include "floats/float_dot.h"

namespace minivllm {
namespace {

template <class Isa, FloatWeight W, int Rows>
void float_rows(const float* x, int64_t K, const uint8_t* block, float* out, int64_t out_stride, int64_t channels) {
  using F = typename Isa::F;
  constexpr int64_t kStep = kFloatChannels * float_bytes(W);
  F even[Rows][Isa::kParts], odd[Rows][Isa::kParts];
  for (int r = 0; r < Rows; ++r)
    for (int part = 0; part < Isa::kParts; ++part) even[r][part] = odd[r][part] = Isa::zero();
  int64_t k = 0;
  for (; k + 1 < K; k += 2) {
    for (int part = 0; part < Isa::kParts; ++part) {
      const F w0 = Isa::template load<W>(block + k * kStep, part), w1 = Isa::template load<W>(block + (k + 1) * kStep, part);
      for (int r = 0; r < Rows; ++r) {
        even[r][part] = Isa::fma(Isa::set1(x[r * K + k]), w0, even[r][part]);
        odd[r][part] = Isa::fma(Isa::set1(x[r * K + k + 1]), w1, odd[r][part]);
      }
    }
  }
  if (k < K)
    for (int part = 0; part < Isa::kParts; ++part) {
      const F w0 = Isa::template load<W>(block + k * kStep, part);
      for (int r = 0; r < Rows; ++r) even[r][part] = Isa::fma(Isa::set1(x[r * K + k]), w0, even[r][part]);
    }
  for (int r = 0; r < Rows; ++r)
    for (int part = 0; part < Isa::kParts; ++part)
      Isa::store(Isa::add(even[r][part], odd[r][part]), out + r * out_stride + part * Isa::kPartChannels,
                 channels - part * Isa::kPartChannels);
}

template <class Isa, FloatWeight W, size_t... Rows>
void float_remainder(std::index_sequence<Rows...>, int64_t rows, const float* x, int64_t K, const uint8_t* block, float* out,
                     int64_t out_stride, int64_t channels) {
  ((rows == static_cast<int64_t>(Rows) + 1 ? float_rows<Isa, W, Rows + 1>(x, K, block, out, out_stride, channels) : void()), ...);
}

template <class Isa, FloatWeight W>
void float_any(const float* x, int64_t rows, int64_t K, const uint8_t* block, float* out, int64_t out_stride, int64_t channels) {
  int64_t r = 0;
  for (; r + Isa::kMaxRows <= rows; r += Isa::kMaxRows)
    float_rows<Isa, W, Isa::kMaxRows>(x + r * K, K, block, out + r * out_stride, out_stride, channels);
  if (r < rows)
    float_remainder<Isa, W>(std::make_index_sequence<Isa::kMaxRows - 1>(), rows - r, x + r * K, K, block, out + r * out_stride,
                            out_stride, channels);
}

template <class Isa>
void float_dot(FloatWeight weight, const float* x, int64_t rows, int64_t K, const uint8_t* block, float* out, int64_t out_stride,
               int64_t channels) {
  switch (weight) {
    case FloatWeight::F16: return float_any<Isa, FloatWeight::F16>(x, rows, K, block, out, out_stride, channels);
    case FloatWeight::BF16: return float_any<Isa, FloatWeight::BF16>(x, rows, K, block, out, out_stride, channels);
    case FloatWeight::F32: return float_any<Isa, FloatWeight::F32>(x, rows, K, block, out, out_stride, channels);
  }
}

}  // namespace
}  // namespace minivllm
