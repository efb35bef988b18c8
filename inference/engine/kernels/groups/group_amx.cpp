// AMX version of the grouped dot products (group_dot.h), for steps of many rows: per group of 32,
// two tile multiplies give every row's exact integer sums against 16 channels (the first and the
// second activation level), then the same fused multiply-adds as the vector versions, in the same
// order, so the bits are theirs and a row's result does not depend on which version ran it.
//
// Why: the vector versions make one vpdpbusd per row, step and channel block (8 a group and row);
// a tile multiply (tdpbsud: signed activations x unsigned levels) makes 16 rows x 16 channels x 32
// products at once, leaving the float part (per row and group: two fused multiply-adds) as the
// work. The layouts need no copy: the packed weights' steps are already the B tile's rows (byte
// 4c + j of step s is channel c's weight 4s + j), and a row's q1 and q2 of one group are two
// 32-byte A tile rows, `groups * 64` bytes apart from the next row's.
//
// Everything after the target pragma runs only where cpu_has_amx() (cpu_isa.h) says so; no torch
// header is included (int8_dot_avx512.cpp says why). Each call loads its own palette and releases
// the tiles when done, as int8_amx.cpp does, so oneDNN's AMX kernels and these never see each other's.
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "groups/group_amx.h"
#include "groups/group_dot.h"

#pragma GCC push_options
#pragma GCC target("amx-tile,amx-int8,avx512f,avx512bw,avx512dq,avx512vl,f16c,fma")
#include "common/amx_tiles.h"

namespace minivllm {
namespace {

constexpr int kTileRows = 16;

// Tiles: 0, 1 the sums with q1 and with q2; 2, 3 the rows' q1 and q2 of a group; 4 its levels.
TileConfig group_tiles(int rows) {
  TileConfig config;
  config.shape(0, rows, 64);
  config.shape(1, rows, 64);
  config.shape(2, rows, kGroup);
  config.shape(3, rows, kGroup);
  config.shape(4, kGroupSteps, 64);
  return config;
}

// A group's levels as the B tile: 8 steps of 64 bytes (4-bit: unpacked from the nibbles).
template <int Bits>
const uint8_t* levels_tile(const uint8_t* group, uint8_t* unpacked) {
  if constexpr (Bits == 8) {
    return group;
  } else {
    const __m512i low = _mm512_set1_epi8(15);
    for (int p = 0; p < kGroupSteps / 2; ++p) {
      const __m512i v = _mm512_loadu_si512(group + 64 * p);
      _mm512_store_si512(unpacked + 64 * p, _mm512_and_si512(v, low));
      _mm512_store_si512(unpacked + 64 * (p + 4), _mm512_and_si512(_mm512_srli_epi16(v, 4), low));
    }
    return unpacked;
  }
}

// One tile of 16 rows against one block; the first `count` rows' results go to out[r * out_stride + c].
template <int Bits>
void tile_rows(const ActivationGroups& x, int64_t count, const uint8_t* block, int64_t prefetch, float* out, int64_t out_stride,
               int64_t channels) {
  constexpr int64_t kBytes = group_bytes(Bits), kLevelBytes = group_level_bytes(Bits);
  const int64_t groups = x.groups, row_stride = groups * 2 * kGroup;
  alignas(64) uint8_t unpacked[kGroupSteps * 64];
  alignas(64) int32_t first[kTileRows * 16], second[kTileRows * 16];
  __m512 acc[kTileRows];
  for (int r = 0; r < kTileRows; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* group = block + g * kBytes;
    if (prefetch)
      for (int64_t line = 0; line < kBytes; line += 64) _mm_prefetch(reinterpret_cast<const char*>(group + prefetch + line), _MM_HINT_T0);
    _tile_loadd(4, levels_tile<Bits>(group, unpacked), 64);
    _tile_loadd(2, x.q + g * 2 * kGroup, row_stride);
    _tile_loadd(3, x.q + g * 2 * kGroup + kGroup, row_stride);
    _tile_zero(0);
    _tile_zero(1);
    _tile_dpbsud(0, 2, 4);
    _tile_dpbsud(1, 3, 4);
    _tile_stored(0, first, 64);
    _tile_stored(1, second, 64);
    const __m512 scale = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(group + kLevelBytes)));
    const __m512 minimum = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(group + kLevelBytes + 2 * kGroupChannels)));
    for (int r = 0; r < kTileRows; ++r) {  // group_dot_loop.h's arithmetic, operation for operation
      const int64_t at = r * groups + g;
      const __m512i sums = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(first + 16 * r), 7), _mm512_load_si512(second + 16 * r));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), _mm512_mul_ps(scale, _mm512_set1_ps(x.scale[at])), acc[r]);
      acc[r] = _mm512_fmadd_ps(minimum, _mm512_set1_ps(x.scaled_sum[at]), acc[r]);
    }
  }
  const __mmask16 lanes = channels >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << channels) - 1);
  for (int r = 0; r < count; ++r) _mm512_mask_storeu_ps(out + r * out_stride, lanes, acc[r]);
}

