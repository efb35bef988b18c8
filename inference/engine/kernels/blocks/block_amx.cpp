// AMX version of the block dot products (block_dot.h), for steps of many rows. A super-block's
// weights are rebuilt once, in L1, as the B tiles of w = sc[j] * (level - offset) (int16, split
// into an unsigned low byte and a signed high byte) and, for minimum types, of mn[j]; then every
// tile of 16 rows takes per 64 weights one A tile of its int8 levels and two or three tile
// multiplies, which give exactly the vector versions' integers:
//   isum = 256 * sum(high * q) + sum(low * q) = sum over sub-blocks of sc[j] * (sum(level * q) - offset * bsum[j])
//   msum = sum(mn * q) = sum over sub-blocks of mn[j] * bsum[j]
// and the float part is theirs, operation for operation, so the bits are theirs.
//
// Why: the vector versions spend a row's work on one vpdpbusd per 4 weights and 16 channels plus
// a multiply by each sub-block's scale; here a tile multiply covers 16 rows x 16 channels x 64
// weights, and the rebuilt tiles serve every tile of rows. Below 16 rows the vector version stays.
//
// Everything after the target pragma runs only where cpu_has_amx() (cpu_isa.h) says so; no torch
// header is included (int8_dot_avx512.cpp says why). Each call loads its own palette and releases
// the tiles when done, as int8_amx.cpp does.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "blocks/block_amx.h"
#include "blocks/block_dot.h"

#pragma GCC push_options
#pragma GCC target("amx-tile,amx-int8,avx512f,avx512bw,avx512dq,avx512vl,avx512vbmi,f16c,fma")
#include "blocks/block_dot_avx512_lanes.h"
#include "common/amx_tiles.h"

namespace minivllm {
namespace {

constexpr int kTileRows = 16;

struct NoSums {};  // the lanes' level unpacking is all this file takes from them
using Lanes = Avx512Block<NoSums>;

// Tiles: 0, 1, 2 the sums with the low bytes, the high bytes and the minimums; 3 the rows' levels
// for `step` weights; 4, 5, 6 the weights' low bytes, high bytes and minimums for them.
TileConfig block_tiles(int step) {
  TileConfig config;
  for (int tile = 0; tile < 3; ++tile) config.shape(tile, kTileRows, 64);
  config.shape(3, kTileRows, step);
  for (int tile = 4; tile < 7; ++tile) config.shape(tile, step / 4, 64);
  return config;
}

// 16 bytes, one a channel, as 64: each channel's byte 4 times (a step's layout).
__m512i per_step(const int8_t* sixteen) {
  const __m512i index = _mm512_set_epi32(0x0F0F0F0F, 0x0E0E0E0E, 0x0D0D0D0D, 0x0C0C0C0C, 0x0B0B0B0B, 0x0A0A0A0A, 0x09090909,
                                         0x08080808, 0x07070707, 0x06060606, 0x05050505, 0x04040404, 0x03030303, 0x02020202,
                                         0x01010101, 0x00000000);
  return _mm512_permutexvar_epi8(index, _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sixteen))));
}

template <LevelBits L, int S, int Sub, bool Minimum>
struct AmxShape {
  static constexpr int kStep = S >= 64 ? 64 : 32;  // weights (A tile bytes) a tile multiply takes
  static constexpr int kSteps = S / 4;              // B tile rows a super-block holds
  static constexpr int kUnits = S / 32, kSubs = S / Sub, kStepsPerSub = Sub / 4;
  static constexpr int64_t kUnitBytes = unit_bytes(L);
  static constexpr int64_t kScales = kUnits * kUnitBytes, kMins = kScales + kSubs * kBlockChannels;
  static constexpr int64_t kD = kMins + (Minimum ? kSubs * kBlockChannels : 0), kDmin = kD + 2 * kBlockChannels;
  static constexpr int64_t kBytes = kD + 2 * kBlockChannels * (Minimum ? 2 : 1);
};

