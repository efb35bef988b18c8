// 4-bit weights in groups of 32 (a float16 scale and minimum each): the dot products of int16
// activation rows with them, one version per ISA, every version giving the same bits.
//
// Why this format: a decode step at one stream reads every weight once, so its time is the
// weights' bytes over the memory bandwidth (~22 GB/s on two cores). Groups of 32 at 4 bits
// plus two float16 are 0.625 bytes a weight, against int8's 1 (2 for the two-level Q/K/V).
// It is llama.cpp's Q4_1, the embedded GGUF's own format, so 4-bit groups quantized from
// its de-quantized weights give those weights back (int4_linear.py).
#pragma once
#include <cstdint>

namespace minivllm {

constexpr int64_t kInt4Group = 32;     // weights sharing one scale and one minimum
constexpr int64_t kInt4Channels = 4;   // output channels in a block, read together
constexpr int64_t kInt4GroupBytes = kInt4Channels * kInt4Group / 2 + kInt4Channels * 4;  // 64 of nibbles, 16 of float16

// The packed layout (int4_pack_weight): blocks of kInt4Channels channels (the last one padded
// with zero channels), each its groups one after the other, so a block is one sequential read.
// A group is 80 bytes: each channel's 16 bytes of nibbles (weight i of the group in the low
// nibble of byte i, weight 16 + i in its high nibble), then the 4 scales, then the 4 minimums.
//
// Read as 16-bit words, a channel's 8 words give four vectors of levels: word i & 15 is weight
// 2i, (word i >> 4) & 15 weight 16 + 2i, (word i >> 8) & 15 weight 2i + 1, word i >> 12 weight
// 17 + 2i. The activations are permuted once per row to match (int4_linear.cpp), a group's 32
// int16 as four runs of 8: x[2i] for i < 8, then x[16 + 2i], x[2i + 1], x[17 + 2i]. Then pmaddwd pairs words 2k and
// 2k + 1, so each of a channel's 4 int32 lanes k sums, exactly, the 8 products of weights
// 4k..4k+3 and 16+4k..16+4k+3 (at most 8 * 32767 * 15 < 2^24: exact in float32 too).
//
// What every version computes, per row and channel, with 4 float lanes k (AVX-512 holds the 4
// channels' 16 lanes in one register, AVX2 two channels' in each of two):
//   for each group in order:  lane = fma(float(lane's integer sum), scale, lane)
//                             lane = fma(xs, minimum, lane)     xs: the row's sum of the lane's 8 x
//   total = (lane0 + lane1) + (lane2 + lane3)
// Fused multiply-adds round once on every ISA, so the bits agree.
//
// x: `rows` permuted int16 rows of K = 32 * groups, one after another; xs: their 4 lane sums per
// group (float), row after row. out: rows x the block's 4 channel totals, before each row's scale.
// Rows are taken a few at a time (kMaxRows of the version), so each unpack feeds several rows and
// the block's bytes, read from memory once, stay in L1 for the rest. `prefetch`: bytes ahead of
// the reads to ask for (0: none), as int8_dot.h.
using Int4DotFn = void (*)(const int16_t* x, const float* xs, int64_t rows, const uint8_t* block, int64_t groups,
                           int64_t prefetch, float* out);

void int4_dot_avx2(const int16_t* x, const float* xs, int64_t rows, const uint8_t* block, int64_t groups, int64_t prefetch,
                   float* out);
void int4_dot_avx512bw(const int16_t* x, const float* xs, int64_t rows, const uint8_t* block, int64_t groups, int64_t prefetch,
                       float* out);
void int4_dot_avx512_vnni(const int16_t* x, const float* xs, int64_t rows, const uint8_t* block, int64_t groups, int64_t prefetch,
                          float* out);

}  // namespace minivllm
