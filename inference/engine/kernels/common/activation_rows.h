// Activation rows rounded to int16 with one scale each (max |x| / 32767): a relative error ~30x
// below int8 weights' own, and integer products that add up exactly (int8_linear.cpp).
#pragma once
#include <cstdint>

namespace minivllm {

// Rounds one row of K floats (K % 8 == 0) to int16 (nearest, ties to even); returns the scale that undoes it.
float quantize_row_int16(const float* x, int64_t K, int16_t* out);

}  // namespace minivllm
