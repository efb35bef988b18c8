// Rotary position embedding applied in place (rotate-half layout), float32.
//
// Why our own: in torch it is nine ops per layer (two chunks, four muls, a sub, an add, a
// cat) and a fresh tensor; here one pass over the Q and K heads, written back where they lie
// in the fused QKV output. Multiply then subtract/add, no FMA (the build passes
// -ffp-contract=off), so every element rounds exactly as the torch expression does.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include "common/kernels.h"

namespace minivllm {

// x: [T, heads, D] with a contiguous last dim (a view into the QKV output is fine);
// cos, sin: [T, D / 2] contiguous.
void rotary_inplace(torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  TORCH_CHECK(x.dim() == 3 && x.scalar_type() == torch::kFloat && x.stride(2) == 1, "x: float32 [T, heads, D], last dim contiguous");
  const int64_t T = x.size(0), heads = x.size(1), D = x.size(2), half = D / 2;
  TORCH_CHECK(D % 2 == 0, "D must be even");
  TORCH_CHECK(cos.scalar_type() == torch::kFloat && cos.is_contiguous() && cos.numel() == T * half, "cos: contiguous float32 [T, D/2]");
  TORCH_CHECK(sin.scalar_type() == torch::kFloat && sin.is_contiguous() && sin.numel() == T * half, "sin: contiguous float32 [T, D/2]");
  float* xp = x.data_ptr<float>();
  const float* cp = cos.data_ptr<float>();
  const float* sp = sin.data_ptr<float>();
  const int64_t token_stride = x.stride(0), head_stride = x.stride(1);
  at::parallel_for(0, T, 64, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* c = cp + t * half;
      const float* s = sp + t * half;
      for (int64_t h = 0; h < heads; ++h) {
        float* x1 = xp + t * token_stride + h * head_stride;
        float* x2 = x1 + half;
        for (int64_t i = 0; i < half; ++i) {
          const float a = x1[i], b = x2[i];
          x1[i] = a * c[i] - b * s[i];
          x2[i] = b * c[i] + a * s[i];
        }
      }
    }
  });
}

}  // namespace minivllm
