// AMX version of the int8 linear (int8_amx.h): per block of 16 channels and tile of rows, two
// accumulating tile multiplies a step of 64 K, the low bytes (unsigned) and the high bytes (signed)
// of the int16 rows against the int8 weights; then sum = 256 * high + low in int64, exactly the
// vector versions' integer, and the same float conversion and scaling as int8_linear.cpp's emit.
//
// Why AMX: one tile multiply sums up to 16 rows x 16 channels x 64 products, ~16k multiply-adds,
// in the time a vector version takes for a few hundred, so a batch of rows costs little more than
// one row. Every call loads its own palette and releases the tiles when done, so oneDNN's AMX
// kernels (bf16 weights), which load theirs, and this one never see each other's.
//
// Everything after the target pragma runs only where cpu_has_amx() (cpu_isa.h) says so; no torch
// header is included (int8_dot_avx512.cpp says why).
#include <immintrin.h>

#include <cstdint>

#include "int8/int8_amx.h"
#include "int8/int8_dot.h"

#pragma GCC push_options
#pragma GCC target("amx-tile,amx-int8,avx512f,avx512bw,avx512dq,avx512vl")
#include "common/amx_tiles.h"

namespace minivllm {
namespace {

constexpr int kTileBytes = 64;  // one tile row

// Tiles: 0, 1 the low and high sums; 2, 3 a step's low and high activation bytes; 4 its weights.
TileConfig int8_tiles(int64_t tile_rows) {
  TileConfig config;
  for (int tile = 0; tile < 4; ++tile) config.shape(tile, static_cast<int>(tile_rows), kTileBytes);
  config.shape(4, kAmxInt8Step / 4, kTileBytes);
  return config;
}

// One tile of rows against one block: the exact sums, as int32 low and high halves. `prefetch`:
// bytes ahead of the weight reads to ask for (0: none), as int8_dot.h.
void block_sums(const uint8_t* x_low, const int8_t* x_high, int64_t Kp, const int8_t* block, int64_t prefetch, int32_t* low,
                int32_t* high) {
  _tile_zero(0);
  _tile_zero(1);
  for (int64_t k = 0; k < Kp; k += kAmxInt8Step) {
    const int8_t* step = block + k / kAmxInt8Step * kAmxInt8StepBytes;
    if (prefetch)
      for (int64_t line = 0; line < kAmxInt8StepBytes; line += kCacheLine)
        _mm_prefetch(reinterpret_cast<const char*>(step + prefetch + line), _MM_HINT_T0);
    _tile_loadd(4, step, kTileBytes);
    _tile_loadd(2, x_low + k, Kp);
    _tile_loadd(3, x_high + k, Kp);
    _tile_dpbusd(0, 2, 4);  // unsigned low bytes x signed weights
    _tile_dpbssd(1, 3, 4);  // signed high bytes x signed weights
  }
  _tile_stored(0, low, kTileBytes);
  _tile_stored(1, high, kTileBytes);
}

// int8_linear.cpp's emit for 16 channels: float(256 * high + low) * scale * row scale, in that order.
__m512 scaled(const int32_t* low, const int32_t* high, __m512 scales, float row_scale) {
  const __m512i lo = _mm512_loadu_si512(low), hi = _mm512_loadu_si512(high);
  const __m512i sum0 = _mm512_add_epi64(_mm512_slli_epi64(_mm512_cvtepi32_epi64(_mm512_castsi512_si256(hi)), 8),
                                        _mm512_cvtepi32_epi64(_mm512_castsi512_si256(lo)));
  const __m512i sum1 = _mm512_add_epi64(_mm512_slli_epi64(_mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(hi, 1)), 8),
                                        _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(lo, 1)));
  const __m512 sums = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtepi64_ps(sum0)), _mm512_cvtepi64_ps(sum1), 1);
  return _mm512_mul_ps(_mm512_mul_ps(sums, scales), _mm512_set1_ps(row_scale));
}

}  // namespace

void int8_amx_blocks(const uint8_t* x_low, const int8_t* x_high, int64_t M, int64_t tile_rows, int64_t Kp, const int8_t* weight,
                     int64_t block_begin, int64_t block_end, int64_t N, const float* scales, const float* row_scales, bool accumulate,
                     int64_t prefetch, float* out) {
  const TileConfig config = int8_tiles(tile_rows);
  const TileScope tiles(config);
  const int64_t steps = Kp / kAmxInt8Step;
  alignas(64) int32_t low[kAmxInt8MaxRows * kAmxInt8Channels], high[kAmxInt8MaxRows * kAmxInt8Channels];
  for (int64_t b = block_begin; b < block_end; ++b) {
    const int64_t n0 = b * kAmxInt8Channels;
    const int64_t count = N - n0 < kAmxInt8Channels ? N - n0 : kAmxInt8Channels;
    const __mmask16 lanes = static_cast<__mmask16>((1u << count) - 1);
    const __m512 channel_scales = _mm512_maskz_loadu_ps(lanes, scales + n0);
    for (int64_t m0 = 0; m0 < M; m0 += tile_rows) {
      // the first tile of rows reads the block from memory, the others from cache
      block_sums(x_low + m0 * Kp, x_high + m0 * Kp, Kp, weight + b * steps * kAmxInt8StepBytes, m0 ? 0 : prefetch, low, high);
      for (int64_t r = 0; r < tile_rows && m0 + r < M; ++r) {
        float* o = out + (m0 + r) * N + n0;
        __m512 value = scaled(low + r * kAmxInt8Channels, high + r * kAmxInt8Channels, channel_scales, row_scales[m0 + r]);
        if (accumulate) value = _mm512_add_ps(_mm512_maskz_loadu_ps(lanes, o), value);
        _mm512_mask_storeu_ps(o, lanes, value);
      }
    }
  }
}

}  // namespace minivllm
#pragma GCC pop_options
