// Weight-only 4-bit linear on CPU, groups of 32 (int4_dot.h): y = x @ W.T for float32 x, where
// W = scale * q + minimum per group.
//
// Rows are rounded to int16 as for int8 (activation_rows.h); each group's products are exact
// integers, and int4_dot.h fixes the order of every float operation after them. So a row's
// result never depends on the batch around it, and every ISA's version gives the same bits.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <cstring>
#include <string>
#include <vector>

#include "activation_rows.h"
#include "int4_dot.h"
#include "kernels.h"

namespace minivllm {
namespace {

Int4DotFn choose_int4_dot(const std::string& requested) {
  const std::string isa = requested == "auto" ? int4_linear_isa() : requested;
  if (isa == "avx2") return int4_dot_avx2;
  TORCH_CHECK(isa == "avx512", "isa must be auto, avx2 or avx512");
  TORCH_CHECK(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"), "this CPU has no AVX-512BW");
  return int4_dot_avx512;
}

}  // namespace

std::string int4_linear_isa() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") ? "avx512" : "avx2";
}

torch::Tensor int4_pack_weight(const torch::Tensor& levels, const torch::Tensor& scales, const torch::Tensor& minimums) {
  TORCH_CHECK(levels.dim() == 2 && levels.scalar_type() == torch::kByte, "levels: uint8 [N, K], each 0..15");
  const int64_t N = levels.size(0), K = levels.size(1), G = K / kInt4Group;
  TORCH_CHECK(K % kInt4Group == 0 && K <= kInt4MaxK, "K must be a multiple of ", kInt4Group, " and at most ", kInt4MaxK);
  TORCH_CHECK(levels.max().item<uint8_t>() <= 15, "levels must be 0..15");
  for (const auto* t : {&scales, &minimums})
    TORCH_CHECK(t->scalar_type() == torch::kHalf && t->sizes() == torch::IntArrayRef({N, G}), "scales and minimums: float16 [N, K / 32]");
  const auto q = levels.contiguous();
  const auto d = scales.contiguous(), m = minimums.contiguous();
  auto packed = torch::empty({N, int4_channel_bytes(K)}, levels.options());
  const uint8_t* from = q.data_ptr<uint8_t>();
  const uint16_t* dp = reinterpret_cast<const uint16_t*>(d.data_ptr<at::Half>());
  const uint16_t* mp = reinterpret_cast<const uint16_t*>(m.data_ptr<at::Half>());
  uint8_t* to = packed.data_ptr<uint8_t>();
  for (int64_t n0 = 0; n0 < N; n0 += kInt4Channels) {
    const int64_t count = std::min(kInt4Channels, N - n0);
    uint8_t* block = to + n0 * int4_channel_bytes(K);
    uint16_t* halves = reinterpret_cast<uint16_t*>(block + count * K / 2);
    for (int64_t c = 0; c < count; ++c) {
      const uint8_t* row = from + (n0 + c) * K;
      for (int64_t g = 0; g < G; ++g) {
        uint8_t* bytes = block + int4_nibbles_offset(g, c, count);
        for (int64_t i = 0; i < kInt4Group / 2; ++i) bytes[i] = row[g * kInt4Group + i] | (row[g * kInt4Group + 16 + i] << 4);
      }
      std::memcpy(halves + 2 * c * G, dp + (n0 + c) * G, G * sizeof(uint16_t));
      std::memcpy(halves + 2 * c * G + G, mp + (n0 + c) * G, G * sizeof(uint16_t));
    }
  }
  return packed;
}

torch::Tensor int4_linear(const torch::Tensor& x, const torch::Tensor& packed, const std::string& isa) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat && x.is_contiguous(), "x: contiguous float32 [M, K]");
  TORCH_CHECK(packed.dim() == 2 && packed.scalar_type() == torch::kByte && packed.is_contiguous(), "packed: int4_pack_weight's uint8 [N, 5K/8]");
  const int64_t M = x.size(0), K = x.size(1), N = packed.size(0);
  TORCH_CHECK(K % kInt4Group == 0 && K <= kInt4MaxK && packed.size(1) == int4_channel_bytes(K), "x and the packed weight disagree on K");
  const Int4DotFn dot = choose_int4_dot(isa);
  const int64_t prefetch = int8_prefetch_bytes();
  const int64_t G = K / kInt4Group, padded = int4_padded_groups(K);

  std::vector<int16_t> xq(M * K);
  std::vector<float> row_scales(M), group_sums(M * padded, 0.0f);
  const float* xp = x.data_ptr<float>();
  at::parallel_for(0, M, 16, [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m) {
      const int16_t* row = xq.data() + m * K;
      row_scales[m] = quantize_row_int16(xp + m * K, K, xq.data() + m * K);
      for (int64_t g = 0; g < G; ++g) {
        int32_t sum = 0;  // at most 32 * 32767: exact in int32 and in float32
        for (int64_t i = 0; i < kInt4Group; ++i) sum += row[g * kInt4Group + i];
        group_sums[m * padded + g] = static_cast<float>(sum);
      }
    }
  });

  auto out = torch::empty({M, N}, x.options());
  float* op = out.data_ptr<float>();
  const uint8_t* wp = packed.data_ptr<uint8_t>();
  const int64_t blocks = (N + kInt4Channels - 1) / kInt4Channels;
  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    float t0[kInt4Channels], t1[kInt4Channels];
    for (int64_t b = begin; b < end; ++b) {
      const int64_t n0 = b * kInt4Channels;
      const int64_t count = std::min(kInt4Channels, N - n0);
      const uint8_t* block = wp + n0 * int4_channel_bytes(K);
      for (int64_t m = 0; m < M; m += 2) {  // two rows share each nibble unpack
        const bool two = m + 1 < M;
        dot(xq.data() + m * K, two ? xq.data() + (m + 1) * K : nullptr, group_sums.data() + m * padded,
            two ? group_sums.data() + (m + 1) * padded : nullptr, block, K, count, prefetch, t0, t1);
        for (int64_t c = 0; c < count; ++c) op[m * N + n0 + c] = t0[c] * row_scales[m];
        if (two)
          for (int64_t c = 0; c < count; ++c) op[(m + 1) * N + n0 + c] = t1[c] * row_scales[m + 1];
      }
    }
  });
  return out;
}

}  // namespace minivllm
