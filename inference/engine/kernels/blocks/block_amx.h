// The block dot products on AMX tiles (block_amx.cpp): the same bits as the vector versions
// (block_dot.h), for steps with enough rows to fill the tiles.
#pragma once
#include <cstdint>

#include "blocks/block_dot.h"

namespace minivllm {

// From this many rows block_linear's "auto" takes the tiles where the CPU has them (a tile's rows
// are 16; below them the rebuilt weights serve too few rows).
constexpr int64_t kBlockAmxMinRows = 16;

// Blocks [block_begin, block_end) of the packed weight (block_pack's layout) for every row:
// out[r * N + 16 * b + c], as the vector versions' dot per block computes it. `prefetch`: as int8_dot.h's.
void block_amx_blocks(BlockType type, const ActivationBlocks& x, int64_t rows, const uint8_t* packed, int64_t block_begin,
                      int64_t block_end, int64_t prefetch, float* out, int64_t N);

}  // namespace minivllm
