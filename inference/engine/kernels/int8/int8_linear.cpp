// Weight-only int8 linear on CPU: y = x @ (w * scales[:, None]).T for float32 x.
//
// Each activation row is first rounded to int16 with its own scale (max |x| / 32767: a
// relative error ~30x below the int8 weights' own), then every output is an exact integer dot
// product (int8_dot.h) scaled back to float32. Exact integers make two promises cheap to keep:
// a row's result never depends on the batch around it (batching cannot change a request's
// tokens), and every ISA's version gives the same bits. Integer multiply-adds also do 2-4x
// the work per instruction of converting the weights to float (the kernel before this one).
#include <immintrin.h>
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "common/activation_rows.h"
#include "common/cpu_isa.h"
#include "int8/int8_amx.h"
#include "int8/int8_dot.h"
#include "common/kernels.h"

namespace minivllm {
namespace {

// Bytes ahead of its reads the dot products prefetch weights; 0 leaves it to the hardware. Which
// is faster depends on the machine (layers/linear/prefetch.py measures it at load), not on the call.
std::atomic<int64_t> prefetch_bytes{0};

}  // namespace

void set_weight_prefetch_bytes(int64_t bytes) {
  TORCH_CHECK(bytes >= 0 && bytes % kCacheLine == 0, "prefetch distance: whole cache lines of ", kCacheLine, " bytes, >= 0");
  prefetch_bytes.store(bytes);
}

int64_t weight_prefetch_bytes() { return prefetch_bytes.load(); }

namespace {

torch::Tensor pack_for_vectors(const torch::Tensor& source) {
  const int64_t N = source.size(0), K = source.size(1);
  auto packed = torch::empty_like(source);
  const int8_t* from = source.data_ptr<int8_t>();
  int8_t* to = packed.data_ptr<int8_t>();
  const int64_t grouped = K - K % kGroup;
  for (int64_t n0 = 0; n0 < N; n0 += kDotChannels) {
    const int64_t count = std::min(kDotChannels, N - n0);
    int8_t* block = to + n0 * K;
    for (int64_t c = 0; c < count; ++c) {
      const int8_t* row = from + (n0 + c) * K;
      for (int64_t k = 0; k < grouped; k += kGroup) std::memcpy(block + packed_group_offset(k, c, count), row + k, kGroup);
      if (grouped < K) std::memcpy(block + packed_tail_offset(K, grouped, c, count), row + grouped, K - grouped);
    }
  }
  return packed;
}

torch::Tensor pack_for_amx(const torch::Tensor& source) {
  const int64_t N = source.size(0), K = source.size(1), steps = amx_int8_padded_k(K) / kAmxInt8Step;
  TORCH_CHECK(K <= kAmxInt8MaxK, "the AMX int8 kernel takes K up to ", kAmxInt8MaxK);
  auto packed = torch::zeros({(N + kAmxInt8Channels - 1) / kAmxInt8Channels, steps, kAmxInt8StepBytes}, source.options());
  const int8_t* from = source.data_ptr<int8_t>();
  int8_t* to = packed.data_ptr<int8_t>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) to[amx_int8_offset(n, k, steps)] = from[n * K + k];
  return packed;
}

// Splits int16 rows into the AMX kernel's low (unsigned) and high (signed) bytes, [rows, Kp], padding zero.
void split_rows(const int16_t* xq, int64_t M, int64_t K, int64_t Kp, uint8_t* low, int8_t* high) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) {
      const int16_t v = xq[m * K + k];
      low[m * Kp + k] = static_cast<uint8_t>(v & 0xff);
      high[m * Kp + k] = static_cast<int8_t>(v >> 8);
    }
}

}  // namespace

torch::Tensor int8_pack_weight(const torch::Tensor& weight, const std::string& isa) {
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == torch::kChar, "weight: int8 [N, K]");
  TORCH_CHECK(weight.size(1) % 8 == 0, "K must be a multiple of 8");
  const auto source = weight.contiguous();
  // "auto" keeps wider rows than the AMX version takes in the vector layout, which takes any K
  const bool amx = isa == "auto" ? linear_isa() == "amx" && weight.size(1) <= kAmxInt8MaxK : checked_isa(isa) == "amx";
  return amx ? pack_for_amx(source) : pack_for_vectors(source);
}

