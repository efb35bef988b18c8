// Weights in groups of 32 along K (4-bit or 8-bit levels, a float16 scale and minimum each)
// times activations in groups of 32 held as two int8 levels (a float scale each): llama.cpp's
// Q4_1 and Q8_0 weights. One version per ISA, every version giving the same bits.
//
// Why bytes: with int16 activations and 4-channel blocks (the 4-bit kernel before this one) a
// batched step was bound by the vector ports, 7 operations a row per 128 weights. Bytes against
// bytes, VNNI's vpdpbusd does 64 multiply-adds an instruction, and one unpacked weight register
// serves every row of the pass; one row stays bound by reading the weights.
// Why two levels: one int8 level per group (llama.cpp's Q8_1) kept SmolLM2's greedy token on
// 96.5% of teacher-forced positions against float32; the second level, the first one's rounding
// error in steps of 1/128, makes the activations 15-bit (docs/performance-log.md, section 37).
//
// The packed layout (group_pack_weight): blocks of kGroupChannels = 16 output channels (the last
// one padded with zero channels), each its groups one after the other, so a block is one
// sequential read. A group holds the levels, then the 16 channels' float16 scales, then their
// 16 float16 minimums. The levels are "steps" of 4 consecutive weights per channel, 64 bytes a
// step: byte 4c + j of step s is channel c's weight 4s + j of the group.
//   8-bit: the 8 steps one after another (512 bytes).
//   4-bit: 4 vectors of 64 bytes (256 bytes): vector p holds step p in its low nibbles and step
//          p + 4 in its high nibbles, which is Q4_1's own order (weight i low, weight 16 + i high).
// W = scale * level + minimum; for Q8_0's signed q the level is q + 128 and the minimum -128 * scale.
//
// Activations (quantize_groups_int8): per row and group, t = x * (127 / max |x|), q1 = round(t),
// q2 = round(128 * (t - q1)) (ties to even), so x ~ e * (128 * q1 + q2) with e = max |x| / 127 / 128;
// and the float e * sum(128 * q1 + q2). What every version computes per row and channel:
//   for each group in order:  acc = fma(float(128 * sum(level * q1) + sum(level * q2)), scale * e, acc)
//                             acc = fma(minimum, e * sum(128 * q1 + q2), acc)
// with one float lane per channel and fused multiply-adds, so every ISA rounds alike. The
// integer sums are exact: at most 32 * 255 * (128 * 127 + 64) < 2^31.
#pragma once
#include <cstdint>

namespace minivllm {

constexpr int64_t kGroup = 32;
constexpr int64_t kGroupChannels = 16;
constexpr int64_t kGroupSteps = kGroup / 4;
constexpr int64_t group_level_bytes(int64_t bits) { return kGroupChannels * kGroup * bits / 8; }
constexpr int64_t group_bytes(int64_t bits) { return group_level_bytes(bits) + kGroupChannels * 4; }

// A call's activations, row after row: q int8 [rows, K / 32, 2, 32] (each group's q1, then its q2);
// e and e * sum(128 * q1 + q2), float [rows, K / 32].
struct ActivationGroups {
  const int8_t* q;
  const float* scale;
  const float* scaled_sum;
  int64_t groups;
};

// One block's `channels` (<= 16) outputs for every row: out[r * out_stride + c]. `prefetch`:
// bytes ahead of the reads to ask for (0: none), as int8_dot.h.
using GroupDotFn = void (*)(const ActivationGroups& x, int64_t rows, const uint8_t* block, int64_t bits, int64_t prefetch,
                            float* out, int64_t out_stride, int64_t channels);

void group_dot_avx2(const ActivationGroups& x, int64_t rows, const uint8_t* block, int64_t bits, int64_t prefetch, float* out,
                    int64_t out_stride, int64_t channels);
void group_dot_avx512bw(const ActivationGroups& x, int64_t rows, const uint8_t* block, int64_t bits, int64_t prefetch, float* out,
                        int64_t out_stride, int64_t channels);
void group_dot_avx512_vnni(const ActivationGroups& x, int64_t rows, const uint8_t* block, int64_t bits, int64_t prefetch,
                           float* out, int64_t out_stride, int64_t channels);

// Rounds `rows` rows of K floats (K % 32 == 0) to two int8 levels per group, as above: 2 * K bytes a row.
void quantize_groups_int8(const float* x, int64_t rows, int64_t K, int8_t* q, float* scale, float* scaled_sum);

}  // namespace minivllm
