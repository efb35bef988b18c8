// Small helpers the grouped, block and float dot products share. Internal linkage on purpose, as
// the loops that use them: each file compiles its own copy under its own target pragma, so no
// AVX-512 copy can stand in for an AVX2 one at link time.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace minivllm {
namespace {

// Four int8 activations as one 32-bit lane, to broadcast.
inline int32_t four_bytes(const int8_t* x) {
  int32_t v;
  std::memcpy(&v, x, 4);
  return v;
}

// The first `n` lanes of v stored at out (all 8 where n >= 8): a block's last channels, where fewer remain.
inline void store_lanes(__m256 v, float* out, int64_t n) {
  if (n >= 8) return _mm256_storeu_ps(out, v);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, v);
  for (int64_t c = 0; c < n; ++c) out[c] = lanes[c];
}

}  // namespace
}  // namespace minivllm
