// RMSNorm over float32 rows, one pass each.
//
// Why our own: on this torch's CPU build F.rms_norm runs as six separate ops (pow, mean, add,
// rsqrt, mul, mul), ~60 us per call at one row, and a decode step makes two calls per layer.
// Same maths and order as HF's LlamaRMSNorm: (x * rsqrt(mean(x^2) + eps)) * weight.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <cmath>

#include "common/simd.h"
#include "common/kernels.h"

namespace minivllm {

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  TORCH_CHECK(x.scalar_type() == torch::kFloat && x.is_contiguous(), "x: contiguous float32 [..., D]");
  const int64_t D = x.size(-1), rows = x.numel() / D;
  TORCH_CHECK(weight.scalar_type() == torch::kFloat && weight.numel() == D && weight.is_contiguous(), "weight: float32 [D]");
  TORCH_CHECK(D % 8 == 0, "D must be a multiple of 8");
  auto out = torch::empty_like(x);
  const float* xp = x.data_ptr<float>();
  const float* wp = weight.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = xp + r * D;
      const float inv = 1.0f / std::sqrt(dot(row, row, D) / static_cast<float>(D) + static_cast<float>(eps));
      const __m256 iv = _mm256_set1_ps(inv);
      for (int64_t i = 0; i < D; i += 8)
        _mm256_storeu_ps(op + r * D + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(row + i), iv), _mm256_loadu_ps(wp + i)));
    }
  });
  return out;
}

}  // namespace minivllm
