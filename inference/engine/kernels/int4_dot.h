// 4-bit weights in groups of 32 (a scale and a minimum each, float16): the dot products of
// int16 activation rows with them, one version per ISA, every version giving the same bits.
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
constexpr int64_t kInt4Channels = 4;   // output channels one call reads together
constexpr int64_t kInt4Lanes = 16;     // float lanes every version accumulates in (AVX2: two halves of 8)

// Bytes of one channel: K / 2 of nibbles, then a float16 scale and minimum per group.
inline int64_t int4_channel_bytes(int64_t K) { return K / 2 + 4 * (K / kInt4Group); }

// A row's group sums are zero-padded to whole vectors of kInt4Lanes groups.
inline int64_t int4_padded_groups(int64_t K) { return (K / kInt4Group + kInt4Lanes - 1) / kInt4Lanes * kInt4Lanes; }

// The packed layout (int4_pack_weight): channels in blocks of kInt4Channels (the last block may
// hold fewer, `count`). A block is the groups' nibbles, for each group the 16 bytes of channel 0,
// then of channel 1, ...; then each channel's G scales, then its G minimums (G = K / 32). One
// group's 16 bytes hold weight i in the low nibble of byte i and weight 16 + i in its high nibble.
inline int64_t int4_nibbles_offset(int64_t group, int64_t c, int64_t count) { return (group * count + c) * (kInt4Group / 2); }

// What every version computes, for a row x (int16), channel c and groups g of weights q (0..15),
// scale d and minimum m:  16 float lanes, lane j of group g holding the exact integer
// x[32g + 2j] q[..] + x[32g + 2j + 1] q[..] (weights in the order of a group's 32 elements), are
// accumulated as lane = fma(lane_g, d_g, lane) over g in order; then lane = fma(m, xs, lane) over
// the 16-group vectors of minimums and of the row's group sums xs (zero-padded); then the lanes are
// added as a tree: i + (i + 8), then + 4, + 2, + 1. Fused multiply-adds round once on every ISA.
//
// x0/x1: int16 rows of K; xs0/xs1: their float group sums, zero-padded to a multiple of 16 groups;
// x1/xs1/out1 null for one row. out[c] = the channel's total, before the row's scale.
// `prefetch`: bytes ahead of the nibble reads to ask for (0: none), as int8_dot.h.
using Int4DotFn = void (*)(const int16_t* x0, const int16_t* x1, const float* xs0, const float* xs1, const uint8_t* block,
                           int64_t K, int64_t count, int64_t prefetch, float* out0, float* out1);

void int4_dot_avx2(const int16_t* x0, const int16_t* x1, const float* xs0, const float* xs1, const uint8_t* block, int64_t K,
                   int64_t count, int64_t prefetch, float* out0, float* out1);
void int4_dot_avx512(const int16_t* x0, const int16_t* x1, const float* xs0, const float* xs1, const uint8_t* block, int64_t K,
                     int64_t count, int64_t prefetch, float* out0, float* out1);

constexpr int64_t kInt4MaxK = 16384;  // bounds a block's float scratch on the stack

}  // namespace minivllm