// A super-block's B tiles: low[s], high[s] (and minimum[s]): 64 bytes each for step s.
template <LevelBits L, int S, int Sub, bool Minimum>
void rebuild(const uint8_t* p, int offset, uint8_t* low, int8_t* high, int8_t* minimum) {
  using Sh = AmxShape<L, S, Sub, Minimum>;
  const __m512i even = _mm512_set_epi64(0x7E7C7A7876747270, 0x6E6C6A6866646260, 0x5E5C5A5856545250, 0x4E4C4A4846444240,
                                        0x3E3C3A3836343230, 0x2E2C2A2826242220, 0x1E1C1A1816141210, 0x0E0C0A0806040200);
  const __m512i odd = _mm512_add_epi8(even, _mm512_set1_epi8(1));
  const __m512i zero = _mm512_set1_epi16(static_cast<int16_t>(offset));
  const int8_t* sc = reinterpret_cast<const int8_t*>(p + Sh::kScales);
  for (int u = 0; u < Sh::kUnits; ++u) {
    const Avx512Steps steps = Lanes::levels<L>(p + u * Sh::kUnitBytes, 0);
    for (int t = 0; t < 8; ++t) {
      const int s = 8 * u + t, j = s / Sh::kStepsPerSub;
      const __m512i scale = per_step(sc + j * kBlockChannels);
      const __m512i w0 = _mm512_mullo_epi16(_mm512_sub_epi16(_mm512_cvtepu8_epi16(_mm512_castsi512_si256(steps.step[t])), zero),
                                            _mm512_cvtepi8_epi16(_mm512_castsi512_si256(scale)));
      const __m512i w1 = _mm512_mullo_epi16(_mm512_sub_epi16(_mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(steps.step[t], 1)), zero),
                                            _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(scale, 1)));
      _mm512_store_si512(low + 64 * s, _mm512_permutex2var_epi8(w0, even, w1));
      _mm512_store_si512(high + 64 * s, _mm512_permutex2var_epi8(w0, odd, w1));
      if constexpr (Minimum) _mm512_store_si512(minimum + 64 * s, per_step(reinterpret_cast<const int8_t*>(p + Sh::kMins) + j * kBlockChannels));
    }
  }
}

