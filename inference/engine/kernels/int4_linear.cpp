// Weight-only 4-bit linear on CPU, groups of 32 (int4_dot.h): y = x @ W.T for float32 x, where
// W = scale * level + minimum per group.
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
#include "cpu_isa.h"
#include "int4_dot.h"
#include "kernels.h"

namespace minivllm {
namespace {

// A group's 32 int16 in the order int4_dot.h's words read them, and its 4 lane sums.
void permute_group(const int16_t* x, int16_t* to, float* lane_sums) {
  for (int i = 0; i < 8; ++i) {
    to[i] = x[2 * i];
    to[8 + i] = x[16 + 2 * i];
    to[16 + i] = x[2 * i + 1];
    to[24 + i] = x[17 + 2 * i];
  }
  for (int k = 0; k < 4; ++k) {
    int32_t sum = 0;  // 8 values of at most 32767: exact in float32
    for (int i = 0; i < 4; ++i) sum += x[4 * k + i] + x[16 + 4 * k + i];
    lane_sums[k] = static_cast<float>(sum);
  }
}

}  // namespace

torch::Tensor int4_pack_weight(const torch::Tensor& levels, const torch::Tensor& scales, const torch::Tensor& minimums) {
  TORCH_CHECK(levels.dim() == 2 && levels.scalar_type() == torch::kByte, "levels: uint8 [N, K], each 0..15");
  const int64_t N = levels.size(0), K = levels.size(1), G = K / kInt4Group;
  TORCH_CHECK(K > 0 && K % kInt4Group == 0, "K must be a multiple of ", kInt4Group);
  TORCH_CHECK(levels.max().item<uint8_t>() <= 15, "levels must be 0..15");
  for (const auto* t : {&scales, &minimums})
    TORCH_CHECK(t->scalar_type() == torch::kHalf && t->sizes() == torch::IntArrayRef({N, G}), "scales and minimums: float16 [N, K / 32]");
  const auto q = levels.contiguous();
  const auto d = scales.contiguous(), m = minimums.contiguous();
  const uint8_t* from = q.data_ptr<uint8_t>();
  const uint16_t* dp = reinterpret_cast<const uint16_t*>(d.data_ptr<at::Half>());
  const uint16_t* mp = reinterpret_cast<const uint16_t*>(m.data_ptr<at::Half>());
  const int64_t blocks = (N + kInt4Channels - 1) / kInt4Channels;
  auto packed = torch::zeros({blocks, G * kInt4GroupBytes}, levels.options());  // padding channels: all zero
  uint8_t* to = packed.data_ptr<uint8_t>();
  for (int64_t n = 0; n < N; ++n) {
    const int64_t c = n % kInt4Channels;
    uint8_t* block = to + (n / kInt4Channels) * G * kInt4GroupBytes;
    for (int64_t g = 0; g < G; ++g) {
      uint8_t* group = block + g * kInt4GroupBytes;
      const uint8_t* weights = from + n * K + g * kInt4Group;
      for (int64_t i = 0; i < kInt4Group / 2; ++i) group[c * 16 + i] = weights[i] | (weights[16 + i] << 4);
      std::memcpy(group + 64 + 2 * c, dp + n * G + g, 2);
      std::memcpy(group + 72 + 2 * c, mp + n * G + g, 2);
    }
  }
  return packed;
}

torch::Tensor int4_linear(const torch::Tensor& x, const torch::Tensor& packed, int64_t out_features, const std::string& isa) {
  TORCH_CHECK(x.device().is_cpu() && packed.device().is_cpu(), "int4_linear runs on CPU tensors");
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat && x.is_contiguous(), "x: contiguous float32 [M, K]");
  TORCH_CHECK(packed.dim() == 2 && packed.scalar_type() == torch::kByte && packed.is_contiguous(), "packed: int4_pack_weight's uint8 blocks");
  const int64_t M = x.size(0), K = x.size(1), N = out_features, G = K / kInt4Group;
  TORCH_CHECK(K % kInt4Group == 0 && packed.size(1) == G * kInt4GroupBytes, "x and the packed weight disagree on K");
  TORCH_CHECK(packed.size(0) == (N + kInt4Channels - 1) / kInt4Channels, "out_features and the packed weight disagree");
  const Int4DotFn dot = by_isa<Int4DotFn>(isa, int4_dot_avx2, int4_dot_avx512bw, int4_dot_avx512_vnni);
  const int64_t prefetch = int8_prefetch_bytes();

  std::vector<int16_t> rounded(M * K), permuted(M * K);
  std::vector<float> row_scales(M), lane_sums(M * G * 4);
  const float* xp = x.data_ptr<float>();
  at::parallel_for(0, M, 16, [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m) {
      row_scales[m] = quantize_row_int16(xp + m * K, K, rounded.data() + m * K);
      for (int64_t g = 0; g < G; ++g)
        permute_group(rounded.data() + m * K + g * kInt4Group, permuted.data() + m * K + g * kInt4Group, lane_sums.data() + (m * G + g) * 4);
    }
  });

  auto out = torch::empty({M, N}, x.options());
  float* op = out.data_ptr<float>();
  const uint8_t* wp = packed.data_ptr<uint8_t>();
  at::parallel_for(0, packed.size(0), 1, [&](int64_t begin, int64_t end) {
    std::vector<float> totals(M * kInt4Channels);
    for (int64_t b = begin; b < end; ++b) {
      const int64_t n0 = b * kInt4Channels, count = std::min(kInt4Channels, N - n0);
      dot(permuted.data(), lane_sums.data(), M, wp + b * G * kInt4GroupBytes, G, prefetch, totals.data());
      for (int64_t m = 0; m < M; ++m)
        for (int64_t c = 0; c < count; ++c) op[m * N + n0 + c] = totals[m * kInt4Channels + c] * row_scales[m];
    }
  });
  return out;
}

}  // namespace minivllm