// `weights`/`scales`: one int8 level (laid out by int8_pack_weight), or several whose sum is the
// weight (a second level holds what the first one rounded away). Level outputs are summed in
// order, each scaled first.
// `isa`: "auto" (the best this CPU has for the weights' layout) or one version by name, for tests.
torch::Tensor int8_linear(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                          const std::vector<torch::Tensor>& scales, const std::string& isa) {
  TORCH_CHECK(x.device().is_cpu(), "int8_linear runs on CPU tensors");
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat && x.is_contiguous(), "x: contiguous float32 [M, K]");
  TORCH_CHECK(!weights.empty() && weights.size() == scales.size(), "one scales tensor per int8 weight level");
  const int64_t M = x.size(0), K = x.size(1), N = scales[0].numel();
  TORCH_CHECK(K % 8 == 0, "K must be a multiple of 8");
  const bool amx = weights[0].dim() == 3;  // int8_pack_weight's AMX layout
  TORCH_CHECK(amx ? isa == "auto" || isa == "amx" : isa != "amx", "isa ", isa, " cannot read weights packed for ",
              amx ? "amx" : "the vector versions");
  if (amx) checked_isa("amx");
  const Int8DotFn dot = amx ? nullptr : by_isa<Int8DotFn>(isa, int8_dot_avx2, int8_dot_avx512bw, int8_dot_avx512_vnni);
  const int64_t Kp = amx_int8_padded_k(K);
  // The AMX layout keeps K only to a step of 64 and N to a block of 16: its shape check is that loose.
  const std::vector<int64_t> shape = amx ? std::vector<int64_t>{(N + kAmxInt8Channels - 1) / kAmxInt8Channels, Kp / kAmxInt8Step,
                                                                kAmxInt8StepBytes}
                                         : std::vector<int64_t>{N, K};
  std::vector<const int8_t*> wp;
  std::vector<const float*> sp;
  for (size_t l = 0; l < weights.size(); ++l) {
    const auto& weight = weights[l];
    TORCH_CHECK(weight.device().is_cpu() && weight.scalar_type() == torch::kChar && weight.is_contiguous(),
                "weight: contiguous int8 on CPU, as int8_pack_weight packs it");
    TORCH_CHECK(weight.sizes() == torch::IntArrayRef(shape), "x, the scales and the weight levels disagree on shape");
    TORCH_CHECK(scales[l].scalar_type() == torch::kFloat && scales[l].is_contiguous() && scales[l].numel() == N, "scales: contiguous float32 [N]");
    wp.push_back(weight.data_ptr<int8_t>());
    sp.push_back(scales[l].data_ptr<float>());
  }

  std::vector<int16_t> xq(M * K);
  std::vector<float> row_scales(M);
  const float* xp = x.data_ptr<float>();
  at::parallel_for(0, M, 16, [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m) row_scales[m] = quantize_row_int16(xp + m * K, K, xq.data() + m * K);
  });

  auto out = torch::empty({M, N}, x.options());
  float* op = out.data_ptr<float>();
  const size_t levels = wp.size();
  const int64_t prefetch = prefetch_bytes.load(std::memory_order_relaxed);
  if (M == 0) return out;
  if (amx) {
    // Rows in tiles of equal height (at most 16), the last padded with zero rows.
    const int64_t tiles = (M + kAmxInt8MaxRows - 1) / kAmxInt8MaxRows, tile_rows = (M + tiles - 1) / tiles;
    std::vector<uint8_t> low(tiles * tile_rows * Kp, 0);
    std::vector<int8_t> high(tiles * tile_rows * Kp, 0);
    split_rows(xq.data(), M, K, Kp, low.data(), high.data());
    at::parallel_for(0, shape[0], 1, [&](int64_t begin, int64_t end) {
      for (size_t l = 0; l < levels; ++l)
        int8_amx_blocks(low.data(), high.data(), M, tile_rows, Kp, wp[l], begin, end, N, sp[l], row_scales.data(), l > 0, prefetch, op);
    });
    return out;
  }

  const int64_t blocks = (N + kDotChannels - 1) / kDotChannels;
  // Scales a level's integer sums into a row's outputs: first level assigns, later ones add.
  auto emit = [&](size_t level, const int64_t* sums, int64_t m, int64_t n0, int64_t count) {
    float* o = op + m * N + n0;
    const float* s = sp[level] + n0;
    for (int64_t c = 0; c < count; ++c) {
      const float value = static_cast<float>(sums[c]) * s[c] * row_scales[m];
      o[c] = level ? o[c] + value : value;
    }
  };
  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    int64_t s0[kDotChannels], s1[kDotChannels];
    for (int64_t b = begin; b < end; ++b) {
      const int64_t n0 = b * kDotChannels;
      const int64_t count = std::min(kDotChannels, N - n0);
      int64_t m = 0;
      for (; m + 1 < M; m += 2) {  // two rows share each weight load
        for (size_t l = 0; l < levels; ++l) {
          dot(xq.data() + m * K, xq.data() + (m + 1) * K, wp[l] + n0 * K, K, count, prefetch, s0, s1);
          emit(l, s0, m, n0, count);
          emit(l, s1, m + 1, n0, count);
        }
      }
      for (; m < M; ++m) {
        for (size_t l = 0; l < levels; ++l) {
          dot(xq.data() + m * K, nullptr, wp[l] + n0 * K, K, count, prefetch, s0, nullptr);
          emit(l, s0, m, n0, count);
        }
      }
    }
  });
  return out;
}

}  // namespace minivllm
