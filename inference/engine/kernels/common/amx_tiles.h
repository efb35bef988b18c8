// What the AMX kernels share (int8_amx.cpp, group_amx.cpp, block_amx.cpp): the palette's layout and
// a scope that loads it for this thread's tile instructions and releases the tiles after, so
// oneDNN's AMX kernels, which load their own, and ours never see each other's.
//
// Include it after a target pragma that enables AMX-TILE: internal linkage on purpose, as
// group_dot_loop.h.
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace minivllm {
namespace {

// The 64-byte operand of ldtilecfg (palette 1: eight tiles of up to 16 rows of 64 bytes).
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};

  void shape(int tile, int tile_rows, int row_bytes) {
    rows[tile] = static_cast<uint8_t>(tile_rows);
    bytes_per_row[tile] = static_cast<uint16_t>(row_bytes);
  }
};

// The palette for this thread's tile instructions while in scope; tiles are per thread.
struct TileScope {
  explicit TileScope(const TileConfig& config) {
    // GCC does not see ldtilecfg read its operand and may drop the stores that filled it (llama.cpp's
    // crash on AMX Xeons): the barrier makes them happen first
    asm volatile("" : : "r"(&config) : "memory");
    _tile_loadconfig(&config);
  }
  ~TileScope() { _tile_release(); }
  TileScope(const TileScope&) = delete;
  TileScope& operator=(const TileScope&) = delete;
};

}  // namespace
}  // namespace minivllm
