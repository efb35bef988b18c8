// Weights in GGUF's k-quant and 5-bit block types (block_types.h) times activations quantized per
// block in llama.cpp's scheme for these types (one int8 level per weight, a scale per block of the
// weight type's S weights, and the level sums per sub-block that minimums and offsets need); the
// scale is float32 max |x| / 127 here, so the scheme is llama.cpp's, not its bits. One kernel for every type, unpacking each type's levels its own way; one version
// per ISA, every version giving the same bits.
//
// The packed layout (block_pack): blocks of 16 output channels (the last padded with zero
// channels), each its super-blocks (S weights of K) one after the other, so a block is one
// sequential read. A super-block holds, in order:
//   levels, per 32 weights ("unit"): 4 vectors of 64 bytes, vector p's byte 4c + j holding channel
//     c's weight 4p + j in its low nibble and 16 + 4p + j in its high one (a "step" s is weights
//     4s..4s+3 of every channel); then for Nibble1 64 bytes whose byte 4c + j has weight 4s + j's
//     bit 4 in bit s; for Nibble2 two vectors of 64 bytes, vector h's byte 4c + j holding weight
//     4(4h + t) + j's bits 4-5 in its bits 2t, 2t + 1. NibbleTable nibbles index IQ4's table.
//   sc: int8 [S / sub][16] sub-block scales; mn: int8 [S / sub][16] minimums (minimum types);
//   d: float16 [16]; dmin: float16 [16] (minimum types).
// Bits a weight: Q4_K 4.625, Q5_K 5.625, Q6_K 6.56, IQ4_XS 4.31, Q5_0 5.75 (the file: 4.5, 5.5,
// 6.56, 4.25, 5.5); Q2_K and Q3_K keep their levels in nibbles (5.1 and 4.6 against 2.6 and 3.4).
//
// What every version computes per row and channel, super-block by super-block in order:
//   isum = sum over sub-blocks j of sc[j] * (sum(level * q) - offset * bsum[j])      (exact int32)
//   acc  = fma(float(isum), d * dx, acc)
//   minimum types: msum = sum over j of mn[j] * bsum[j];  acc = fnmadd(float(msum), dmin * dx, acc)
// where q are the row's int8 levels, dx its block scale, bsum[j] the sum of q over sub-block j.
// The integer sums are exact (at most 2^28 in magnitude for any of these types).
#pragma once
#include <cstdint>

#include "blocks/block_types.h"

namespace minivllm {

constexpr int64_t kBlockChannels = 16;

constexpr int64_t unit_bytes(LevelBits levels) {
  return levels == LevelBits::Nibble1 ? 320 : levels == LevelBits::Nibble2 ? 384 : 256;
}

// A super-block's bytes for 16 channels.
inline int64_t superblock_bytes(const BlockTraits& t) {
  const int64_t subs = t.weights / t.sub, minimum = t.offset == 0;
  return t.weights / 32 * unit_bytes(t.levels) + subs * kBlockChannels * (1 + minimum) + 2 * kBlockChannels * (1 + minimum);
}

// A call's activations, row after row: q int8 [rows, K]; scale float [rows, K / S]; bsum int32 [rows, K / sub].
struct ActivationBlocks {
  const int8_t* q;
  const float* scale;
  const int32_t* bsum;
  int64_t K;
};

// One block's `channels` (<= 16) outputs for every row: out[r * out_stride + c].
using BlockDotFn = void (*)(BlockType type, const ActivationBlocks& x, int64_t rows, const uint8_t* block, int64_t prefetch,
                            float* out, int64_t out_stride, int64_t channels);

void block_dot_avx2(BlockType type, const ActivationBlocks& x, int64_t rows, const uint8_t* block, int64_t prefetch, float* out,
                    int64_t out_stride, int64_t channels);
void block_dot_avx512bw(BlockType type, const ActivationBlocks& x, int64_t rows, const uint8_t* block, int64_t prefetch, float* out,
                        int64_t out_stride, int64_t channels);
void block_dot_avx512_vnni(BlockType type, const ActivationBlocks& x, int64_t rows, const uint8_t* block, int64_t prefetch,
                           float* out, int64_t out_stride, int64_t channels);

// Rounds `rows` rows of K floats to int8 per block of S: dx = max |x| / 127, q = round(x / dx)
// (to nearest even), and the sums of q per sub-block of `sub`.
void quantize_blocks_int8(const float* x, int64_t rows, int64_t K, int64_t S, int64_t sub, int8_t* q, float* scale, int32_t* bsum);

}  // namespace minivllm
