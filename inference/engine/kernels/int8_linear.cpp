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

#include <vector>

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

// `weights`/`scales`: one int8 level, or several whose sum is the weight (a second level holds
// what the first one rounded away). Level outputs are summed in order, each scaled first.
torch::Tensor int8_linear(const torch::Tensor& x, const std::vector<torch::Tensor>& weights, const std::vector<torch::Tensor>& scales) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat && x.is_contiguous(), "x: contiguous float32 [M, K]");
  TORCH_CHECK(!weights.empty() && weights.size() == scales.size(), "one scales tensor per int8 weight level");
  const int64_t M = x.size(0), K = x.size(1), N = weights[0].size(0);
  TORCH_CHECK(K % 8 == 0, "K must be a multiple of 8");
  std::vector<const int8_t*> wp;
  std::vector<const float*> sp;
  for (size_t l = 0; l < weights.size(); ++l) {
    const auto& weight = weights[l];
    TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == torch::kChar && weight.is_contiguous(), "weight: contiguous int8 [N, K]");
    TORCH_CHECK(weight.size(0) == N && weight.size(1) == K, "x and the weight levels disagree on shape");
    TORCH_CHECK(scales[l].scalar_type() == torch::kFloat && scales[l].is_contiguous() && scales[l].numel() == N, "scales: contiguous float32 [N]");
    wp.push_back(weight.data_ptr<int8_t>());
    sp.push_back(scales[l].data_ptr<float>());
  }
  auto out = torch::empty({M, N}, x.options());
  const float* xp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const size_t levels = wp.size();
  const int64_t blocks = (N + kChannels - 1) / kChannels;
  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    float r0[kChannels], r1[kChannels];
    for (int64_t b = begin; b < end; ++b) {
      const int64_t n0 = b * kChannels;
      const int64_t count = std::min(kChannels, N - n0);
      int64_t m = 0;
      if (count == kChannels) {
        for (; m + 1 < M; m += 2) {
          float* o0 = op + m * N + n0;
          float* o1 = o0 + N;
          for (size_t l = 0; l < levels; ++l) {
            dot_two_rows(xp + m * K, xp + (m + 1) * K, wp[l] + n0 * K, K, r0, r1);
            const float* s = sp[l] + n0;
            for (int64_t c = 0; c < kChannels; ++c) {
              o0[c] = l ? o0[c] + r0[c] * s[c] : r0[c] * s[c];
              o1[c] = l ? o1[c] + r1[c] * s[c] : r1[c] * s[c];
            }
          }
        }
      }
      for (; m < M; ++m) {
        float* o = op + m * N + n0;
        for (size_t l = 0; l < levels; ++l) {
          dot_one_row(xp + m * K, wp[l] + n0 * K, K, count, r0);
          const float* s = sp[l] + n0;
          for (int64_t c = 0; c < count; ++c) o[c] = l ? o[c] + r0[c] * s[c] : r0[c] * s[c];
        }
      }
    }
  });
  return out;
}

}  // namespace minivllm
