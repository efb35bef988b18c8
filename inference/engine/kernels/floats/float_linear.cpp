// Linear layers over a GGUF's float16 / bfloat16 / float32 matrices (float_dot.h): the packer from
// the file's rows and y = x @ W.T. A row's result never depends on the rows beside it, and both
// ISA versions give the same bits.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common/cpu_isa.h"
#include "common/kernels.h"
#include "floats/float_dot.h"

namespace minivllm {
namespace {

FloatWeight float_weight(const std::string& kind) {
  TORCH_CHECK(kind == "f16" || kind == "bf16" || kind == "f32", "float weights are f16, bf16 or f32, not ", kind);
  return kind == "f16" ? FloatWeight::F16 : kind == "bf16" ? FloatWeight::BF16 : FloatWeight::F32;
}

void avx512_dot(FloatWeight weight, const float* x, int64_t rows, int64_t K, const uint8_t* block, float* out, int64_t out_stride,
                int64_t channels) {
  float_dot_avx512(weight, x, rows, K, block, out, out_stride, channels);
}

}  // namespace

PackJob float_pack_job(const std::vector<torch::Tensor>& raws, int64_t columns, const std::string& kind,
                       const std::optional<torch::Tensor>& order) {
  const int64_t element = float_bytes(float_weight(kind)), row = columns * element;
  std::vector<const uint8_t*> source;
  for (const auto& raw : raws) {
    TORCH_CHECK(raw.device().is_cpu() && raw.scalar_type() == torch::kByte && raw.is_contiguous() && raw.numel() % row == 0,
                "raws: contiguous uint8 tensors of whole ", kind, " rows of ", columns, " values");
    for (int64_t r = 0; r < raw.numel() / row; ++r) source.push_back(raw.data_ptr<uint8_t>() + r * row);
  }
  const int64_t rows = static_cast<int64_t>(source.size());
  if (order) source = ordered_rows(source, *order);
  const int64_t block_bytes = columns * kFloatChannels * element;
  PackJob job;
  job.blocks = (rows + kFloatChannels - 1) / kFloatChannels;
  job.packed = torch::empty({job.blocks, block_bytes}, torch::dtype(torch::kByte));
  uint8_t* to = job.packed.data_ptr<uint8_t>();
  job.pack_block = [=, source = std::move(source), keep = raws](int64_t channel_block) {  // keep: the rows' owners
    uint8_t* block_out = to + channel_block * block_bytes;
    std::memset(block_out, 0, block_bytes);  // padding channels: zero
    for (int64_t n = channel_block * kFloatChannels; n < std::min(rows, (channel_block + 1) * kFloatChannels); ++n) {
      uint8_t* column = block_out + (n % kFloatChannels) * element;
      for (int64_t k = 0; k < columns; ++k) std::memcpy(column + k * kFloatChannels * element, source[n] + k * element, element);
    }
  };
  return job;
}

torch::Tensor float_pack(const std::vector<torch::Tensor>& raws, int64_t columns, const std::string& kind,
                         const std::optional<torch::Tensor>& order) {
  std::vector<PackJob> jobs{float_pack_job(raws, columns, kind, order)};
  run_pack_jobs(jobs);
  return jobs[0].packed;
}

torch::Tensor float_linear(const torch::Tensor& x, const torch::Tensor& packed, int64_t out_features, const std::string& kind,
                           const std::string& isa) {
  TORCH_CHECK(x.device().is_cpu() && x.dim() == 2 && x.scalar_type() == torch::kFloat && x.is_contiguous(),
              "x: contiguous float32 [M, K] on CPU");
  const FloatWeight weight = float_weight(kind);
  const int64_t M = x.size(0), K = x.size(1), N = out_features;
  TORCH_CHECK(packed.device().is_cpu() && packed.dim() == 2 && packed.scalar_type() == torch::kByte && packed.is_contiguous() &&
                  packed.size(0) == (N + kFloatChannels - 1) / kFloatChannels && packed.size(1) == K * kFloatChannels * float_bytes(weight),
              "packed: float_pack's blocks of this ", kind, " [", N, ", ", K, "] weight");
  const FloatDotFn dot = by_isa<FloatDotFn>(isa, float_dot_avx2, avx512_dot, avx512_dot);
  auto out = torch::empty({M, N}, x.options());
  const float* xp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const uint8_t* wp = packed.data_ptr<uint8_t>();
  at::parallel_for(0, packed.size(0), 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b)
      dot(weight, xp, M, K, wp + b * packed.size(1), op + b * kFloatChannels, N, std::min(kFloatChannels, N - b * kFloatChannels));
  });
  return out;
}

}  // namespace minivllm
