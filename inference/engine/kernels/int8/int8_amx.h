// int8 weights on AMX tiles (int8_amx.cpp): the layout and the entry point int8_linear.cpp calls.
//
// The sums are the same exact integers as the vector versions' (int8_dot.h), converted and
// scaled in the same order, so the bits are theirs.
#pragma once
#include <cstdint>

namespace minivllm {

constexpr int64_t kAmxInt8Channels = 16;     // a block: the channels of one tile's columns
constexpr int64_t kAmxInt8Step = 64;         // K elements one tile multiply takes
constexpr int64_t kAmxInt8StepBytes = 1024;  // a block's weights for one step: one whole tile
constexpr int64_t kAmxInt8MaxRows = 16;      // activation rows a tile holds
constexpr int64_t kAmxInt8MaxK = 65536;      // low-byte sums, at most K * 255 * 128, stay below 2^31

inline int64_t amx_int8_padded_k(int64_t K) { return (K + kAmxInt8Step - 1) / kAmxInt8Step * kAmxInt8Step; }

// The packed layout (int8_pack_weight with isa "amx"): int8 [ceil(N / 16), Kp / 64, 1024], Kp = K
// rounded up to 64, padding zero. Step s of block b is the tile AMX reads as B: its row r holds, for
// each channel n < 16, weights 64s + 4r .. 64s + 4r + 3 of channel 16b + n.
inline int64_t amx_int8_offset(int64_t n, int64_t k, int64_t steps) {
  return ((n / kAmxInt8Channels) * steps + k / kAmxInt8Step) * kAmxInt8StepBytes + (k % kAmxInt8Step / 4) * 64 +
         (n % kAmxInt8Channels) * 4 + k % 4;
}

// For blocks [block_begin, block_end): out[m, n] = float(exact sum) * scales[n] * row_scales[m] for the
// M rows (or, with `accumulate`, added to out). x_low / x_high: the rows' int16 values split into bytes,
// x = 256 * high + low with low unsigned and high signed, [rows, Kp] each, rows = M rounded up to whole
// tiles of `tile_rows` (<= 16), padding zero. `prefetch`: as int8_dot.h's.
void int8_amx_blocks(const uint8_t* x_low, const int8_t* x_high, int64_t M, int64_t tile_rows, int64_t Kp, const int8_t* weight,
                     int64_t block_begin, int64_t block_end, int64_t N, const float* scales, const float* row_scales, bool accumulate,
                     int64_t prefetch, float* out);

}  // namespace minivllm
