// Integer dot products of int16 activation rows with int8 weight rows, one version per ISA.
//
// The sums are exact integers, so every version returns the same numbers: where a row's
// bits come from never depends on which CPU, which version, or which batch computed it.
#pragma once
#include <cstdint>

namespace minivllm {

constexpr int64_t kDotChannels = 4;  // most weight rows one call reads together
constexpr int64_t kGroup = 32;       // K elements of one channel stored together (packed layout)

// The packed layout (int8_pack_weight): channels in blocks of kDotChannels (the last block may
// hold fewer, `count`); within a block, for each group of kGroup K elements, the group of
// channel 0, then of channel 1, ...; the K % kGroup elements left over follow the block's
// groups, channel by channel. A block is then one sequential stream: interleaved rows were
// four short streams that the hardware prefetcher never caught (13-17 GB/s here against
// ~30 GB/s read sequentially, docs/performance-log.md section 25).
constexpr int64_t kCacheLine = 64;

inline int64_t packed_group_offset(int64_t k, int64_t c, int64_t count) { return k * count + c * kGroup; }
inline int64_t packed_tail_offset(int64_t K, int64_t k, int64_t c, int64_t count) {
  const int64_t grouped = K - K % kGroup;
  return grouped * count + c * (K - grouped) + (k - grouped);
}

// out0[c] = x0 . w[c], out1[c] = x1 . w[c] for c < count (count <= kDotChannels);
// x1/out1 may be null for one row. w is one packed block of `count` channels; K % 8 == 0.
// `prefetch`: bytes ahead of its reads to ask for weight lines, 0 for none. A thread's blocks lie
// end to end, so this runs on into the next block (a prefetch past the weight's end is harmless).
using Int8DotFn = void (*)(const int16_t* x0, const int16_t* x1, const int8_t* w, int64_t K, int64_t count,
                           int64_t prefetch, int64_t* out0, int64_t* out1);

void int8_dot_avx2(const int16_t* x0, const int16_t* x1, const int8_t* w, int64_t K, int64_t count, int64_t prefetch, int64_t* out0,
                   int64_t* out1);
void int8_dot_avx512_vnni(const int16_t* x0, const int16_t* x1, const int8_t* w, int64_t K, int64_t count, int64_t prefetch,
                          int64_t* out0, int64_t* out1);
void int8_dot_avx512bw(const int16_t* x0, const int16_t* x1, const int8_t* w, int64_t K, int64_t count, int64_t prefetch, int64_t* out0,
                       int64_t* out1);

// int32 lanes stay exact for this many K elements: each lane adds at most two products of
// 32767 * 127 per 16 (AVX2) or 32 (AVX-512) elements, so 2048 elements stay below 2^31 with room.
// A multiple of kGroup.
constexpr int64_t kExactChunk = 2048;

}  // namespace minivllm
