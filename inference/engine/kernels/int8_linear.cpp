// Weight-only int8 linear for float32 activations on AVX2: y = x @ (w * scales[:, None]).T
//
// Why our own: aten's _weight_int8pack_mm wants bf16 activations on AVX2 (float32 ones are
// ~6x slower), and its bf16 rounding costs accuracy; it also streams weights well below this
// CPU's memory bandwidth at one row. Here each output is one float32 dot product of an int8
// weight row, converted exactly to float32, with a float32 activation row, summed in a fixed
// order and then scaled. A row's result therefore never depends on how many rows are in the
// batch or which path (one row, or two rows sharing each weight load) computed it: batching
// cannot change a request's tokens.
#include <immintrin.h>
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include "simd.h"

namespace minivllm {
namespace {

constexpr int64_t kChannels = 4;  // output channels whose weight rows are read together

// One x row against `Count` weight rows (a compile-time count keeps the accumulators in registers).
template <int64_t Count>
inline void dot_one_row(const float* x, const int8_t* w, int64_t K, float* out) {
  __m256 acc[Count];
  for (int64_t c = 0; c < Count; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; k += 8) {
    const __m256 xv = _mm256_loadu_ps(x + k);
    for (int64_t c = 0; c < Count; ++c) acc[c] = _mm256_fmadd_ps(xv, load_int8x8(w + c * K + k), acc[c]);
  }
  for (int64_t c = 0; c < Count; ++c) out[c] = horizontal_sum(acc[c]);
}

inline void dot_one_row(const float* x, const int8_t* w, int64_t K, int64_t count, float* out) {
  switch (count) {
    case 4: return dot_one_row<4>(x, w, K, out);
    case 3: return dot_one_row<3>(x, w, K, out);
    case 2: return dot_one_row<2>(x, w, K, out);
    default: return dot_one_row<1>(x, w, K, out);
  }
}

// Two x rows against kChannels weight rows: each weight load feeds two FMAs. Every
// accumulator sees exactly the additions dot_one_row would give it.
inline void dot_two_rows(const float* x0, const float* x1, const int8_t* w, int64_t K, float* out0, float* out1) {
  __m256 a0[kChannels], a1[kChannels];
  for (int64_t c = 0; c < kChannels; ++c) a0[c] = a1[c] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; k += 8) {
    const __m256 xv0 = _mm256_loadu_ps(x0 + k);
    const __m256 xv1 = _mm256_loadu_ps(x1 + k);
    for (int64_t c = 0; c < kChannels; ++c) {
      const __m256 wv = load_int8x8(w + c * K + k);
      a0[c] = _mm256_fmadd_ps(xv0, wv, a0[c]);
      a1[c] = _mm256_fmadd_ps(xv1, wv, a1[c]);
    }
  }
  for (int64_t c = 0; c < kChannels; ++c) {
    out0[c] = horizontal_sum(a0[c]);
    out1[c] = horizontal_sum(a1[c]);
  }
}

}  // namespace

torch::Tensor int8_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& scales) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat && x.is_contiguous(), "x: contiguous float32 [M, K]");
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == torch::kChar && weight.is_contiguous(), "weight: contiguous int8 [N, K]");
  TORCH_CHECK(scales.scalar_type() == torch::kFloat && scales.numel() == weight.size(0), "scales: float32 [N]");
  const int64_t M = x.size(0), K = x.size(1), N = weight.size(0);
  TORCH_CHECK(weight.size(1) == K, "x and weight disagree on K");
  TORCH_CHECK(K % 8 == 0, "K must be a multiple of 8");
  auto out = torch::empty({M, N}, x.options());
  const float* xp = x.data_ptr<float>();
  const int8_t* wp = weight.data_ptr<int8_t>();
  const float* sp = scales.contiguous().data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t blocks = (N + kChannels - 1) / kChannels;
  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    float r0[kChannels], r1[kChannels];
    for (int64_t b = begin; b < end; ++b) {
      const int64_t n0 = b * kChannels;
      const int64_t count = std::min(kChannels, N - n0);
      const int8_t* w = wp + n0 * K;
      int64_t m = 0;
      if (count == kChannels) {
        for (; m + 1 < M; m += 2) {
          dot_two_rows(xp + m * K, xp + (m + 1) * K, w, K, r0, r1);
          for (int64_t c = 0; c < kChannels; ++c) {
            op[m * N + n0 + c] = r0[c] * sp[n0 + c];
            op[(m + 1) * N + n0 + c] = r1[c] * sp[n0 + c];
          }
        }
      }
      for (; m < M; ++m) {
        dot_one_row(xp + m * K, w, K, count, r0);
        for (int64_t c = 0; c < count; ++c) op[m * N + n0 + c] = r0[c] * sp[n0 + c];
      }
    }
  });
  return out;
}

}  // namespace minivllm