template <LevelBits L, int S, int Sub, bool Minimum>
void blocks(const ActivationBlocks& x, int offset, int64_t rows, const uint8_t* packed, int64_t block_begin, int64_t block_end,
            int64_t prefetch, float* out, int64_t N) {
  using Sh = AmxShape<L, S, Sub, Minimum>;
  const int64_t K = x.K, superblocks = K / S, tiles = (rows + kTileRows - 1) / kTileRows;
  // the last tile's rows padded with zero rows, so every tile multiply takes 16
  std::vector<int8_t> padded;
  const int64_t whole = rows / kTileRows * kTileRows;
  if (whole < rows) {
    padded.assign(kTileRows * K, 0);
    std::memcpy(padded.data(), x.q + whole * K, (rows - whole) * K);
  }
  auto levels_of = [&](int64_t tile) { return tile * kTileRows < whole ? x.q + tile * kTileRows * K : padded.data(); };
  alignas(64) uint8_t low[Sh::kSteps * 64];
  alignas(64) int8_t high[Sh::kSteps * 64], minimum[Minimum ? Sh::kSteps * 64 : 64];
  alignas(64) int32_t low_sums[kTileRows * 16], high_sums[kTileRows * 16], min_sums[kTileRows * 16];
  std::vector<float> acc(rows * 16);  // each row's 16 sums so far (a vector of __m512 may be allocated unaligned)
  const TileScope tile_scope(block_tiles(Sh::kStep));
  for (int64_t b = block_begin; b < block_end; ++b) {
    const uint8_t* block = packed + b * superblocks * Sh::kBytes;
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t sb = 0; sb < superblocks; ++sb) {
      const uint8_t* p = block + sb * Sh::kBytes;
      if (prefetch)
        for (int64_t line = 0; line < Sh::kBytes; line += 64) _mm_prefetch(reinterpret_cast<const char*>(p + prefetch + line), _MM_HINT_T0);
      rebuild<L, S, Sub, Minimum>(p, offset, low, high, minimum);
      const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + Sh::kD)));
      for (int64_t tile = 0; tile < tiles; ++tile) {
        const int8_t* q = levels_of(tile) + sb * S;
        _tile_zero(0);
        _tile_zero(1);
        if constexpr (Minimum) _tile_zero(2);
        for (int k = 0; k < S; k += Sh::kStep) {
          _tile_loadd(3, q + k, K);
          _tile_loadd(4, low + 16 * k, 64);  // step k / 4, 64 bytes a step
          _tile_loadd(5, high + 16 * k, 64);
          _tile_dpbsud(0, 3, 4);
          _tile_dpbssd(1, 3, 5);
          if constexpr (Minimum) {
            _tile_loadd(6, minimum + 16 * k, 64);
            _tile_dpbssd(2, 3, 6);
          }
        }
        _tile_stored(0, low_sums, 64);
        _tile_stored(1, high_sums, 64);
        if constexpr (Minimum) _tile_stored(2, min_sums, 64);
        const int64_t first = tile * kTileRows, count = rows - first < kTileRows ? rows - first : kTileRows;
        for (int64_t i = 0; i < count; ++i) {  // block_dot_loop.h's float part, operation for operation
          const int64_t r = first + i;
          const __m512i isum = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(high_sums + 16 * i), 8), _mm512_load_si512(low_sums + 16 * i));
          const __m512 dx = _mm512_set1_ps(x.scale[r * superblocks + sb]);
          __m512 sums = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(d, dx), _mm512_loadu_ps(&acc[16 * r]));
          if constexpr (Minimum) {
            const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + Sh::kDmin)));
            sums = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(min_sums + 16 * i)), _mm512_mul_ps(dmin, dx), sums);
          }
          _mm512_storeu_ps(&acc[16 * r], sums);
        }
      }
    }
    const int64_t channels = N - b * kBlockChannels;
    const __mmask16 lanes = channels >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << channels) - 1);
    for (int64_t r = 0; r < rows; ++r) _mm512_mask_storeu_ps(out + r * N + b * kBlockChannels, lanes, _mm512_loadu_ps(&acc[16 * r]));
  }
}

}  // namespace

void block_amx_blocks(BlockType type, const ActivationBlocks& x, int64_t rows, const uint8_t* packed, int64_t block_begin,
                      int64_t block_end, int64_t prefetch, float* out, int64_t N) {
  const int offset = traits(type).offset;
  switch (type) {
    case BlockType::Q5_0: return blocks<LevelBits::Nibble1, 32, 32, false>(x, offset, rows, packed, block_begin, block_end, prefetch, out, N);
    case BlockType::Q5_1: return blocks<LevelBits::Nibble1, 32, 32, true>(x, offset, rows, packed, block_begin, block_end, prefetch, out, N);
    case BlockType::IQ4_NL: return blocks<LevelBits::NibbleTable, 32, 32, false>(x, offset, rows, packed, block_begin, block_end, prefetch, out, N);
    case BlockType::Q2_K: return blocks<LevelBits::Nibble, 256, 16, true>(x, offset, rows, packed, block_begin, block_end, prefetch, out, N);
    case BlockType::Q3_K: return blocks<LevelBits::Nibble, 256, 16, false>(x, offset, rows, packed, block_begin, block_end, prefetch, out, N);
    case BlockType::Q4_K: return blocks<LevelBits::Nibble, 256, 32, true>(x, offset, rows, packed, block_begin, block_end, prefetch, out, N);
    case BlockType::Q5_K: return blocks<LevelBits::Nibble1, 256, 32, true>(x, offset, rows, packed, block_begin, block_end, prefetch, out, N);
    case BlockType::Q6_K: return blocks<LevelBits::Nibble2, 256, 16, false>(x, offset, rows, packed, block_begin, block_end, prefetch, out, N);
    case BlockType::IQ4_XS: return blocks<LevelBits::NibbleTable, 256, 32, false>(x, offset, rows, packed, block_begin, block_end, prefetch, out, N);
    default: return;  // Q4_0, Q4_1, Q8_0: the group kernel's (groups/); block_linear refuses them
  }
}

}  // namespace minivllm
#pragma GCC pop_options
