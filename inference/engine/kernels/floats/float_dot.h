// Weights kept in a GGUF's float16 or bfloat16 (or float32) times float32 activations: the file's
// own values, widened to float32 as they are loaded, never copied out as float32.
//
// The packed layout (float_pack): blocks of 16 output channels (the last padded with zero
// channels), each K steps of the 16 channels' weights for one input column: [N / 16][K][16]
// elements, so a block is one sequential read and a step one vector (two on AVX2).
// What every version computes per row and channel: two float32 sums, of the even and of the odd
// columns, each in order with fused multiply-adds, then their sum. The same on every ISA and for
// any number of rows, so a row's result never depends on its batch.
#pragma once
#include <cstdint>

namespace minivllm {

enum class FloatWeight { F16, BF16, F32 };

constexpr int64_t kFloatChannels = 16;
constexpr int64_t float_bytes(FloatWeight w) { return w == FloatWeight::F32 ? 4 : 2; }

// One block's `channels` (<= 16) outputs for every row of x (float32 [rows, K]): out[r * out_stride + c].
using FloatDotFn = void (*)(FloatWeight weight, const float* x, int64_t rows, int64_t K, const uint8_t* block, float* out,
                            int64_t out_stride, int64_t channels);

void float_dot_avx2(FloatWeight weight, const float* x, int64_t rows, int64_t K, const uint8_t* block, float* out,
                    int64_t out_stride, int64_t channels);
void float_dot_avx512(FloatWeight weight, const float* x, int64_t rows, int64_t K, const uint8_t* block, float* out,
                      int64_t out_stride, int64_t channels);

}  // namespace minivllm
