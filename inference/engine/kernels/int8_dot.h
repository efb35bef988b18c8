// Integer dot products of int16 activation rows with int8 weight rows, one version per ISA.
//
// The sums are exact integers, so every version returns the same numbers: where a row's
// bits come from never depends on which CPU, which version, or which batch computed it.
#pragma once
#include <cstdint>

namespace minivllm {

constexpr int64_t kDotChannels = 4;  // most weight rows one call reads together

// out0[c] = x0 . w[c], out1[c] = x1 . w[c] for c < count (count <= kDotChannels);
// x1/out1 may be null for one row. w holds `count` rows of K int8 weights; K % 8 == 0.
using Int8DotFn = void (*)(const int16_t* x0, const int16_t* x1, const int8_t* w, int64_t K, int64_t count,
                           int64_t* out0, int64_t* out1);

void int8_dot_avx2(const int16_t* x0, const int16_t* x1, const int8_t* w, int64_t K, int64_t count, int64_t* out0,
                   int64_t* out1);
void int8_dot_avx512_vnni(const int16_t* x0, const int16_t* x1, const int8_t* w, int64_t K, int64_t count,
                          int64_t* out0, int64_t* out1);
bool cpu_has_avx512_vnni();

// int32 lanes stay exact for this many K elements: each lane adds at most two products of
// 32767 * 127 per 16 (AVX2) or 32 (AVX-512) elements, so 2048 elements stay below 2^31 with room.
constexpr int64_t kExactChunk = 2048;

}  // namespace minivllm