ActivationGroups from_row(const ActivationGroups& x, int64_t r) {
  return ActivationGroups{x.q + r * x.groups * 2 * kGroup, x.scale + r * x.groups, x.scaled_sum + r * x.groups, x.groups};
}

// Every tile of rows against each block in turn, so a block's weights, read from memory by its
// first tile, serve the others from cache. Rows past the last whole tile go in one padded with
// zero rows (their results are not stored), so every tile multiply takes 16 rows under one palette.
template <int Bits>
void blocks(const ActivationGroups& x, int64_t rows, const uint8_t* packed, int64_t block_begin, int64_t block_end, int64_t prefetch,
            float* out, int64_t N) {
  const int64_t block_bytes = x.groups * group_bytes(Bits), whole = rows / kTileRows * kTileRows;
  std::vector<int8_t> q;
  std::vector<float> scale, scaled_sum;
  ActivationGroups last = x;
  if (whole < rows) {
    const ActivationGroups rest = from_row(x, whole);
    const int64_t count = rows - whole, per_row = x.groups * 2 * kGroup;
    q.assign(kTileRows * per_row, 0);
    scale.assign(kTileRows * x.groups, 0.0f);
    scaled_sum.assign(kTileRows * x.groups, 0.0f);
    std::memcpy(q.data(), rest.q, count * per_row);
    std::memcpy(scale.data(), rest.scale, count * x.groups * sizeof(float));
    std::memcpy(scaled_sum.data(), rest.scaled_sum, count * x.groups * sizeof(float));
    last = ActivationGroups{q.data(), scale.data(), scaled_sum.data(), x.groups};
  }
  const TileScope tiles(group_tiles(kTileRows));
  for (int64_t b = block_begin; b < block_end; ++b)
    for (int64_t m0 = 0; m0 < rows; m0 += kTileRows)  // the first tile of rows reads the block from memory, the rest from cache
      tile_rows<Bits>(m0 < whole ? from_row(x, m0) : last, rows - m0 < kTileRows ? rows - m0 : kTileRows, packed + b * block_bytes,
                      m0 ? 0 : prefetch, out + m0 * N + b * kGroupChannels, N, N - b * kGroupChannels);
}

}  // namespace

void group_amx_blocks(const ActivationGroups& x, int64_t rows, const uint8_t* packed, int64_t bits, int64_t block_begin,
                      int64_t block_end, int64_t prefetch, float* out, int64_t N) {
  if (bits == 4) return blocks<4>(x, rows, packed, block_begin, block_end, prefetch, out, N);
  blocks<8>(x, rows, packed, block_begin, block_end, prefetch, out, N);
}

}  // namespace minivllm
#pragma GCC pop_options
