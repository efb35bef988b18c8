// The grouped dot products on AMX tiles (group_amx.cpp): the same bits as the vector versions
// (group_dot.h), for steps with enough rows to fill the tiles.
#pragma once
#include <cstdint>

#include "groups/group_dot.h"

namespace minivllm {

// From this many rows group_linear's "auto" takes the tiles where the CPU has them. Measured on a
// Sapphire Rapids Xeon, 2 cores (SmolLM2's and Qwen2.5-1.5B's matrices): 1.2-1.6x the VNNI version
// from 16 rows, level at 8, 2-4x slower at one row (the tile set-up and a whole tile's work for it).
constexpr int64_t kGroupAmxMinRows = 16;

// Blocks [block_begin, block_end) of the packed weight (group_pack_weight's layout) for every row:
// out[r * N + 16 * b + c], as the vector versions' dot per block computes it. `prefetch`: as int8_dot.h's.
void group_amx_blocks(const ActivationGroups& x, int64_t rows, const uint8_t* packed, int64_t bits, int64_t block_begin,
                      int64_t block_end, int64_t prefetch, float* out, int64_t N);

}  // namespace minivllm
